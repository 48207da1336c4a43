"""The browser-facing side of an environment: its widget settings, token issue and verification, limits.

- :class:`Directory`: an Environment's browser settings (app id, allowed origins, web-client access),
  read from the API server and cached a few seconds (an origin removed from the list stops working
  within ``widget_config_cache_seconds``).
- :class:`WindowLimiter`: per-token and per-address limits, counted per facade replica in one-minute
  sliding windows (with N replicas behind a load balancer a client may get up to N times the limit;
  the environment's ``spec.rateLimits``, counted in the database, still bound the whole environment).
- :class:`WebService`: the token endpoints' rules (the widget's: allowed origins, or a site's server
  with an API key naming its signed-in user; a page carrying an API key: any site unless the environment
  lists its allowed origins; the web client's: same origin, public, kubernetes (signIn) or oidc, whose
  sign-in is :mod:`dockyard_api.web.sign_in`'s), token issue
  (renewal keeps the anonymous end user), and a token on the execute endpoint turned into an
  :class:`~dockyard_api.auth.EnvironmentCaller` with ``end_user``.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from dockyard_api.auth import Authenticator, EnvironmentCaller, bearer
from dockyard_api.settings import ApiSettings
from dockyard_api.web import tokens
from dockyard_api.web.schemas import IssuedToken, WebTokenRequest, WidgetTokenRequest
from dockyard_api.web.sign_in import OidcSignIn
from dockyard_core.errors import (
    DockyardError,
    ForbiddenError,
    KubeUnavailableError,
    NotFoundError,
    RateLimitedError,
    UnauthenticatedError,
    UpstreamError,
)
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.repository import Repository
from dockyard_core.resources.v1alpha1.environment import Access, Environment, WidgetSettings

WIDGET_KEY_ID = "widget"
"""The key id under which widget calls are counted (usage statistics, spec.rateLimits.requestsPerMinute)."""
WEB_KEY_ID = "web-client"
"""The key id under which web-client calls are counted."""


@dataclass(frozen=True)
class BrowserConfig:
    """What the browser side needs of one Environment."""

    namespace: str
    environment: str
    app: str
    display_name: str
    access: Access
    widget: WidgetSettings
    web_client_url: str | None = None
    """status.urls.webClientUrl (the OIDC redirect URI is {webClientUrl}oidc/callback)."""

    def origin_allowed(self, origin: str | None) -> bool:
        if not origin:
            return False
        return "*" in self.widget.allowed_origins or origin in self.widget.allowed_origins

    @property
    def restricted(self) -> bool:
        """Whether the owner has chosen to restrict the sites: ``spec.widget.allowedOrigins`` is not empty."""
        return bool(self.widget.allowed_origins)

    def key_origin_allowed(self, origin: str | None) -> bool:
        """Whether a page of ``origin`` may call the app with an API key it carries (SPEC §7's snippet with
        ``data-api-key``): any site while the list is empty, else the listed ones only."""
        return not self.restricted or self.origin_allowed(origin)

    @property
    def frame_ancestors(self) -> str:
        """The web client page's CSP frame-ancestors: itself and the widget's allowed sites."""
        if "*" in self.widget.allowed_origins:
            return "*"
        return " ".join(["'self'", *self.widget.allowed_origins])


def same_origin(origin: str | None, host: str | None) -> bool:
    """Whether a browser's Origin names the host the request was sent to (the page is the facade's own)."""
    if not origin or not host:
        return False
    try:
        parts = urlsplit(origin)
    except ValueError:  # e.g. "http://[x": not an origin a browser sends
        return False
    return parts.scheme in ("http", "https") and parts.netloc.lower() == host.lower()


class Directory:
    """Environments' browser settings, read from the API server with a short cache."""

    def __init__(self, kube: AsyncKube, ttl: float) -> None:
        self.environments = Repository(kube, Environment)
        self.ttl = ttl
        self._cache: dict[tuple[str, str], tuple[float, BrowserConfig | None]] = {}

    async def get(self, namespace: str, environment: str) -> BrowserConfig | None:
        hit = self._cache.get((namespace, environment))
        if hit and hit[0] > time.monotonic():
            return hit[1]
        try:
            env = await self.environments.find(namespace, environment)
        except ForbiddenError:  # the facade may not read it: as good as missing
            env = None
        except KubeUnavailableError:  # the API server is away: 503 with Retry-After, as every such answer
            raise
        except DockyardError as exc:
            raise UpstreamError(f"cannot read environment {namespace}/{environment}: {exc.message}") from exc
        config = _config(namespace, environment, env) if env is not None else None
        if self.ttl > 0:
            if len(self._cache) > 10_000:
                self._cache.clear()
            self._cache[(namespace, environment)] = (time.monotonic() + self.ttl, config)
        return config

    async def require(self, namespace: str, environment: str) -> BrowserConfig:
        config = await self.get(namespace, environment)
        if config is None:
            raise NotFoundError(f"environment {namespace}/{environment} does not exist")
        return config


