"""Ids made on the hot path (a turn makes five: its session's, its lease token, two messages', its request's)."""

from __future__ import annotations

import os
import threading

_POOL_BYTES = 4096
"""Random bytes read from the operating system at a time: 256 ids per ``getrandom`` call instead of one."""


class _Pool(threading.local):
    """Each thread's random bytes not yet handed out (a thread's own: no two threads hand out the same bytes)."""

    def __init__(self) -> None:
        self.data = b""
        self.at = 0


_pool = _Pool()


def _forget_in_child() -> None:
    """A forked child must not hand out the bytes its parent will hand out too."""
    global _pool  # replaced whole: no thread of the parent's keeps its bytes in the child
    _pool = _Pool()


os.register_at_fork(after_in_child=_forget_in_child)


def random_hex() -> str:
    """32 hex digits from the operating system's random source: an id as unguessable as ``uuid4().hex`` (which
    keeps 122 random bits of its 128), without a UUID object (0.5 against 3.1 µs) and with one ``getrandom``
    system call per 256 ids (each call cost a few µs in the facade on a VM: docs/benchmarks.md). Each byte is
    handed out once, by one thread, and never after a fork in the child."""
    pool = _pool
    at = pool.at
    if at + 16 > len(pool.data):
        pool.data, at = os.urandom(_POOL_BYTES), 0
    pool.at = at + 16
    return pool.data[at : at + 16].hex()
