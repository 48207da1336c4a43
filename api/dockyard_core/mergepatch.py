"""RFC 7386 JSON merge patch, as the API server applies it (pure): the facade's settings service checks
what a patch will make of an object before sending it, and the tests' fake API server applies it."""

from __future__ import annotations

from typing import Any


def merge_patch(target: Any, patch: Any) -> Any:
    """What the API server makes of ``target`` patched with ``patch`` (RFC 7386: ``None`` removes a member,
    an object merges member by member, anything else replaces)."""
    if not isinstance(patch, dict):
        return patch
    out = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = merge_patch(out.get(key), value)
    return out