def _config(namespace: str, environment: str, env: Environment) -> BrowserConfig:
    spec = env.spec
    return BrowserConfig(
        namespace=namespace,
        environment=environment,
        app=env.status.app_id or spec.app_ref,
        display_name=spec.display_name or environment,
        access=spec.access or Access(),
        widget=spec.widget or WidgetSettings(),
        web_client_url=env.status.urls.web_client_url if env.status.urls else None,
    )


def signed_in_for(mode: str, sub: str) -> bool:
    """Whether a web-client token of end user ``sub`` is still good for a page of access ``mode``: any on a
    public page; only a Kubernetes sign-in (``k8s:``) on a kubernetes page and only an OpenID Connect one
    (``oidc:``) on an oidc page; none on a disabled one."""
    prefix = {"public": "", "kubernetes": "k8s:", "oidc": "oidc:"}.get(mode)
    return prefix is not None and sub.startswith(prefix)


def _scope(token: str) -> tuple[str, str]:
    try:
        return tokens.unverified_scope(token)
    except tokens.TokenError:
        return ("", "")


@dataclass
class WindowLimiter:
    """At most ``limit`` events per key in any 60-second window (per replica)."""

    window: float = 60.0
    max_keys: int = 100_000
    _events: dict[str, deque[float]] = field(default_factory=dict)

    def hit(self, key: str, limit: int, what: str) -> None:
        now = time.monotonic()
        events = self._events.get(key)
        if events is None:
            if len(self._events) >= self.max_keys:
                self._prune(now)
            events = self._events[key] = deque()
        while events and events[0] <= now - self.window:
            events.popleft()
        if len(events) >= limit:
            retry = int(events[0] + self.window - now) + 1
            raise RateLimitedError(
                f"too many requests: {what} allows {limit} per minute; try again in {retry} s",
                {"limit": what, "value": limit},
                retry_after=retry,
            )
        events.append(now)

    def _prune(self, now: float) -> None:
        for key in [k for k, v in self._events.items() if not v or v[-1] <= now - self.window]:
            del self._events[key]
        if len(self._events) >= self.max_keys:
            self._events.clear()


@dataclass(frozen=True)
class Issued:
    token: str
    claims: tokens.Claims

    def answer(self, signed_in_as: str | None = None) -> IssuedToken:
        """The token endpoints' answer (``signed_in_as``: the user signed in to a kubernetes or oidc web
        client)."""
        return IssuedToken(
            token=self.token,
            expires_at=self.claims.exp,
            expires_in=self.claims.exp - self.claims.iat,
            end_user=self.claims.sub,
            app_id=self.claims.app,
            kind=self.claims.kind,
            signed_in_as=signed_in_as,
        )


