"""Signing in to the web client through an OpenID Connect provider (``spec.access.webClient: oidc``).

The authorization-code flow with PKCE, state and nonce (OpenID Connect Core 1.0 §3.1):

1. ``GET {base}/web/oidc/login``: the provider's discovery document ({issuer}/.well-known/openid-configuration)
   gives its endpoints; the browser is sent to its authorization endpoint with a random state, nonce and
   PKCE challenge, which travel back in a short-lived cookie signed with the environment's web-token key
   (any facade replica can check it; nothing is stored).
2. ``GET {base}/web/oidc/callback?code&state``: the state must match the cookie's; the code is exchanged
   server-side (with the client secret of ``clientSecretRef`` when set, always with the PKCE verifier);
   the ID token is verified (signature by the provider's JWKS, iss, aud/azp, exp, iat, nonce) with PyJWT.
   The signed-in user is the ID token's (or, with the same sub, the userinfo endpoint's) verified email,
   else its sub.

The pure parts (the state cookie, PKCE, the ID token's checks) are functions here with unit tests; the
provider is reached by :class:`Provider` (discovery and JWKS cached a few minutes).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode

import httpx
import jwt

from dockyard_core.errors import DockyardError, UnauthenticatedError, UpstreamError

COOKIE = "dockyard_oidc"
"""The cookie carrying a sign-in's state, nonce and PKCE verifier from the login to the callback."""
STATE_SECONDS = 600
"""How long a sign-in at the provider may take."""
CACHE_SECONDS = 300
"""How long a provider's discovery document and keys are reused."""
ALGORITHMS = ("RS256", "RS384", "RS512", "PS256", "PS384", "PS512", "ES256", "ES384", "ES512", "EdDSA")
"""ID-token signatures accepted: asymmetric only (never none, never an HMAC keyed with the client secret)."""
LEEWAY = 60
"""Seconds of clock skew allowed on exp and iat."""


class SignInError(UnauthenticatedError):
    """The provider's answer does not sign anyone in (401 ``sign_in_failed`` with a reason)."""

    code = "sign_in_failed"

    def __init__(self, reason: str, message: str, **details: Any) -> None:
        super().__init__(message, {"reason": reason, **details})
        self.reason = reason


class BadStateError(DockyardError):
    """The callback's state does not match the browser's sign-in (400 ``bad_state``): a stale, replayed or
    forged callback, or cookies blocked."""

    code = "bad_state"

    def __init__(self, message: str) -> None:
        super().__init__(message, {"reason": "bad_state"})


class ProviderUnreachableError(UpstreamError):
    """The provider could not be reached or answered nonsense (502 ``provider_unreachable``)."""

    code = "provider_unreachable"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def pkce_challenge(verifier: str) -> str:
    """The S256 code challenge of a PKCE verifier (RFC 7636 §4.2)."""
    return _b64(hashlib.sha256(verifier.encode("ascii")).digest())


@dataclass(frozen=True)
class PendingSignIn:
    """What the callback must find again: the state, the nonce and the PKCE verifier of one sign-in."""

    sent_state: str
    """The state sent to the provider, which its answer must carry back."""
    nonce: str
    verifier: str
    exp: int

    @classmethod
    def new(cls, now: float | None = None) -> PendingSignIn:
        return cls(
            sent_state=secrets.token_urlsafe(24),
            nonce=secrets.token_urlsafe(24),
            verifier=secrets.token_urlsafe(48),
            exp=int(now if now is not None else time.time()) + STATE_SECONDS,
        )

    def seal(self, key: bytes) -> str:
        """The cookie value: the fields, signed (HMAC-SHA256 with a key of its own derived from ``key``)."""
        body = _b64(json.dumps([self.sent_state, self.nonce, self.verifier, self.exp]).encode())
        return f"{body}.{_b64(hmac.new(_cookie_key(key), body.encode(), hashlib.sha256).digest())}"

    @classmethod
    def open(cls, key: bytes, sealed: str | None, state: str | None, now: float | None = None) -> PendingSignIn:
        """The sign-in of the cookie ``sealed`` when its signature holds, it has not expired and its state
        is ``state``; else :class:`BadStateError`."""
        if not state:
            raise BadStateError("the provider's answer has no state: start the sign-in again")
        if not sealed:
            raise BadStateError(
                "this browser has no sign-in in progress (it expired, or cookies are blocked): start the sign-in again"
            )
        body, _, signature = sealed.partition(".")
        try:
            given = _unb64(signature)
            good = hmac.compare_digest(hmac.new(_cookie_key(key), body.encode(), hashlib.sha256).digest(), given)
            fields = json.loads(_unb64(body)) if good else None
            pending = cls(str(fields[0]), str(fields[1]), str(fields[2]), int(fields[3])) if fields else None
        except (ValueError, TypeError, IndexError, binascii.Error, RecursionError):
            pending = None
        if pending is None:
            raise BadStateError("the sign-in cookie is not valid: start the sign-in again")
        if (time.time() if now is None else now) >= pending.exp:
            raise BadStateError("the sign-in took too long and expired: start it again")
        if not hmac.compare_digest(pending.sent_state.encode(), state.encode()):
            raise BadStateError(
                "the provider's answer is for another sign-in (state mismatch): start the sign-in again"
            )
        return pending


