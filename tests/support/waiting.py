"""Polling helpers: wait for an observable state of the cluster, with a bound and a clear failure."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    probe: Callable[[], T | None], *, timeout: float = 60.0, interval: float = 0.25, what: str = "condition"
) -> T:
    """Call ``probe`` until it returns a truthy value and return it; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what} (last: {last!r})")


def holds_for(check: Callable[[], None], seconds: float, interval: float = 0.5) -> None:
    """Run ``check`` (which asserts) repeatedly for ``seconds``: a state that must last, not just appear."""
    deadline = time.monotonic() + seconds
    while True:
        check()
        if time.monotonic() >= deadline:
            return
        time.sleep(interval)
