"""The facade's FastAPI dependencies, in one place: what a route may ask for by type.

Routers take these (``kube: Kube``, ``settings: Settings``, ``app: AppName``, ...) and never import one
another; the callers' identities (``PublicCaller``, ``KubeUser``, ...) are in :mod:`dockyard_api.auth`.
Everything here is built once at start-up by :func:`dockyard_api.app.create_app` and kept on
``app.state``.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path, Request

from dockyard_api.import_service import ImportService
from dockyard_api.runtime.service import Runtime
from dockyard_api.settings import ApiSettings
from dockyard_core.kubeclient import AsyncKube

# --- path parameters shared by several routers ----------------------------------------------------

AppName = Annotated[str, Path(min_length=1, max_length=63, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")]
"""An App's name (a DNS label)."""
EnvName = Annotated[str, Path(min_length=1, max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")]
"""An Environment's name (a DNS subdomain)."""
VersionParam = Annotated[str, Path(pattern=r"^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)$", max_length=32)]
"""An AppVersion's version, MAJOR.MINOR.PATCH."""

# --- services built at start-up ---------------------------------------------------------------------


async def get_kube(request: Request) -> AsyncKube:  # async: no thread-pool hop per request
    kube: AsyncKube = request.app.state.kube
    return kube


async def get_settings(request: Request) -> ApiSettings:
    settings: ApiSettings = request.app.state.settings
    return settings


async def get_imports(request: Request) -> ImportService:
    imports: ImportService = request.app.state.imports
    return imports


async def get_runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


Kube = Annotated[AsyncKube, Depends(get_kube)]
"""The one async Kubernetes client (the facade's own identity; act as the caller with ``as_user``)."""
Settings = Annotated[ApiSettings, Depends(get_settings)]
Imports = Annotated[ImportService, Depends(get_imports)]
RuntimeDep = Annotated[Runtime, Depends(get_runtime)]
