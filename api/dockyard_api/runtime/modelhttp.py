"""The model calls' own HTTP/1.1 client: a JSON POST over kept-alive plain-HTTP connections, answered whole.

Every turn makes at least one chat completion call to a model endpoint, and aiohttp's client spent about a sixth of
the facade's CPU on it (per request: a ``ClientRequest`` and a ``ClientResponse`` with their header objects, a
cookie jar, timers, a payload, a stream reader, the connector's bookkeeping; docs/benchmarks.md, "The model call's
own client"). A completion that is not streamed needs none of that: one request written in one ``write``, one
answer parsed by httptools (the parser uvicorn uses, a dependency already), its body collected up to a cap.

:class:`ModelHttp` does only that, for ``http://`` URLs without user information; everything else (streamed
completions, ``https``, a URL with credentials) stays with aiohttp (:class:`~dockyard_api.runtime.model.ModelClient`
picks). Connections are kept per (host, port) and reused for the next call, at most ``max_connections`` open at
once (as aiohttp's connector limit; more callers wait in arrival order). A connection is reused only after a whole
answer that allows it (``Connection: close``, HTTP/1.0 without keep-alive, and answers cut short close it), and
never once the server closed it or sent anything between answers. A call that is cancelled (the turn's deadline)
closes its connection. Failures are :class:`ConnectFailed` (nothing was sent: the endpoint cannot be reached) and
:class:`Disconnected` (the server closed the connection before the answer was complete), whose ``cause`` is the
``OSError`` when there was one.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import socket
from typing import Any

import httptools  # type: ignore[import-untyped]
import yarl


class ConnectFailed(Exception):
    """No connection to the endpoint (refused, unreachable, a name that does not resolve): nothing was sent."""


class Disconnected(Exception):
    """The server closed the connection, or it failed, before the answer was complete."""


class Answer:
    """An HTTP answer: its status, and its body, or (``cut``) its first ``limit`` bytes and more not read."""

    __slots__ = ("body", "cut", "status")

    def __init__(self, status: int, body: bytes, cut: bool) -> None:
        self.status, self.body, self.cut = status, body, cut


def plain(url: yarl.URL) -> bool:
    """Whether :class:`ModelHttp` serves ``url``: ``http``, with a host and without user information."""
    return url.scheme == "http" and bool(url.host) and url.user is None and url.password is None


class _Connection(asyncio.Protocol):
    """One kept-alive connection: one request at a time, its answer parsed as it arrives."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.alive = True
        self._parser: Any = None
        self._waiter: asyncio.Future[Answer] | None = None
        self._status = 0
        self._chunks: list[bytes] = []
        self._size = 0
        self._limit = 0
        self._error_limit = 0
        self._framed = False
        self._reusable = False

    # --- asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # nothing was asked: a server that talks between answers is not reused
            self.close()
            return
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(Disconnected(f"the answer is not HTTP: {exc}"))

    def eof_received(self) -> bool | None:
        self.alive = False
        return None  # the transport closes itself; connection_lost follows

    def connection_lost(self, exc: Exception | None) -> None:
        self.alive = False
        if self._waiter is None or self._waiter.done():
            return
        if self._status and not self._framed:  # an answer delimited by the connection's close: complete now
            self.on_message_complete()  # (not reusable: no longer alive)
            return
        failure = Disconnected("Server disconnected" if exc is None else f"{type(exc).__name__}: {exc}")
        failure.__cause__ = exc
        self._fail(failure)

    # --- httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        lowered = name.lower()
        if lowered == b"content-length" or (lowered == b"transfer-encoding" and b"chunked" in value.lower()):
            self._framed = True

    def on_headers_complete(self) -> None:
        self._status = self._parser.get_status_code()
        if self._status >= 300:
            self._limit = self._error_limit
        if self._status in (204, 304) or 100 <= self._status < 200:
            self._framed = True  # no body

    def on_body(self, body: bytes) -> None:
        self._size += len(body)
        if self._size > self._limit:  # enough of it: the rest is not read, the connection not reused
            keep = self._limit - (self._size - len(body))
            if keep > 0:
                self._chunks.append(body[:keep])
            self._answer(cut=True)
            self.close()
            return
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        if self._waiter is None:  # a second answer after the one asked for: a server not to be trusted again
            self.close()
            return
        self._reusable = self.alive and self._parser.should_keep_alive()
        self._answer(cut=False)

    # ---
    def send(self, request: bytes, waiter: asyncio.Future[Answer], limit: int, error_limit: int) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self._waiter, self._limit, self._error_limit = waiter, limit, error_limit
        self._status, self._chunks, self._size, self._framed, self._reusable = 0, [], 0, False, False
        assert self.transport is not None
        self.transport.write(request)

    def finished(self) -> bool:
        """Whether the last answer was whole and the connection may carry the next request."""
        return self._reusable and self.alive and self.transport is not None and not self.transport.is_closing()

    def _answer(self, cut: bool) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(Answer(self._status, b"".join(self._chunks), cut))

    def _fail(self, exc: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        self.close()
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)

    def close(self) -> None:
        self.alive = False
        if self.transport is not None:
            self.transport.close()