def _cookie_key(key: bytes) -> bytes:
    return hmac.new(key, b"dockyard-web/oidc-state/v1", hashlib.sha256).digest()


def authorization_url(
    discovery: dict[str, Any], *, client_id: str, redirect_uri: str, scopes: list[str], pending: PendingSignIn
) -> str:
    """Where the browser signs in: the provider's authorization endpoint with the code flow's parameters."""
    asked = ["openid", *[s for s in scopes if s != "openid"]]
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "scope": " ".join(asked),
        "state": pending.sent_state,
        "nonce": pending.nonce,
        "code_challenge": pkce_challenge(pending.verifier),
        "code_challenge_method": "S256",
    }
    endpoint = str(discovery["authorization_endpoint"])
    return endpoint + ("&" if "?" in endpoint else "?") + urlencode(query, quote_via=quote)


def verify_id_token(id_token: str, keys: jwt.PyJWKSet, *, issuer: str, client_id: str, nonce: str) -> dict[str, Any]:
    """The ID token's claims once its signature (one of ``keys``), iss, aud (and azp), exp, iat and nonce
    hold; else :class:`SignInError` naming what failed."""
    try:
        header = jwt.get_unverified_header(id_token)
    except jwt.PyJWTError as exc:
        raise SignInError("invalid_id_token", f"the provider's ID token is malformed: {exc}") from exc
    alg = header.get("alg")
    if alg not in ALGORITHMS:
        raise SignInError("invalid_id_token", f"the ID token's algorithm {alg!r} is not accepted", algorithm=alg)
    key = key_for(keys, header.get("kid"))
    if key is None:
        raise SignInError("bad_signature", "the ID token is signed with a key the provider does not publish")
    try:
        claims: dict[str, Any] = jwt.decode(
            id_token,
            key=key.key,
            algorithms=[alg],
            audience=client_id,
            issuer=issuer,
            leeway=LEEWAY,
            options={"require": ["iss", "aud", "exp", "iat", "sub"], "verify_iat": True},
        )
    except jwt.ExpiredSignatureError as exc:
        raise SignInError("id_token_expired", "the provider's ID token has expired: sign in again") from exc
    except jwt.InvalidAudienceError as exc:
        raise SignInError(
            "wrong_audience",
            f"the ID token is not for this client (aud does not contain {client_id!r})",
            field="spec.access.oidc.clientId",
        ) from exc
    except jwt.InvalidIssuerError as exc:
        raise SignInError(
            "wrong_issuer", f"the ID token was not issued by {issuer}", field="spec.access.oidc.issuer"
        ) from exc
    except jwt.InvalidSignatureError as exc:
        raise SignInError("bad_signature", "the ID token's signature is not valid") from exc
    except jwt.PyJWTError as exc:
        raise SignInError("invalid_id_token", f"the provider's ID token is not valid: {exc}") from exc
    audience = claims["aud"]
    if isinstance(audience, list) and len(audience) > 1 and claims.get("azp") != client_id:
        raise SignInError(
            "wrong_audience", f"the ID token names several audiences and azp is not {client_id!r}",
            field="spec.access.oidc.clientId",
        )  # fmt: skip
    if not isinstance(claims.get("nonce"), str) or not hmac.compare_digest(claims["nonce"].encode(), nonce.encode()):
        raise SignInError("bad_nonce", "the ID token's nonce is not this sign-in's (a replayed token?)")
    return claims


def key_for(keys: jwt.PyJWKSet, kid: Any) -> jwt.PyJWK | None:
    """The key ``kid`` names, or the only signing key when the token names none."""
    usable = [k for k in keys.keys if getattr(k, "public_key_use", None) in (None, "sig")]
    if kid is None:
        return usable[0] if len(usable) == 1 else None
    return next((k for k in usable if k.key_id == kid), None)


def user_of(claims: dict[str, Any], userinfo: dict[str, Any] | None = None) -> str:
    """The signed-in user as the conversations record it: ``oidc:<verified email>`` or ``oidc:<sub>``; the
    userinfo answer counts only for the same sub."""
    for source in (claims, userinfo if userinfo and userinfo.get("sub") == claims["sub"] else None):
        email = (source or {}).get("email")
        if isinstance(email, str) and email and (source or {}).get("email_verified") is not False:
            return "oidc:" + email[:190]
    return "oidc:" + str(claims["sub"])[:190]


def basic_auth(client_id: str, secret: str) -> str:
    """client_secret_basic's header value (RFC 6749 §2.3.1: both form-urlencoded first)."""
    raw = f"{quote(client_id, safe='')}:{quote(secret, safe='')}".encode()
    return "Basic " + base64.b64encode(raw).decode()


