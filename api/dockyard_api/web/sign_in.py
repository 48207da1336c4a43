"""The web client's sign-in through an OpenID Connect provider: the login redirect and the callback
(the protocol's pure parts and the provider's HTTP are :mod:`dockyard_api.web.oidc`).

The callback ends by issuing the same short-lived web token as the other access modes, for end user
``oidc:<email or sub>``, and sends the browser back to the web client page with that token in the URL
fragment (``#dockyard-sign-in=<token>``; a fragment never reaches a server, and the page removes it at
once and asks ``POST {base}/web/token`` to confirm it, as it asks for any token).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import TYPE_CHECKING

import jwt

from dockyard_api.web import oidc
from dockyard_core.errors import ConflictError, DockyardError, KubeUnavailableError, UnauthenticatedError, UpstreamError
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.repository import Objects
from dockyard_core.resources.v1alpha1.environment import OidcSettings

if TYPE_CHECKING:  # the web service makes its sign-in (it imports this module)
    from dockyard_api.web.service import BrowserConfig, WebService

SECRET_KEY = "clientSecret"
"""The key of spec.access.oidc.clientSecretRef's Secret that holds the client secret."""
FRAGMENT = "dockyard-sign-in"
"""The URL fragment's name that hands the issued token to the web client page."""


@dataclass(frozen=True)
class Redirect:
    """Where to send the browser, and the sign-in cookie to set (None: clear it)."""

    location: str
    cookie: str | None
    cookie_path: str


class OidcSignIn:
    """The login and the callback of web clients with access oidc."""

    def __init__(self, kube: AsyncKube, web: WebService, provider: oidc.Provider | None = None) -> None:
        self.web = web
        self.secrets = Objects(kube, "secrets", "Secret")
        self.provider = provider or oidc.Provider()

    async def _config(self, namespace: str, environment: str) -> tuple[BrowserConfig, OidcSettings]:
        config = await self.web.page_config(namespace, environment)  # 404 when disabled or missing
        settings = config.access.oidc
        if config.access.mode != "oidc" or settings is None:
            raise UnauthenticatedError(
                f"the web client of {namespace}/{environment} is now {config.access.mode}: no OpenID sign-in",
                {"reason": "access_changed", "webClient": config.access.mode},
            )
        return config, settings

    @staticmethod
    def redirect_uri(config: BrowserConfig, page_url: str) -> str:
        """{webClientUrl}oidc/callback: the redirect URI to register at the provider (the page's own URL
        where the operator has not published the environment's URLs yet)."""
        return (config.web_client_url or page_url) + "oidc/callback"

    @staticmethod
    def cookie_path(namespace: str, environment: str) -> str:
        return f"/e/{namespace}/{environment}/web/oidc/"

    async def login(self, namespace: str, environment: str, page_url: str, address: str) -> Redirect:
        """The provider's authorization URL for a new sign-in, and the cookie that remembers it (counted
        against spec.widget.tokensPerMinutePerAddress: each may make the facade ask the provider)."""
        config, settings = await self._config(namespace, environment)
        self.web.count_token(config, address)
        discovery = await self.provider.discovery(settings.issuer)
        pending = oidc.PendingSignIn.new()
        location = oidc.authorization_url(
            discovery,
            client_id=settings.client_id,
            redirect_uri=self.redirect_uri(config, page_url),
            scopes=settings.scopes,
            pending=pending,
        )
        key = await self.web.keys.key(namespace, environment)
        return Redirect(location, pending.seal(key), self.cookie_path(namespace, environment))

    async def callback(
        self,
        namespace: str,
        environment: str,
        page_url: str,
        *,
        code: str | None,
        state: str | None,
        error: str | None,
        error_description: str | None,
        cookie: str | None,
    ) -> Redirect:
        """Checks the provider's answer, exchanges the code, verifies the ID token and issues the web token;
        the browser goes back to the page with it."""
        config, settings = await self._config(namespace, environment)
        key = await self.web.keys.key(namespace, environment)
        pending = oidc.PendingSignIn.open(key, cookie, state)
        if error:
            raise oidc.SignInError(
                "provider_error",
                f"the provider did not sign you in: {error}" + (f" ({error_description})" if error_description else ""),
                error=error,
            )
        if not code:
            raise oidc.BadStateError("the provider's answer has no code: start the sign-in again")
        discovery = await self.provider.discovery(settings.issuer)
        answer = await self.provider.exchange(
            discovery,
            code=code,
            redirect_uri=self.redirect_uri(config, page_url),
            client_id=settings.client_id,
            secret=await self._client_secret(namespace, settings),
            verifier=pending.verifier,
        )
        id_token = str(answer["id_token"])
        keys = await self.provider.keys(discovery)
        if oidc.key_for(keys, _kid(id_token)) is None:  # the provider rotated its keys: read them again
            keys = await self.provider.keys(discovery, fresh=True)
        claims = oidc.verify_id_token(
            id_token, keys, issuer=str(discovery["issuer"]), client_id=settings.client_id, nonce=pending.nonce
        )
        userinfo = None
        if not claims.get("email"):
            userinfo = await self.provider.userinfo(discovery, str(answer.get("access_token") or ""))
        sub = oidc.user_of(claims, userinfo)
        issued = await self.web.issue(config, kind="web", sub=sub, ttl=self.web.settings.web_sign_in_seconds)
        page = config.web_client_url or page_url
        return Redirect(f"{page}#{FRAGMENT}={issued.token}", None, self.cookie_path(namespace, environment))

    async def _client_secret(self, namespace: str, settings: OidcSettings) -> str | None:
        name = settings.client_secret_ref
        if name is None:
            return None
        field = "spec.access.oidc.clientSecretRef"
        try:
            secret = await self.secrets.find(namespace, name)
        except KubeUnavailableError:
            raise
        except DockyardError as exc:
            raise UpstreamError(f"cannot read the client secret {namespace}/{name}: {exc.message}") from exc
        value = ((secret or {}).get("data") or {}).get(SECRET_KEY)
        if not value:
            raise ConflictError(
                f"the Secret {namespace}/{name} named by {field} does not exist or has no {SECRET_KEY!r} key",
                {"reason": "client_secret_missing", "field": field},
            )
        return base64.b64decode(value).decode()


def _kid(id_token: str) -> object:
    try:
        return jwt.get_unverified_header(id_token).get("kid")
    except jwt.PyJWTError:
        return None
