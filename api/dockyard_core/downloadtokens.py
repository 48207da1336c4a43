"""Short-lived download tokens: what a model pod's storage initializer shows the facade to fetch ONE
model's files.

A token is ``dyd1.<payload>.<signature>``: the payload (base64url JSON) names the namespace, the model and
the expiry (Unix seconds); the signature is HMAC-SHA256 of ``dyd1.<payload>`` with the key the operator
and the facade share (a Secret in the chart, a file beside the model store for local runs). Nothing is
stored: the facade verifies the signature, the expiry, and that the token's namespace/model is the one
requested. The operator mints tokens into a Secret it owns per ModelDeployment and renews them before
they expire (pods read the Secret when they start, so a replica started later gets a valid token).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

PREFIX = "dyd1"
KEY_BYTES = 32


class InvalidToken(Exception):
    """The token is malformed, forged, expired, or for another model (the message says which)."""


@dataclass(frozen=True)
class Grant:
    namespace: str
    model: str
    expires: int


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(key: bytes, message: str) -> str:
    return _b64(hmac.new(key, message.encode("ascii"), hashlib.sha256).digest())


def mint(key: bytes, namespace: str, model: str, expires: int) -> str:
    payload = _b64(json.dumps({"ns": namespace, "m": model, "exp": int(expires)}, separators=(",", ":")).encode())
    signed = f"{PREFIX}.{payload}"
    return f"{signed}.{_sign(key, signed)}"


def verify(key: bytes, token: str, namespace: str, model: str, now: float | None = None) -> Grant:
    """The token's grant, if it is genuine, unexpired and for ``namespace/model``; else InvalidToken."""
    parts = token.strip().split(".")
    if len(parts) != 3 or parts[0] != PREFIX:
        raise InvalidToken("not a Dockyard download token")
    signed = f"{parts[0]}.{parts[1]}"
    if not hmac.compare_digest(_sign(key, signed), parts[2]):
        raise InvalidToken("the token's signature is not valid")
    try:
        data = json.loads(_unb64(parts[1]))
        grant = Grant(str(data["ns"]), str(data["m"]), int(data["exp"]))
    except (ValueError, KeyError, TypeError) as exc:
        raise InvalidToken("the token's payload is malformed") from exc
    if grant.expires <= (time.time() if now is None else now):
        raise InvalidToken("the token has expired")
    if (grant.namespace, grant.model) != (namespace, model):
        raise InvalidToken(f"the token is for model {grant.namespace}/{grant.model}")
    return grant


def expiry_for(now: float, ttl_seconds: int) -> int:
    """A deterministic expiry between ``ttl/2`` and ``ttl`` from now: tokens minted within the same half
    period are identical (the operator re-applies the Secret only when the token changes), and a token is
    renewed while at least half of its lifetime is left."""
    half = max(1, ttl_seconds // 2)
    return (int(now) // half + 2) * half


def load_key(value: str | None, path: Path) -> bytes:
    """The key: ``value`` when given (at least 32 characters), else the file ``path``, created with a
    random key (mode 0600) when missing."""
    if value:
        if len(value) < 32:
            raise ValueError("the download token key must have at least 32 characters")
        return value.encode("utf-8")
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_hex(KEY_BYTES))
        with contextlib.suppress(FileExistsError):
            os.link(tmp, path)  # the first process's key wins; the others read it
        os.unlink(tmp)
    text = path.read_text().strip()
    if len(text) < 32:
        raise ValueError(f"the download token key in {path} is shorter than 32 characters")
    return text.encode("utf-8")