class Provider:
    """The providers' discovery documents and keys (cached), the code exchange and userinfo."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._cache: dict[str, tuple[float, Any]] = {}

    async def _get_json(self, url: str, what: str, issuer: str, headers: dict[str, str] | None = None) -> Any:
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as http:
                answer = await http.get(url, headers={"Accept": "application/json", **(headers or {})})
            answer.raise_for_status()
            return answer.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise ProviderUnreachableError(
                f"cannot read the {what} of the OpenID provider {issuer}: {exc}",
                {"reason": "provider_unreachable", "issuer": issuer, "field": "spec.access.oidc.issuer"},
            ) from exc

    async def discovery(self, issuer: str) -> dict[str, Any]:
        """The provider's discovery document; its issuer must be the configured one (OpenID Connect
        Discovery §4.3)."""
        hit = self._cache.get("d:" + issuer)
        if hit and hit[0] > time.monotonic():
            return dict(hit[1])
        doc = await self._get_json(issuer.rstrip("/") + "/.well-known/openid-configuration", "discovery", issuer)
        if not isinstance(doc, dict) or not all(
            isinstance(doc.get(k), str) for k in ("issuer", "authorization_endpoint", "token_endpoint", "jwks_uri")
        ):
            raise ProviderUnreachableError(
                f"the discovery document of {issuer} lacks issuer or endpoints",
                {"reason": "provider_unreachable", "issuer": issuer},
            )
        if doc["issuer"].rstrip("/") != issuer.rstrip("/"):
            raise SignInError(
                "wrong_issuer",
                f"the provider at {issuer} says its issuer is {doc['issuer']}: spec.access.oidc.issuer must be "
                "the provider's issuer exactly",
                field="spec.access.oidc.issuer",
                issuer=doc["issuer"],
            )
        self._cache["d:" + issuer] = (time.monotonic() + CACHE_SECONDS, doc)
        return dict(doc)

    async def keys(self, discovery: dict[str, Any], *, fresh: bool = False) -> jwt.PyJWKSet:
        url = str(discovery["jwks_uri"])
        hit = self._cache.get("k:" + url)
        if hit and hit[0] > time.monotonic() and not fresh:
            keys: jwt.PyJWKSet = hit[1]
            return keys
        data = await self._get_json(url, "keys (jwks_uri)", str(discovery["issuer"]))
        try:
            keys = jwt.PyJWKSet.from_dict(data)
        except (jwt.PyJWTError, TypeError, AttributeError) as exc:
            raise ProviderUnreachableError(
                f"the keys of {discovery['issuer']} are not a usable JWK set: {exc}",
                {"reason": "provider_unreachable", "issuer": discovery["issuer"]},
            ) from exc
        self._cache["k:" + url] = (time.monotonic() + CACHE_SECONDS, keys)
        return keys

    async def exchange(
        self, discovery: dict[str, Any], *, code: str, redirect_uri: str, client_id: str, secret: str | None,
        verifier: str,
    ) -> dict[str, Any]:  # fmt: skip
        """The token endpoint's answer for ``code`` (client_secret_basic, or client_secret_post where the
        provider supports only that; a public client sends its id)."""
        form = {"grant_type": "authorization_code", "code": code, "redirect_uri": redirect_uri,
                "code_verifier": verifier}  # fmt: skip
        headers = {"Accept": "application/json"}
        methods = discovery.get("token_endpoint_auth_methods_supported") or ["client_secret_basic"]
        if secret is None:
            form["client_id"] = client_id
        elif "client_secret_basic" in methods or "client_secret_post" not in methods:
            headers["Authorization"] = basic_auth(client_id, secret)
        else:
            form |= {"client_id": client_id, "client_secret": secret}
        issuer = str(discovery["issuer"])
        try:
            async with httpx.AsyncClient(timeout=self.timeout) as http:
                answer = await http.post(str(discovery["token_endpoint"]), data=form, headers=headers)
        except httpx.HTTPError as exc:
            raise ProviderUnreachableError(
                f"cannot reach the token endpoint of {issuer}: {exc}",
                {"reason": "provider_unreachable", "issuer": issuer},
            ) from exc
        try:
            body = answer.json()
        except ValueError:
            body = None
        if answer.status_code != 200 or not isinstance(body, dict) or not isinstance(body.get("id_token"), str):
            error = body.get("error") if isinstance(body, dict) else None
            if answer.status_code in (400, 401) and error:
                hint = body.get("error_description") if isinstance(body, dict) else None
                why = f"{error} ({hint})" if hint else str(error)
                raise SignInError("code_refused", f"the provider refused the sign-in's code: {why}", error=error)
            raise ProviderUnreachableError(
                f"the token endpoint of {issuer} answered {answer.status_code} without an ID token",
                {"reason": "provider_unreachable", "issuer": issuer},
            )
        return body

    async def userinfo(self, discovery: dict[str, Any], access_token: str) -> dict[str, Any] | None:
        """The userinfo endpoint's answer (None when there is none or it fails: the sub is used then)."""
        url = discovery.get("userinfo_endpoint")
        if not isinstance(url, str) or not access_token:
            return None
        try:
            data = await self._get_json(
                url, "userinfo", str(discovery["issuer"]), {"Authorization": f"Bearer {access_token}"}
            )
        except ProviderUnreachableError:
            return None
        return data if isinstance(data, dict) else None
