"""Environment API keys: generation, hashing, verification and their Secret form (pure logic).

A key is ``dky_<keyId>_<secret>``: ``keyId`` (12 characters) names the Secret that holds the key's
SHA-256 (never the key itself), ``secret`` is 32 random bytes. The key is shown once, when generated.
Keys are random and long, so a plain SHA-256 is a sound verifier (no password stretching needed);
comparison is constant-time. A key belongs to exactly one Environment (label on its Secret).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import string
from dataclasses import dataclass
from datetime import datetime
from enum import Enum
from typing import Any

from dockyard_core.resources.v1alpha1 import API_KEY_LABEL, API_VERSION, APP_LABEL, ENVIRONMENT_LABEL

KEY_PREFIX = "dky"
KEY_ID_LENGTH = 12
KEY_ID_PATTERN = rf"^[a-z0-9]{{{KEY_ID_LENGTH}}}$"
"""An API key's public id (the part after ``dky_``)."""
SECRET_TYPE = "dockyard.dev/api-key"
NAME_ANNOTATION = "dockyard.dev/key-name"
CREATED_BY_ANNOTATION = "dockyard.dev/created-by"
LAST_USED_ANNOTATION = "dockyard.dev/last-used"
_ID_ALPHABET = string.ascii_lowercase + string.digits
_KEY_RE = re.compile(rf"^{KEY_PREFIX}_([a-z0-9]{{{KEY_ID_LENGTH}}})_([A-Za-z0-9_-]{{20,128}})$")


@dataclass(frozen=True)
class NewKey:
    key_id: str
    value: str
    sha256: str

    @property
    def prefix(self) -> str:
        return display_prefix(self.key_id)


def generate() -> NewKey:
    key_id = "".join(secrets.choice(_ID_ALPHABET) for _ in range(KEY_ID_LENGTH))
    value = f"{KEY_PREFIX}_{key_id}_{secrets.token_urlsafe(32)}"
    return NewKey(key_id, value, hash_key(value))


def hash_key(value: str) -> str:
    return hashlib.sha256(value.encode()).hexdigest()


def key_id_of(value: str) -> str | None:
    """The key id of a well-formed key, else None (a malformed key is simply unknown)."""
    match = _KEY_RE.match(value)
    return match.group(1) if match else None


def display_prefix(key_id: str) -> str:
    """What listings show of a key: enough to recognise it, useless to an attacker."""
    return f"{KEY_PREFIX}_{key_id}"


def secret_name(key_id: str) -> str:
    return f"dockyard-apikey-{key_id}"


class Verdict(Enum):
    OK = "ok"
    UNKNOWN = "unknown"
    OTHER_ENVIRONMENT = "other-environment"


@dataclass(frozen=True)
class StoredKey:
    """What the facade needs of a key's Secret to verify a presented key."""

    key_id: str
    sha256: str
    environment: str
    app: str
    environment_uid: str = ""
    """The uid of the Environment that owns the key's Secret (empty when the Secret names no owner)."""

    def verify(self, value: str, environment: str) -> Verdict:
        # compare first, then decide: the time taken does not depend on where the key differs
        matches = hmac.compare_digest(self.sha256.encode(), hash_key(value).encode())
        if not matches:
            return Verdict.UNKNOWN
        return Verdict.OK if self.environment == environment else Verdict.OTHER_ENVIRONMENT


def stored_key(secret: dict[str, Any]) -> StoredKey | None:
    """The verifier kept in an API-key Secret; None when the object is not one."""
    if secret.get("type") != SECRET_TYPE:
        return None
    meta = secret.get("metadata") or {}
    labels = meta.get("labels") or {}
    data = secret.get("stringData") or {}
    digest = data.get("sha256")
    if digest is None:
        raw = (secret.get("data") or {}).get("sha256")
        digest = base64.b64decode(raw).decode() if raw else None
    name = meta.get("name", "")
    if not digest or not name.startswith("dockyard-apikey-") or labels.get(API_KEY_LABEL) != "true":
        return None
    environment = labels.get(ENVIRONMENT_LABEL, "")
    owner_uid = next(
        (
            str(o.get("uid") or "")
            for o in meta.get("ownerReferences") or ()
            if o.get("kind") == "Environment" and o.get("name") == environment
        ),
        "",
    )
    return StoredKey(name.removeprefix("dockyard-apikey-"), digest, environment, labels.get(APP_LABEL, ""), owner_uid)


def key_secret(
    *, key: NewKey, name: str, environment: dict[str, Any], created_by: str, created_at: datetime
) -> dict[str, Any]:
    """The Secret that records a new key: its hash, name and creator, owned by the Environment."""
    meta = environment["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": SECRET_TYPE,
        "metadata": {
            "name": secret_name(key.key_id),
            "namespace": meta["namespace"],
            "labels": {
                API_KEY_LABEL: "true",
                ENVIRONMENT_LABEL: meta["name"],
                APP_LABEL: environment["spec"]["appRef"],
                "app.kubernetes.io/managed-by": "dockyard",
            },
            "annotations": {
                NAME_ANNOTATION: name,
                CREATED_BY_ANNOTATION: created_by,
                "dockyard.dev/created-at": created_at.isoformat(),
            },
            "ownerReferences": [
                {
                    "apiVersion": API_VERSION,
                    "kind": "Environment",
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "stringData": {"sha256": key.sha256},
    }


@dataclass(frozen=True)
class KeyInfo:
    """What a listing shows of a key (never the key, never its hash)."""

    id: str
    name: str
    prefix: str
    environment: str
    created_at: str | None
    created_by: str | None
    last_used_at: str | None


def key_info(secret: dict[str, Any]) -> KeyInfo | None:
    stored = stored_key(secret)
    if stored is None:
        return None
    meta = secret["metadata"]
    notes = meta.get("annotations") or {}
    return KeyInfo(
        id=stored.key_id,
        name=notes.get(NAME_ANNOTATION, ""),
        prefix=display_prefix(stored.key_id),
        environment=stored.environment,
        created_at=notes.get("dockyard.dev/created-at") or meta.get("creationTimestamp"),
        created_by=notes.get(CREATED_BY_ANNOTATION),
        last_used_at=notes.get(LAST_USED_ANNOTATION),
    )