class ModelHttp:
    """Kept-alive connections to model endpoints (see the module docstring); one per event loop."""

    def __init__(self, max_connections: int) -> None:
        self._max = max_connections
        self._busy = 0
        """Connections carrying a call now (the limit counts these, as aiohttp's connector does)."""
        self._idle: dict[tuple[str, int], list[_Connection]] = {}
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()
        self._closed = False

    async def post_json(
        self, url: yarl.URL, body: bytes, headers: dict[str, str], limit: int, error_limit: int
    ) -> Answer:
        """POST ``body`` (JSON) to ``url`` with ``headers`` besides the framing ones; the answer's body up to
        ``limit`` bytes (``error_limit`` for an error status), ``cut`` when there was more."""
        host, port = url.host or "", url.port or 80
        head = [
            f"POST {url.raw_path_qs} HTTP/1.1\r\nHost: {url.raw_authority}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json\r\nContent-Length: {len(body)}\r\n"
        ]
        for name, value in headers.items():
            if name.lower() not in _FRAMING:
                head.append(f"{name}: {value}\r\n")
        head.append("\r\n")
        request = "".join(head).encode("latin-1") + body
        connection = await self._acquire(host, port)
        waiter: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        reusable = False
        try:
            connection.send(request, waiter, limit, error_limit)
            answer = await waiter
            reusable = connection.finished()
            return answer
        finally:
            self._release(host, port, connection, reusable)

    async def _acquire(self, host: str, port: int) -> _Connection:
        if self._closed:
            raise ConnectFailed("the model client is closed")
        if self._busy >= self._max or self._waiting:
            await self._wait()
        self._busy += 1
        idle = self._idle.get((host, port))
        while idle:
            connection = idle.pop()
            if connection.finished():
                return connection
            connection.close()
        try:
            _, connection = await asyncio.get_running_loop().create_connection(_Connection, host, port)
        except BaseException as exc:
            self._busy -= 1
            self._wake()
            if isinstance(exc, OSError):  # socket.gaierror is one
                raise ConnectFailed(f"{type(exc).__name__}: {exc}") from exc
            raise
        sock = connection.transport.get_extra_info("socket") if connection.transport is not None else None
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return connection

    async def _wait(self) -> None:
        """Wait, in arrival order, until fewer than the limit are busy."""
        first = True
        while self._busy >= self._max or (first and self._waiting):
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            if first:
                self._waiting.append(waiter)
            else:
                self._waiting.appendleft(waiter)  # woken but overtaken: still first in line
            first = False
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.cancelled():
                    with contextlib.suppress(ValueError):
                        self._waiting.remove(waiter)
                else:
                    self._wake()  # woken, but not going on: the next one's turn
                raise
            if self._closed:
                raise ConnectFailed("the model client is closed")

    def _release(self, host: str, port: int, connection: _Connection, reusable: bool) -> None:
        self._busy -= 1
        if reusable and not self._closed:
            self._idle.setdefault((host, port), []).append(connection)
        else:
            connection.close()
        self._wake()

    def _wake(self) -> None:
        """The first caller still waiting may go on."""
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return

    def close(self) -> None:
        """Close the idle connections (the ones in use close when their answer is in) and refuse new calls."""
        self._closed = True
        for connections in self._idle.values():
            for connection in connections:
                connection.close()
        self._idle.clear()
        while self._waiting:
            waiter = self._waiting.popleft()
            if not waiter.done():
                waiter.set_result(None)


_FRAMING = frozenset({"host", "content-type", "content-length", "transfer-encoding", "accept"})
