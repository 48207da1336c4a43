"""The reachability probe of a Tool's endpoint (blocking: the reconcile runs it in the Context's threads)."""

from __future__ import annotations

from collections.abc import Callable

import httpx

ReachabilityCheck = Callable[[str, float], str | None]


def check_endpoint(url: str, timeout: float) -> str | None:
    """None when the endpoint answers HTTP at all (any status: it is reachable), else why not."""
    try:
        httpx.get(url, timeout=timeout, follow_redirects=False)
    except httpx.HTTPError as exc:
        return f"{url} is not reachable: {exc.__class__.__name__}: {exc}"
    return None
