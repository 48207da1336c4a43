"""How the facade is served: uvicorn with httptools and uvloop (dependencies of the project: the faster
HTTP parser and event loop), with one change to uvicorn's HTTP protocol for request bodies.

uvicorn 0.54 appends every body piece the parser delivers to a ``bytearray`` and hands the app a
``bytes`` copy of it: two copies of every byte of a chunk upload on the event loop's thread, before
the chunk's own parsing and its write to disk (about a tenth of the facade's CPU time per uploaded
GiB, profiled with py-spy; docs/benchmarks.md). :class:`HttpProtocol` keeps a piece that arrives
while nothing is waiting as the ``bytes`` object the parser made; ``bytes(piece)`` in uvicorn's
``receive`` returns that same object, so the common case copies nothing. Pieces that arrive before
the app took the previous one are joined as uvicorn does. Flow control is unchanged (reading pauses
above uvicorn's high-water mark).

The uvicorn version is pinned (pyproject.toml); ``tests/unit/api/test_server.py`` checks the protocol
against it (a body still arrives whole and in order, and a single piece is not copied).
"""

from __future__ import annotations

from typing import Any

import uvicorn
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from dockyard_api.settings import ApiSettings


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol without the copies of a body piece (see the module docstring)."""

    def on_body(self, body: bytes) -> None:
        cycle = self.cycle
        if cycle.body or cycle.response_complete or (self.parser.should_upgrade() and self._should_upgrade()):
            if isinstance(cycle.body, bytes):  # a kept piece, and another one before the app read it
                cycle.body = bytearray(cycle.body)
            super().on_body(body)
            return
        cycle.body = body  # type: ignore[assignment]  # read once with bytes(), which returns it as it is
        if len(body) > HIGH_WATER_LIMIT:
            self.flow.pause_reading()
        cycle.message_event.set()


def config(app: Any, settings: ApiSettings, **kw: Any) -> uvicorn.Config:
    """The uvicorn configuration of the facade ``app`` (``kw``: more of uvicorn's settings)."""
    return uvicorn.Config(app, host=settings.host, port=settings.port, http=HttpProtocol, **kw)
