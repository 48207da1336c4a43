"""Short-lived tokens of the widget and the web client: signed, verified without any lookup.

A token is ``dyw1.<payload>.<signature>``: the payload is base64url JSON (namespace, environment, app, end
user, kind, issue and expiry times), the signature an HMAC-SHA256 over ``dyw1.<payload>`` with a key
derived for that namespace and environment. Verifying one is an HMAC and a clock comparison; nothing is
stored per token, so any facade replica verifies any token.

The key of a namespace comes from the setting ``DOCKYARD_API_WIDGET_SIGNING_KEY`` or, when it is unset,
from the Secret ``dockyard-widget-signing-key`` of that namespace, which the facade creates with 32 random
bytes on first use (every replica then reads the same Secret; deleting it rotates the key).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any, Literal

from dockyard_api.settings import ApiSettings
from dockyard_core.errors import ConflictError, DockyardError, KubeUnavailableError, UpstreamError
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.repository import Objects

PREFIX = "dyw1"
SECRET_NAME = "dockyard-widget-signing-key"
SECRET_KEY = "key"

TokenKind = Literal["widget", "web"]
"""widget: issued to an allowed site's page (or to a site's server for identify); web: the web client."""


class TokenError(Exception):
    """A token that is not valid: ``reason`` is malformed, signature, expired or scope."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


@dataclass(frozen=True)
class Claims:
    ns: str
    env: str
    app: str
    sub: str
    """The end user: ``anon-<random>`` (anonymous visitor), ``user:<id>`` (a site's signed-in user, see
    identify) or ``k8s:<username>`` (signed in to the web client with a Kubernetes token)."""
    kind: TokenKind
    iat: int
    exp: int
    renewable: bool
    """Only anonymous tokens may be renewed after they expired (the visitor keeps the conversation)."""

    @property
    def anonymous(self) -> bool:
        return self.sub.startswith("anon-")


def is_token(value: str | None) -> bool:
    """Whether a bearer value is a widget/web token (API keys look different)."""
    return bool(value) and str(value).startswith(PREFIX + ".")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def derive(base_key: bytes, namespace: str, environment: str) -> bytes:
    """The key of one environment: a token of one environment never verifies in another."""
    return hmac.new(base_key, f"dockyard-widget/v1/{namespace}/{environment}".encode(), hashlib.sha256).digest()


def new_anonymous_user() -> str:
    return "anon-" + secrets.token_urlsafe(12)


def sign(key: bytes, claims: Claims) -> str:
    payload = _b64(json.dumps(asdict(claims), separators=(",", ":"), sort_keys=True).encode())
    body = f"{PREFIX}.{payload}"
    signature = hmac.new(key, body.encode(), hashlib.sha256).digest()
    return f"{body}.{_b64(signature)}"


def unverified_scope(token: str) -> tuple[str, str]:
    """The namespace and environment a token claims (to pick the key that verifies it)."""
    claims = _payload(token)
    return str(claims.get("ns", "")), str(claims.get("env", ""))


def _payload(token: str) -> dict[str, Any]:
    parts = token.split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise TokenError("malformed", "the token is malformed")
    try:
        data = json.loads(_unb64(parts[1]))
    except (ValueError, binascii.Error, RecursionError) as exc:
        raise TokenError("malformed", "the token is malformed") from exc
    if not isinstance(data, dict):
        raise TokenError("malformed", "the token is malformed")
    return data


def verify(key: bytes, token: str, *, now: float | None = None, leeway: float = 0) -> Claims:
    """The token's claims when its signature holds and it has not expired (``leeway`` seconds after its
    expiry still count, for renewals); raises :class:`TokenError`."""
    body, _, signature = token.rpartition(".")
    if body.count(".") != 1 or not body.startswith(PREFIX + "."):
        raise TokenError("malformed", "the token is malformed")
    try:
        given = _unb64(signature)
    except (ValueError, binascii.Error) as exc:
        raise TokenError("malformed", "the token is malformed") from exc
    if not hmac.compare_digest(hmac.new(key, body.encode(), hashlib.sha256).digest(), given):
        raise TokenError("signature", "the token's signature is not valid (forged, or the signing key was rotated)")
    data = _payload(token)  # parsed only once the signature holds: what we signed ourselves
    try:
        claims = Claims(
            ns=str(data["ns"]),
            env=str(data["env"]),
            app=str(data["app"]),
            sub=str(data["sub"]),
            kind="web" if data["kind"] == "web" else "widget",
            iat=int(data["iat"]),
            exp=int(data["exp"]),
            renewable=bool(data["renewable"]),
        )
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        raise TokenError("malformed", "the token is malformed") from exc
    if (time.time() if now is None else now) >= claims.exp + leeway:
        raise TokenError("token_expired", "the token has expired: get a new one")
    return claims


class SigningKeys:
    """Signing keys per namespace: from the setting, or from the namespace's Secret (created on first use)."""

    def __init__(self, kube: AsyncKube, settings: ApiSettings) -> None:
        self.secrets = Objects(kube, "secrets", "Secret")
        self.settings = settings
        self._cache: dict[str, tuple[float, bytes]] = {}

    async def key(self, namespace: str, environment: str) -> bytes:
        return derive(await self._base(namespace), namespace, environment)

    async def _base(self, namespace: str) -> bytes:
        if self.settings.widget_signing_key is not None:
            return self.settings.widget_signing_key.get_secret_value().encode()
        hit = self._cache.get(namespace)
        if hit and hit[0] > time.monotonic():
            return hit[1]
        key = await self._read_or_create(namespace)
        if self.settings.widget_key_cache_seconds > 0:
            self._cache[namespace] = (time.monotonic() + self.settings.widget_key_cache_seconds, key)
        return key

    async def _read_or_create(self, namespace: str) -> bytes:
        for _ in range(2):
            try:
                secret = await self.secrets.find(namespace, SECRET_NAME)
            except KubeUnavailableError:  # the API server is away: 503 with Retry-After
                raise
            except DockyardError as exc:
                raise UpstreamError(f"cannot read the widget signing key: {exc.message}") from exc
            if secret is not None:
                value = (secret.get("data") or {}).get(SECRET_KEY)
                if value:
                    return base64.b64decode(value)
                raise UpstreamError(f"Secret {namespace}/{SECRET_NAME} has no {SECRET_KEY!r} entry")
            body = {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": SECRET_NAME,
                    "namespace": namespace,
                    "labels": {"app.kubernetes.io/managed-by": "dockyard", "app.kubernetes.io/component": "widget"},
                    "annotations": {
                        "dockyard.dev/purpose": "HMAC key of the widget and web-client tokens of this namespace's "
                        "environments; delete it to rotate (every token becomes invalid)"
                    },
                },
                "type": "Opaque",
                "data": {SECRET_KEY: base64.b64encode(secrets.token_bytes(32)).decode()},
            }
            try:
                created = await self.secrets.create(namespace, body)
                return base64.b64decode(created["data"][SECRET_KEY])
            except ConflictError:  # another replica created it first: read theirs
                continue
            except KubeUnavailableError:
                raise
            except DockyardError as exc:
                raise UpstreamError(f"cannot create the widget signing key: {exc.message}") from exc
        raise UpstreamError(f"cannot read the widget signing key Secret {namespace}/{SECRET_NAME}")