class WebService:
    """Token issue and verification for the widget and the web client of every environment."""

    def __init__(self, kube: AsyncKube, settings: ApiSettings) -> None:
        self.settings = settings
        self.keys = tokens.SigningKeys(kube, settings)
        self.directory = Directory(kube, settings.widget_config_cache_seconds)
        self.limits = WindowLimiter()
        self.sign_in = OidcSignIn(kube, self)
        """The sign-in of web clients with access oidc (their login and callback)."""

    async def issue(
        self,
        config: BrowserConfig,
        *,
        kind: tokens.TokenKind,
        sub: str | None,
        ttl: int,
        previous: str | None = None,
    ) -> Issued:
        """A new token for ``sub``; with ``sub`` None, the anonymous user of ``previous`` when that is a
        renewable token of the same environment and app, else a new anonymous user."""
        key = await self.keys.key(config.namespace, config.environment)
        if sub is None and previous:
            try:
                old = tokens.verify(key, previous, leeway=self.settings.widget_renewal_days * 86400)
            except tokens.TokenError:
                old = None
            if old and old.renewable and old.kind == kind and old.app == config.app and old.env == config.environment:
                sub = old.sub
        now = int(time.time())
        claims = tokens.Claims(
            ns=config.namespace,
            env=config.environment,
            app=config.app,
            sub=sub or tokens.new_anonymous_user(),
            kind=kind,
            iat=now,
            exp=now + ttl,
            renewable=(sub is None or sub.startswith("anon-")),
        )
        return Issued(tokens.sign(key, claims), claims)

    async def widget_token(
        self,
        auth: Authenticator,
        namespace: str,
        environment: str,
        request: WidgetTokenRequest,
        *,
        authorization: str | None,
        origin: str | None,
        address: str,
    ) -> IssuedToken:
        """A widget token for a page of an allowed site (Origin checked), or, asked by a site's server with
        an API key of the environment, for one of the site's signed-in users (identify)."""
        config = await self.directory.require(namespace, environment)
        if request.app_id != config.app:
            raise NotFoundError(
                f"environment {namespace}/{environment} serves app {config.app!r}, not {request.app_id!r}",
                {"appId": config.app},
            )
        key = bearer(authorization)
        if key and not tokens.is_token(key):
            # a site's server vouches for one of its signed-in users (identify): the API key is the proof
            await auth.key_caller(namespace, environment, key, header="Authorization")  # 401/403 unless its key
            if not request.end_user:
                raise UnauthenticatedError("endUser is required with an API key (the site's id of its signed-in user)")
            sub = f"user:{request.end_user}"
            return (await self.issue(config, kind="widget", sub=sub, ttl=config.widget.token_ttl_seconds)).answer()
        if request.end_user:
            raise ForbiddenError(
                "endUser may only be set by a site's server with an API key (a page cannot choose who it is)",
                {"reason": "end_user_needs_api_key"},
            )
        if not config.origin_allowed(origin):
            raise ForbiddenError(
                f"the site {origin or '(no Origin header)'} is not allowed to use this chat: the environment's "
                f"owner can add it to spec.widget.allowedOrigins of environment {namespace}/{environment}",
                {
                    "reason": "origin_not_allowed",
                    "origin": origin,
                    "allowedOrigins": len(config.widget.allowed_origins),
                },
            )
        self.count_token(config, address)
        issued = await self.issue(
            config, kind="widget", sub=None, ttl=config.widget.token_ttl_seconds, previous=request.previous_token
        )
        return issued.answer()

    async def check_key_origin(self, namespace: str, environment: str, origin: str | None, host: str | None) -> None:
        """An API key used by a page of another site (a snippet carrying ``data-api-key``): 403
        ``origin_not_allowed`` when the environment restricts its sites and this one is not listed. Calls
        without an Origin (servers) and from the facade's own pages pass."""
        if not origin or same_origin(origin, host):
            return
        config = await self.directory.require(namespace, environment)
        if not config.key_origin_allowed(origin):
            raise ForbiddenError(
                f"the site {origin} is not allowed to use this chat: environment {namespace}/{environment} "
                "restricts its sites to spec.widget.allowedOrigins",
                {"reason": "origin_not_allowed", "origin": origin},
            )

    async def page_config(self, namespace: str, environment: str) -> BrowserConfig:
        """The environment's browser settings, when it has a web client (404 otherwise)."""
        config = await self.directory.get(namespace, environment)
        if config is None or config.access.mode == "disabled":
            raise NotFoundError(f"environment {namespace}/{environment} has no web client")
        return config

    async def web_token(
        self,
        auth: Authenticator,
        namespace: str,
        environment: str,
        request: WebTokenRequest,
        *,
        authorization: str | None,
        origin: str | None,
        host: str | None,
        address: str,
    ) -> IssuedToken:
        """A token for the web client page itself (same origin): anonymous on a public page; on a kubernetes
        page for the holder of a Kubernetes token who may get the Environment; on an oidc page the token the
        sign-in's callback handed to the page (``Authorization: Bearer``), checked and answered."""
        config = await self.page_config(namespace, environment)
        if not same_origin(origin, host):
            raise ForbiddenError(
                "web-client tokens are only issued to the web client page itself (same origin); sites embed the widget",
                {"reason": "origin"},
            )
        self.count_token(config, address)
        if config.access.mode == "public":
            issued = await self.issue(
                config, kind="web", sub=None, ttl=config.widget.token_ttl_seconds, previous=request.previous_token
            )
            return issued.answer()
        if config.access.mode == "oidc":
            return await self._oidc_web_token(config, bearer(authorization))
        if not bearer(authorization):
            raise UnauthenticatedError(
                f"the web client of {namespace}/{environment} needs a sign-in: a Kubernetes token of a user who may "
                "get the Environment (kubectl create token ...)",
                {"reason": "sign_in_required"},
            )
        user = await auth.user(authorization)
        await auth.require(user, verb="get", namespace=namespace, resource="environments")
        issued = await self.issue(config, kind="web", sub=f"k8s:{user.username}", ttl=self.settings.web_sign_in_seconds)
        return issued.answer(signed_in_as=user.username)

    async def _oidc_web_token(self, config: BrowserConfig, token: str | None) -> IssuedToken:
        if token and tokens.is_token(token):
            try:
                claims = tokens.verify(await self.keys.key(config.namespace, config.environment), token)
            except tokens.TokenError as exc:
                raise UnauthenticatedError(exc.message, {"reason": exc.reason}) from exc
            if claims.kind == "web" and claims.app == config.app and signed_in_for("oidc", claims.sub):
                return Issued(token, claims).answer(signed_in_as=claims.sub.removeprefix("oidc:"))
        raise UnauthenticatedError(
            f"the web client of {config.namespace}/{config.environment} needs a sign-in with its OpenID provider",
            {"reason": "sign_in_required", "signIn": "oidc", "signInUrl": "oidc/login"},
        )

    def count_token(self, config: BrowserConfig, address: str) -> None:
        """Tokens issued to one address, per minute (spec.widget.tokensPerMinutePerAddress; 429 over it); an
        OIDC sign-in started counts as one."""
        self.limits.hit(
            f"t/{config.namespace}/{config.environment}/{address}",
            config.widget.tokens_per_minute_per_address,
            "spec.widget.tokensPerMinutePerAddress",
        )

    async def caller(
        self, *, namespace: str, environment: str, token: str, origin: str | None, host: str | None, address: str
    ) -> EnvironmentCaller:
        """The caller of a widget or web-client token on the deployed-app API (401 expired or invalid, 403
        another environment or a site no longer allowed, 429 over the per-token or per-address limit)."""
        try:
            claims = tokens.verify(await self.keys.key(namespace, environment), token)
        except tokens.TokenError as exc:
            scope = _scope(token)
            if exc.reason == "signature" and all(scope) and scope != (namespace, environment):
                raise ForbiddenError(
                    f"this token belongs to environment {scope[0]}/{scope[1]}, not {namespace}/{environment}",
                    {"reason": "other_environment"},
                ) from exc
            raise UnauthenticatedError(exc.message, {"reason": exc.reason}) from exc
        config = await self.directory.require(namespace, environment)
        if claims.app != config.app:
            raise ForbiddenError(f"this token is for app {claims.app!r}, not {config.app!r}", {"reason": "other_app"})
        if claims.kind == "web":
            if not signed_in_for(config.access.mode, claims.sub):
                raise UnauthenticatedError(
                    f"the web client of {namespace}/{environment} is now {config.access.mode}: sign in again",
                    {"reason": "access_changed"},
                )
            if origin and not same_origin(origin, host):
                raise ForbiddenError(f"a web-client token is not usable from {origin}", {"reason": "origin"})
        elif origin and not config.origin_allowed(origin):
            raise ForbiddenError(
                f"the site {origin} is not allowed to use this chat (spec.widget.allowedOrigins of "
                f"environment {namespace}/{environment})",
                {"reason": "origin_not_allowed", "origin": origin},
            )
        self.limits.hit(f"u/{namespace}/{environment}/{claims.sub}", config.widget.requests_per_minute_per_token,
                        "spec.widget.requestsPerMinutePerToken")  # fmt: skip
        self.limits.hit(f"a/{namespace}/{environment}/{address}", config.widget.requests_per_minute_per_address,
                        "spec.widget.requestsPerMinutePerAddress")  # fmt: skip
        key_id = WEB_KEY_ID if claims.kind == "web" else WIDGET_KEY_ID
        return EnvironmentCaller(namespace, environment, claims.app, key_id, end_user=claims.sub)
