"""Ids made on the hot path (a turn makes five: its session's, its lease token, two messages', its request's)."""

from __future__ import annotations

import os


def random_hex() -> str:
    """32 hex digits from the operating system's random source: an id as unguessable as ``uuid4().hex`` (which
    keeps 122 random bits of its 128), made in a sixth of its time (no UUID object: 0.5 against 3.1 µs)."""
    return os.urandom(16).hex()
