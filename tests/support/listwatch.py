"""A scripted API client for the list + watch of one path (dockyard_core.informer.ListWatch and what is
built on it): lists answer from ``lists``, watches from ``watches``, each a list of events or an exception
to raise; the calls are recorded. When the watches are used up, the next watch stays quiet and ``done``
is set."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any


class ScriptedKube:
    def __init__(self, path: str, lists: list[Any], watches: list[Any]) -> None:
        self.path = path
        self.lists = lists
        self.watches = watches
        self.list_params: list[dict[str, str] | None] = []
        self.watch_params: list[dict[str, str]] = []
        self.done = asyncio.Event()

    @property
    def list_calls(self) -> int:
        return len(self.list_params)

    async def request(self, method: str, path: str, params: dict[str, str] | None = None, **_: Any) -> dict[str, Any]:
        assert (method, path) == ("GET", self.path)
        self.list_params.append(params)
        answer = self.lists.pop(0)
        if isinstance(answer, Exception):
            raise answer
        result: dict[str, Any] = answer
        return result

    async def watch(self, path: str, params: dict[str, str]) -> AsyncIterator[dict[str, Any]]:
        assert path == self.path
        self.watch_params.append(dict(params))
        if not self.watches:
            self.done.set()
            await asyncio.Event().wait()  # a quiet watch: nothing happens any more
        events = self.watches.pop(0)
        if isinstance(events, Exception):
            raise events
        for event in events:
            yield event
