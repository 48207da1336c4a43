"""The content key: a short sha256 of everything an image is built from (recipe, target, build arguments,
the digests of the context files, the base image's ID and anything else named), and the digests of files
that go into it (a file's bytes and its executable bit). An image whose key tag exists is not built again."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path

KEY_LABEL = "dev.dockyard.content-key"
KEY_LENGTH = 16


def content_key(
    *,
    recipe: str,
    target: str | None = None,
    build_args: Mapping[str, str] | None = None,
    files: Mapping[str, str] | None = None,
    base_id: str = "",
    extra: Mapping[str, str] | None = None,
) -> str:
    """A short sha256 of everything an image is built from.

    ``recipe`` is the Dockerfile/Containerfile text, ``files`` maps a context path to its content hash,
    ``base_id`` is the base image's ID, ``extra`` anything else (wheel hashes, tool versions).
    """
    document = {
        "recipe": recipe,
        "target": target or "",
        "build_args": dict(sorted((build_args or {}).items())),
        "files": dict(sorted((files or {}).items())),
        "base_id": base_id,
        "extra": dict(sorted((extra or {}).items())),
    }
    return hashlib.sha256(json.dumps(document, sort_keys=True).encode()).hexdigest()[:KEY_LENGTH]


def file_digest(path: Path) -> str:
    """sha256 of a file's bytes, plus whether it is executable (COPY keeps the mode)."""
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest() + ("+x" if os.access(path, os.X_OK) else "")


def tree_digests(root: Path, rels: Iterable[str]) -> dict[str, str]:
    return {rel: file_digest(root / rel) for rel in rels if (root / rel).is_file()}
