"""The facade's FastAPI dependencies, in one place: what a route may ask for by type.

Routers take these (``kube: Kube``, ``settings: Settings``, ``namespace: NamespaceParam``,
``caller: PublicCaller``, ...) and never import one another, nor read ``app.state``:

- the path parameters (defined in :mod:`dockyard_api.params` with core's patterns; re-exported here);
- what :func:`dockyard_api.app.create_app` builds once at start-up: one :class:`AppState`, stored on the
  application once (:meth:`AppState.install`), and one getter per piece of it;
- the callers' identities (``PublicCaller``, ``AppCaller``, ``KubeUser``), checked by
  :class:`dockyard_api.auth.Authenticator`.

Code that has no request to declare dependencies on (the CORS middleware, the console's page helpers)
reads the same typed :class:`AppState` through :func:`state_of` / :func:`app_state`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Header, Request

from dockyard_api.auth import Authenticator, EnvironmentCaller, bearer
from dockyard_api.cache import Informer
from dockyard_api.console.session import Sealer
from dockyard_api.management.analytics.service import AnalyticsService
from dockyard_api.management.apps.service import AppService
from dockyard_api.management.canary.service import CanaryService
from dockyard_api.management.catalog.service import CatalogService
from dockyard_api.management.environments.service import EnvironmentService
from dockyard_api.management.evaluations.service import EvaluationService
from dockyard_api.management.keys.service import KeyService
from dockyard_api.management.services import Management
from dockyard_api.management.tooltests.service import ToolTestService
from dockyard_api.management.usage.service import UsageService
from dockyard_api.params import (
    AppId,
    AppName,
    DockStatusId,
    DocumentName,
    EnvName,
    KeyId,
    KnowledgeBaseName,
    ModelId,
    NamespaceParam,
    RunId,
    SessionId,
    ToolId,
    VersionParam,
)
from dockyard_api.public.deploy.service import DeployService
from dockyard_api.public.dock_status.service import DockStatusService
from dockyard_api.public.imports.service import ImportService
from dockyard_api.runtime.service import AppRuntime
from dockyard_api.settings import ApiSettings
from dockyard_api.store import ConversationStore
from dockyard_api.web import tokens as web_tokens
from dockyard_api.web.service import WebService
from dockyard_core.errors import DatabaseUnavailableError
from dockyard_core.kubeclient import AsyncKube, User
from dockyard_core.repository import Repositories

__all__ = [
    "AnalyticsDep",
    "AppCaller",
    "AppId",
    "AppName",
    "AppState",
    "AppsDep",
    "Auth",
    "CallerRepositories",
    "CanaryDep",
    "CatalogDep",
    "ConversationDb",
    "Deploys",
    "DockStatus",
    "DockStatusId",
    "DocumentName",
    "DownloadTokenKey",
    "EnvName",
    "EnvironmentsDep",
    "EvaluationsDep",
    "Imports",
    "KeyId",
    "KeysDep",
    "KnowledgeBaseName",
    "Kube",
    "KubeUser",
    "ModelCache",
    "ModelId",
    "NamespaceParam",
    "PublicCaller",
    "RunId",
    "RuntimeDep",
    "SessionId",
    "Settings",
    "ToolId",
    "ToolTestsDep",
    "UsageDep",
    "VersionParam",
    "Web",
    "management_of",
]

# --- what start-up builds -----------------------------------------------------------------------------


@dataclass
class AppState:
    """Everything the facade builds once at start-up (:func:`dockyard_api.app.create_app`'s lifespan)."""

    settings: ApiSettings
    kube: AsyncKube
    """The one async Kubernetes client (the facade's own identity; act as the caller with ``as_user``)."""
    authenticator: Authenticator
    web: WebService
    imports: ImportService
    download_token_key: bytes
    console_sealer: Sealer
    models: Informer | None
    """The watch-fed cache of Models (None with ``watch_models`` off)."""
    store: ConversationStore
    runtime: AppRuntime

    def install(self, app: FastAPI) -> None:
        app.state.dockyard = self


def state_of(app: Any) -> AppState:
    """The application's :class:`AppState` (AttributeError before start-up, as any ``app.state`` read)."""
    state: AppState = app.state.dockyard
    return state


def app_state(request: Request) -> AppState:
    return state_of(request.app)


# --- one getter per piece (async: no thread-pool hop per request) -------------------------------------


async def get_settings(request: Request) -> ApiSettings:
    return app_state(request).settings


async def get_kube(request: Request) -> AsyncKube:
    return app_state(request).kube


async def get_authenticator(request: Request) -> Authenticator:
    return app_state(request).authenticator


async def get_web(request: Request) -> WebService:
    return app_state(request).web


async def get_imports(request: Request) -> ImportService:
    return app_state(request).imports


async def get_download_token_key(request: Request) -> bytes:
    return app_state(request).download_token_key


async def get_deploys(request: Request) -> DeployService:
    """The public deploys' service (built per request over the start-up client, settings and Model cache)."""
    state = app_state(request)
    return DeployService(state.kube, state.settings, state.models)


async def get_dock_status(request: Request) -> DockStatusService:
    return DockStatusService(app_state(request).kube)


async def get_models(request: Request) -> Informer | None:
    """The Model cache, or None when there is none (a route then reads the API server)."""
    state: AppState | None = getattr(request.app.state, "dockyard", None)
    return state.models if state is not None else None


def store_of(request: Request) -> ConversationStore:
    """The conversation database; 503 where the facade has none (an application that was not started)."""
    state: AppState | None = getattr(request.app.state, "dockyard", None)
    if state is None:
        raise DatabaseUnavailableError("the conversation database is not configured")
    return state.store


async def get_store(request: Request) -> ConversationStore:
    return store_of(request)


async def get_runtime(request: Request) -> AppRuntime:
    return app_state(request).runtime


Settings = Annotated[ApiSettings, Depends(get_settings)]
Kube = Annotated[AsyncKube, Depends(get_kube)]
"""The one async Kubernetes client (the facade's own identity; act as the caller with ``as_user``)."""
Auth = Annotated[Authenticator, Depends(get_authenticator)]
Web = Annotated[WebService, Depends(get_web)]
"""The web client's and widget's service (their tokens, the environments' page settings)."""
Imports = Annotated[ImportService, Depends(get_imports)]
Deploys = Annotated[DeployService, Depends(get_deploys)]
"""The public model and tool deploys (docs/public-api.md, 'Deploy a model', 'Deploy a tool')."""
DockStatus = Annotated[DockStatusService, Depends(get_dock_status)]
"""The dock-status lookup (docs/public-api.md, 'Dock status')."""
DownloadTokenKey = Annotated[bytes, Depends(get_download_token_key)]
ModelCache = Annotated[Informer | None, Depends(get_models)]
ConversationDb = Annotated[ConversationStore, Depends(get_store)]
RuntimeDep = Annotated[AppRuntime, Depends(get_runtime)]

# --- who is calling (docs in dockyard_api.auth) -------------------------------------------------------


async def public_caller(
    namespace: NamespaceParam,
    environment: EnvName,
    auth: Auth,
    x_api_key: Annotated[str | None, Header(description="An API key of this environment")] = None,
) -> EnvironmentCaller:
    return await auth.key_caller(namespace, environment, x_api_key)


async def app_caller(
    request: Request,
    namespace: NamespaceParam,
    environment: EnvName,
    authorization: Annotated[
        str | None, Header(description="Bearer <API key of this environment, or a widget / web-client token>")
    ] = None,
) -> EnvironmentCaller:
    # the authenticator and the web service read from the state, not as dependencies of their own: this is the
    # execute call's (every turn), and each dependency FastAPI resolves costs a request about 6 µs (in a loop;
    # docs/benchmarks.md, "The execute call's route and dependencies")
    state = app_state(request)
    auth, web = state.authenticator, state.web
    value = bearer(authorization)
    if value and web_tokens.is_token(value):  # a short-lived widget / web-client token: end_user is set
        return await web.caller(
            namespace=namespace,
            environment=environment,
            token=value,
            origin=request.headers.get("origin"),
            host=request.headers.get("host"),
            address=request.client.host if request.client else "",
        )
    caller = await auth.key_caller(namespace, environment, value, header="Authorization")
    # a page carrying the key (SPEC §7's snippet): any site unless the owner listed allowed origins
    await web.check_key_origin(namespace, environment, request.headers.get("origin"), request.headers.get("host"))
    return caller


async def kube_user(
    auth: Auth,
    authorization: Annotated[str | None, Header(description="Bearer <Kubernetes token>")] = None,
) -> User:
    return await auth.user(authorization)


PublicCaller = Annotated[EnvironmentCaller, Depends(public_caller)]
"""A public-API caller (``x-api-key``) of the environment in the path."""
AppCaller = Annotated[EnvironmentCaller, Depends(app_caller)]
"""A deployed-app caller (``Authorization: Bearer <API key>``, or a widget / web-client token, which sets
``end_user``) of the environment in the path."""
KubeUser = Annotated[User, Depends(kube_user)]
"""A Kubernetes user (``Authorization: Bearer <token>``), for the management endpoints."""

# --- the management services: built per request, acting as the calling Kubernetes user -----------------
# (dockyard_api.management.base: what a service acts as; the console builds them with management_of)


async def caller_repositories(kube: Kube, user: KubeUser) -> Repositories:
    return Repositories.of(kube, user)


CallerRepositories = Annotated[Repositories, Depends(caller_repositories)]
"""Core's repositories acting as the calling Kubernetes user (impersonation: RBAC decides)."""


async def get_app_service(repos: CallerRepositories, auth: Auth) -> AppService:
    return AppService(repos, auth)


async def get_environment_service(repos: CallerRepositories, auth: Auth) -> EnvironmentService:
    return EnvironmentService(repos, auth)


async def get_key_service(repos: CallerRepositories, auth: Auth) -> KeyService:
    return KeyService(repos, auth)


async def get_canary_service(repos: CallerRepositories, auth: Auth) -> CanaryService:
    return CanaryService(repos, auth)


async def get_catalog_service(repos: CallerRepositories) -> CatalogService:
    return CatalogService(repos)


async def get_usage_service(user: KubeUser, auth: Auth, store: ConversationDb) -> UsageService:
    return UsageService(store, auth, user)


async def get_analytics_service(user: KubeUser, auth: Auth, store: ConversationDb) -> AnalyticsService:
    return AnalyticsService(store, auth, user)


async def get_tool_test_service(repos: CallerRepositories, auth: Auth, runtime: RuntimeDep) -> ToolTestService:
    return ToolTestService(repos, auth, runtime)


async def get_evaluation_service(
    repos: CallerRepositories, auth: Auth, runtime: RuntimeDep, store: ConversationDb
) -> EvaluationService:
    return EvaluationService(repos, auth, runtime, store)


AppsDep = Annotated[AppService, Depends(get_app_service)]
EnvironmentsDep = Annotated[EnvironmentService, Depends(get_environment_service)]
KeysDep = Annotated[KeyService, Depends(get_key_service)]
CatalogDep = Annotated[CatalogService, Depends(get_catalog_service)]
CanaryDep = Annotated[CanaryService, Depends(get_canary_service)]
UsageDep = Annotated[UsageService, Depends(get_usage_service)]
AnalyticsDep = Annotated[AnalyticsService, Depends(get_analytics_service)]
ToolTestsDep = Annotated[ToolTestService, Depends(get_tool_test_service)]
EvaluationsDep = Annotated[EvaluationService, Depends(get_evaluation_service)]


def management_of(state: AppState, user: User) -> Management:
    """Every management service acting as ``user``: for the console's pages (no route dependencies there)."""
    return Management.of(Repositories.of(state.kube, user), state.authenticator, state.store, state.runtime)
