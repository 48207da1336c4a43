"""The console's session: a sealed cookie, CSRF tokens and one-time flash messages.

The Kubernetes token a person signs in with is never readable by JavaScript: it travels only inside
the session cookie, which is sealed (encrypted and authenticated, Fernet) with a key derived from the
facade's token key, HttpOnly, SameSite=Strict, and Secure when the request came over TLS. Every POST
carries a CSRF token that must equal the one sealed in the session (the sign-in form, before a session
exists, uses a sealed pre-session cookie the same way). Nothing is kept server-side, so any facade
replica serves any request.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from cryptography.fernet import Fernet, InvalidToken

SESSION_COOKIE = "dockyard_console"
PRESESSION_COOKIE = "dockyard_console_pre"
FLASH_COOKIE = "dockyard_console_flash"
COOKIE_PATH = "/console"
SESSION_SECONDS = 8 * 3600
"""A session lasts at most a working day; the Kubernetes token may expire earlier (then: sign in again)."""
FLASH_SECONDS = 120


def derive_key(token_key: bytes) -> bytes:
    """The console's own Fernet key, derived from the facade's token key (shared by its replicas)."""
    digest = hmac.new(token_key, b"dockyard-console-session-v1", hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest)


@dataclass(frozen=True)
class Session:
    token: str
    """The Kubernetes bearer token (reviewed with TokenReview on each request, cached briefly)."""
    namespace: str
    csrf: str
    issued_at: float = field(default_factory=time.time)


class Sealer:
    """Seals and opens the console's cookies."""

    def __init__(self, key: bytes) -> None:
        self._fernet = Fernet(derive_key(key))

    def seal(self, payload: dict[str, Any]) -> str:
        return self._fernet.encrypt(json.dumps(payload, separators=(",", ":")).encode()).decode()

    def open(self, value: str | None, max_age: int) -> dict[str, Any] | None:
        if not value:
            return None
        try:
            data = json.loads(self._fernet.decrypt(value.encode(), ttl=max_age))
        except (InvalidToken, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def seal_session(self, session: Session) -> str:
        return self.seal({"t": session.token, "n": session.namespace, "c": session.csrf, "i": session.issued_at})

    def open_session(self, value: str | None) -> Session | None:
        data = self.open(value, SESSION_SECONDS)
        if data is None:
            return None
        try:
            return Session(str(data["t"]), str(data["n"]), str(data["c"]), float(data["i"]))
        except (KeyError, TypeError, ValueError):
            return None


def new_csrf() -> str:
    return secrets.token_urlsafe(32)


def csrf_ok(expected: str | None, sent: str | None) -> bool:
    """Whether the form's CSRF token equals the session's (constant time; both must be present)."""
    if not expected or not sent:
        return False
    return hmac.compare_digest(expected.encode(), sent.encode())


def over_tls(scheme: str, forwarded_proto: str | None) -> bool:
    """Whether the browser reached us over TLS (directly, or through a proxy that says so)."""
    if forwarded_proto:
        return forwarded_proto.split(",")[0].strip().lower() == "https"
    return scheme == "https"


def cookie_options(secure: bool, max_age: int | None) -> dict[str, Any]:
    """The attributes of every console cookie."""
    return {
        "httponly": True,
        "samesite": "strict",
        "secure": secure,
        "path": COOKIE_PATH,
        "max_age": max_age,
    }
