"""Requests on their way in: the ASGI middleware that counts the generation requests being received
(body read, validated, tokenized) whose sequences are not queued yet, so that the batcher waits for them."""

from __future__ import annotations

from typing import Any

from fastapi import Request

from dockyard_ct2.engine import Arrivals

GENERATION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
ARRIVAL_KEY = "dockyard_ct2_arrival"


class CountArrivals:
    """ASGI middleware: counts the generation requests that the server is receiving but whose
    sequences are not queued yet (body being read, validated, tokenized). The batcher waits for them
    (within its window) instead of starting a batch without them: requests that clients sent together
    share one batch even after a quiet spell, and a lone request (none arriving) starts at once."""

    def __init__(self, app: Any, arrivals: Arrivals) -> None:
        self.app = app
        self.arrivals = arrivals

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state[ARRIVAL_KEY] = True
        self.arrivals.count += 1
        try:
            await self.app(scope, receive, send)
        finally:
            if state.pop(ARRIVAL_KEY, False):  # refused (or failed) before its sequences were queued
                self.arrivals.count -= 1


def arrived(request: Request) -> bool:
    """The request's sequences are being queued: it no longer counts as arriving (True once)."""
    return bool(request.scope.get("state", {}).pop(ARRIVAL_KEY, False))
