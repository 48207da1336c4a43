"""How the facade is served: uvicorn with httptools and uvloop (dependencies of the project: the faster
HTTP parser and event loop), with three changes for request bodies (chunk uploads), each measured on the
facade's event loop thread, which carries most of an upload's CPU time (docs/benchmarks.md).

uvicorn 0.54 appends every body piece the parser delivers to a ``bytearray`` and hands the app a
``bytes`` copy of it: two copies of every byte of a chunk upload on the event loop's thread, before
the chunk's own parsing and its write to disk (about a tenth of the facade's CPU time per uploaded
GiB, profiled with py-spy; docs/benchmarks.md). :class:`HttpProtocol` keeps a piece that arrives
while nothing is waiting as the ``bytes`` object the parser made; ``bytes(piece)`` in uvicorn's
``receive`` returns that same object, so the common case copies nothing. Pieces that arrive before
the app took the previous one are joined as uvicorn does. Flow control is unchanged (reading pauses
above uvicorn's high-water mark).

uvloop reads a socket into a buffer of its own of 256,000 bytes and hands the protocol a new ``bytes``
copy of every read (asyncio does the same with 256 KiB). :class:`BufferedHttpProtocol` wraps
:class:`HttpProtocol` as an ``asyncio.BufferedProtocol``: the socket is read straight into one buffer of
:data:`READ_BYTES` and httptools parses it from there, so a body byte is copied once fewer, and a 16 MiB
chunk arrives in about 16 reads instead of 66 (fewer trips through uvicorn, the ASGI receive chain and the
multipart parser). httptools copies what it hands on (URL, headers, body pieces), so nothing refers to the
buffer once a read is parsed, and a read is parsed before the event loop reads any other socket: all the
connections of an event loop's thread share the one buffer (1 MiB per thread, not per connection). uvloop
feeds a protocol this way only if it is not an ``asyncio.Protocol``, hence the wrapper, not a subclass.

A chunk upload need not pass through the event loop at all once its file data has begun: :class:`RawBody`
lets the app have the rest of the body read from the socket by a thread of its own, which writes each read
to the chunk's file itself (``chunks.ChunkUpload``). The event loop's CPU per uploaded GiB fell to a third
and the facade's throughput rose by about a tenth (docs/benchmarks.md, "The rest of a chunk read by a
thread").

And one change for answers: uvicorn writes a response's status line and headers when the app starts it and
the body when the app sends it, two system calls (and two segments) for every JSON answer; :class:`OneWriteCycle`
sends the head of a response of known length with its body, in one (docs/benchmarks.md, "One write per answer").

Body pieces of up to 1 MiB are allocated and freed at a high rate; glibc's allocator gave the freed
memory back to the kernel and faulted zeroed pages in again for the next piece (about 100,000 page
faults per uploaded GiB). :func:`keep_freed_memory` raises its trim and mmap thresholds so that the
memory is reused: bounded by the thresholds, not by the upload's size.

The uvicorn version is pinned (pyproject.toml); ``tests/unit/api/test_server.py`` checks the protocol
against it (a body still arrives whole and in order, a single piece is not copied, uvloop reads into the
protocol's buffer, freed pieces are reused without page faults).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import platform
import socket
import sys
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar, cast

import httptools  # type: ignore[import-untyped]
import uvicorn
from starlette.requests import ClientDisconnect
from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle

from dockyard_api.settings import ApiSettings

try:  # the reads of plain file data without the GIL (dockyard_core/_pump.c), where it was built
    from dockyard_core import _pump
except ImportError:  # pragma: no cover - a machine without a C compiler: every read through Python
    _pump = None  # type: ignore[assignment]
PUMP = _pump is not None
"""Whether :class:`RawBody` can hand the reads of plain file data to C (``dockyard_core._pump``)."""
T = TypeVar("T")


class HttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol without the copies of a body piece (see the module docstring); a
    ``multipart/form-data`` request (a chunk upload) with a ``Content-Length`` over plain TCP offers the app
    :class:`RawBody` (scope extension :data:`RAW_BODY`)."""

    body_left = 0
    """Bytes of the current request's body not yet read from the socket (its Content-Length less what the
    parser has handed on)."""

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        self.body_left = 0
        if self.parser.should_upgrade():
            return
        cycle = self.cycle
        if type(cycle) is RequestResponseCycle and not cycle.response_started:  # made just now, its task not begun
            cycle.__class__ = OneWriteCycle
        length, multipart = None, False
        for name, value in self.headers:
            if name == b"transfer-encoding":
                return
            if name == b"content-length":
                length = value
            elif name == b"content-type":
                multipart = value[:19].lower() == b"multipart/form-data"
        if length is None or not length.strip().isdigit():
            return
        self.body_left = int(length)
        transport = self.transport
        if multipart and self.body_left and transport.get_extra_info("sslcontext") is None:  # chunk uploads
            raw = transport.get_extra_info("socket")
            if raw is not None and raw.type == socket.SOCK_STREAM:
                extensions = cast("dict[str, Any]", self.scope.setdefault("extensions", {}))
                extensions[RAW_BODY] = RawBody(self, self.cycle, raw.fileno())

    def on_body(self, body: bytes) -> None:
        self.body_left -= len(body)
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


class _Held:
    """A stand-in for the transport while uvicorn's ``send`` runs: what it would have written and closed."""

    __slots__ = ("closed", "data")

    def __init__(self) -> None:
        self.data: bytes | None = None
        self.closed = False

    def write(self, data: bytes) -> None:
        self.data = data if self.data is None else self.data + data

    def close(self) -> None:
        self.closed = True


class OneWriteCycle(RequestResponseCycle):
    """uvicorn's request-response cycle with a response of known length written in one piece: uvicorn writes the
    status line and headers when the app starts the response and the body when it sends it, two writes (two
    system calls, two TCP segments on the wire or two trips through loopback's receive path) for every JSON
    answer. Here the headers of a response with a ``Content-Length`` wait for its first body message and leave
    with it; anything else (no length, chunked, HEAD, a 204, the transport paused or gone) is written as uvicorn
    writes it. uvicorn's own ``send`` still makes every byte and check: it writes to a :class:`_Held` for the
    moment of the call, which does not await when the transport is neither paused nor gone. A connection that is to
    close after the response (``keep_alive`` off) gets uvicorn's two writes, so that the close follows them as
    there, before uvicorn's end-of-response handling."""

    head: bytes | None = None
    """The status line and headers of a response of known length, held for its first body message."""

    async def send(self, message: Any) -> None:
        head = self.head
        if head is None:
            if (
                message["type"] != "http.response.start"
                or self.response_started
                or self.flow.write_paused
                or self.disconnected
            ):
                await super().send(message)
                return
            held = await self._uvicorn_send(message)
            if held.data is None:
                return
            if self.chunked_encoding is False and self.expected_content_length and self.scope["method"] != "HEAD":
                self.head = held.data
            else:
                self.transport.write(held.data)
            return
        self.head = None
        if self.disconnected:  # uvicorn would have written the head before the client went: nothing to write to
            await super().send(message)
            return
        if message["type"] != "http.response.body" or self.flow.write_paused or not self.keep_alive:
            self.transport.write(head)
            await super().send(message)
            return
        transport = self.transport
        try:
            held = await self._uvicorn_send(message)
        except BaseException:
            transport.write(head)  # what uvicorn had written before the error
            raise
        transport.writelines((head, held.data) if held.data else (head,))
        if held.closed:
            transport.close()

    async def _uvicorn_send(self, message: Any) -> _Held:
        """uvicorn's ``send`` with the transport's writes and close kept (it does not await here)."""
        held, transport = _Held(), self.transport
        self.transport = held  # type: ignore[assignment]
        try:
            await super().send(message)
        finally:
            self.transport = transport
        return held


RAW_BODY = "dockyard.raw_body"
"""The ASGI scope extension under which a request offers its :class:`RawBody`."""
RAW_IDLE_SECONDS = 120.0
"""How long a raw read waits for the client's next bytes before it counts the client as gone."""
RAW_READERS = 8
"""Raw reads in progress at most per process; more requests read their bodies through the event loop."""
_RAW_THREADS = ThreadPoolExecutor(max_workers=RAW_READERS, thread_name_prefix="raw-body")


class RawFile(NamedTuple):
    """Where the next reads of a raw body go while they are plain file data (:meth:`RawBody.read`'s
    ``plain_file``): appended to ``fd`` (at ``offset``, the file's size, for the writeback hint when
    ``advise``), at most ``room`` bytes more; a read that holds ``delimiter`` or the start of one is handed to
    ``consume`` instead. ``wrote(n)`` is told what was appended."""

    fd: int
    offset: int
    room: int
    delimiter: bytes
    advise: bool
    wrote: Callable[[int], None]


class RawBody:
    """The rest of a request's body, read from the socket by a thread of its own instead of the event loop.

    For a chunk upload the event loop carries most of the work: it reads every piece, httptools copies it, the
    ASGI chain carries it, and a write thread takes it over (docs/benchmarks.md, "What any upload server could
    reach here": a thread that reads the socket and writes moved the same bytes 1.6 times as fast). Once the app
    has taken every piece the parser handed on (:meth:`ready`), :meth:`read` pauses the connection's reading,
    and a thread reads the body's remaining bytes straight into a buffer of its own, handing each read to
    ``consume`` (in that thread; the view is reused after it returns). Then the request's body is complete for
    uvicorn as well: the connection gets a fresh parser for its next request, and reading resumes with the
    response, as after any request. When ``consume`` raises (a chunk over its limit), the rest of the body is
    read and dropped, then the error raised. When the client goes away or sends nothing for
    :data:`RAW_IDLE_SECONDS`, ``ClientDisconnect`` is raised and the connection closes after the response."""

    def __init__(self, protocol: HttpProtocol, cycle: Any, fd: int) -> None:
        self._protocol, self._cycle, self._fd = protocol, cycle, fd

    def ready(self) -> bool:
        """Whether the rest of the body can be read raw now: the request is the connection's current one, the
        app has taken every piece received so far, and some of the body is still to come."""
        protocol, cycle = self._protocol, self._cycle
        return (
            protocol.cycle is cycle
            and protocol.body_left > 0
            and not cycle.body
            and not cycle.disconnected
            and not cycle.response_complete
            and _RAW_ACTIVE[0] < RAW_READERS
        )

    async def read(
        self,
        consume: Callable[[memoryview], None],
        plain_file: Callable[[], RawFile | None] | None = None,
        then: Callable[[], T] | None = None,
    ) -> T | None:
        """Read the rest of the body (:meth:`ready` must have answered True, with no ``await`` since), each read
        handed to ``consume`` in the reading thread. Raises ``ClientDisconnect`` when the client went away.
        ``plain_file``: asked (in the reading thread) before each read where the next reads go while they are
        plain file data; where the C extension was built, those reads are appended there without the GIL
        (``dockyard_core._pump``), and only the others reach ``consume``. ``then``: called in the reading thread
        once the whole body was read and ``consume`` raised nothing (a chunk's flush and publication, without
        a hop back to the event loop and out to another thread); what it returns is returned, what it raises
        raised."""
        protocol, cycle = self._protocol, self._cycle
        protocol.flow.pause_reading()  # the event loop reads this socket no more until the response
        left, protocol.body_left = protocol.body_left, 0
        sock = socket.socket(fileno=os.dup(self._fd))  # the same connection; closing it closes the copy only
        sock.settimeout(RAW_IDLE_SECONDS)
        _RAW_ACTIVE[0] += 1
        reading = asyncio.get_running_loop().run_in_executor(
            _RAW_THREADS, _read_raw, sock, left, consume, plain_file if PUMP else None, then
        )
        try:
            failure, result = await asyncio.shield(reading)
        except asyncio.CancelledError:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread: the connection is done
            with contextlib.suppress(BaseException):
                await reading
            cycle.keep_alive = False
            raise
        except BaseException:
            cycle.keep_alive = False  # the rest of the body is unread: the connection cannot carry another request
            raise
        finally:
            _RAW_ACTIVE[0] -= 1
            sock.close()
        protocol.parser = httptools.HttpRequestParser(protocol)  # the next request starts afresh
        cycle.more_body = False
        cycle.message_event.set()
        if failure is not None:
            raise failure
        return result


_RAW_ACTIVE = [0]
"""Raw reads in progress (changed on the event loop's threads only; an approximate bound across threads)."""
_RAW_BUFFERS = threading.local()
"""The read buffer of each raw reader thread (a thread reads one body at a time)."""


def _read_raw(
    sock: socket.socket,
    left: int,
    consume: Callable[[memoryview], None],
    plain_file: Callable[[], RawFile | None] | None = None,
    then: Callable[[], T] | None = None,
) -> tuple[BaseException | None, T | None]:
    """Read ``left`` bytes, each read handed to ``consume`` (or, while ``plain_file`` names a file, appended to
    it in C: :meth:`RawBody.read`), then call ``then``; what ``consume`` or ``then`` raised, if one did, and what
    ``then`` returned. After an error of ``consume`` the rest of the body is read and dropped (as uvicorn drops
    the body of a request answered early), so the connection stays usable and the client, still sending, gets
    the answer instead of a reset; ``then`` is not called."""
    buffer: memoryview | None = getattr(_RAW_BUFFERS, "buffer", None)  # one per reader thread, reused
    if buffer is None:
        buffer = _RAW_BUFFERS.buffer = memoryview(bytearray(READ_BYTES))
    failure: BaseException | None = None
    while left > 0:
        target = None
        if plain_file is not None and failure is None:
            try:
                target = plain_file()  # (it writes what the upload still holds: that may fail too)
            except Exception as exc:  # raised by read() once the body is read
                failure = exc
        if target is not None:
            status, left, piece, written, error = _pump.pump(
                sock.fileno(), buffer, left, target.fd, target.offset, target.room, target.delimiter,
                target.advise, int(RAW_IDLE_SECONDS * 1000),
            )  # fmt: skip
            if written:
                target.wrote(written)
            if status == _pump.PIECE:
                try:
                    consume(buffer[:piece])
                except Exception as exc:  # raised by read() once the body is read
                    failure = exc
            elif status == _pump.WRITE_ERROR:
                failure = OSError(error, os.strerror(error))
            elif status != _pump.DONE:  # the client closed, reset, or sent nothing for RAW_IDLE_SECONDS
                raise ClientDisconnect()
            continue
        try:
            n = sock.recv_into(buffer[: min(left, len(buffer))])
        except OSError as exc:  # reset, or no bytes for RAW_IDLE_SECONDS
            raise ClientDisconnect() from exc
        if not n:
            raise ClientDisconnect()
        left -= n
        if failure is None:
            try:
                consume(buffer[:n])
            except Exception as exc:  # raised by read() once the body is read
                failure = exc
    if failure is not None or then is None:
        return failure, None
    try:
        return None, then()
    except Exception as exc:  # raised by read()
        return exc, None


READ_BYTES = 1024 * 1024
"""The most one read of a socket takes: the size of the receive buffer of an event loop's thread."""
_READ_BUFFERS = threading.local()


def read_buffer() -> memoryview:
    """The receive buffer of this thread's event loop, shared by its connections (see the module docstring)."""
    buffer: memoryview | None = getattr(_READ_BUFFERS, "buffer", None)
    if buffer is None:
        buffer = _READ_BUFFERS.buffer = memoryview(bytearray(READ_BYTES))
    return buffer


class BufferedHttpProtocol(asyncio.BufferedProtocol):
    """:class:`HttpProtocol` fed by reads into the receive buffer of its event loop's thread (see the module
    docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.http = HttpProtocol(*args, **kwargs)
        self._buffer: memoryview | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.http.connection_made(cast("asyncio.Transport", transport))

    def connection_lost(self, exc: Exception | None) -> None:
        self.http.connection_lost(exc)

    def eof_received(self) -> None:
        self.http.eof_received()

    def pause_writing(self) -> None:
        self.http.pause_writing()

    def resume_writing(self) -> None:
        self.http.resume_writing()

    def get_buffer(self, sizehint: int) -> memoryview:
        self._buffer = read_buffer()
        return self._buffer

    def buffer_updated(self, nbytes: int) -> None:
        assert self._buffer is not None
        self.http.data_received(cast("bytes", self._buffer[:nbytes]))  # httptools reads any buffer, no copy


M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
TRIM_THRESHOLD_BYTES = 32 * 1024 * 1024
"""Free memory at the top of the heap that glibc keeps instead of giving it back to the kernel."""
MMAP_THRESHOLD_BYTES = 4 * 1024 * 1024
"""Allocations from this size on get pages of their own (``mmap``); smaller ones, a body piece of up to
:data:`READ_BYTES` included, come from the heap."""


def keep_freed_memory() -> bool:
    """Let glibc's allocator reuse the memory of freed body pieces instead of returning it to the kernel and
    faulting fresh zeroed pages in for the next piece (about 100,000 page faults and 0.2 CPU-s per uploaded
    GiB; docs/benchmarks.md). What is kept is bounded by the thresholds, whatever the upload's size. Whether
    it was set (glibc only)."""
    if not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc":
        return False
    mallopt = ctypes.CDLL(None).mallopt
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) and mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES))


def config(app: Any, settings: ApiSettings, **kw: Any) -> uvicorn.Config:
    """The uvicorn configuration of the facade ``app`` (``kw``: more of uvicorn's settings); keeps freed memory
    for reuse (:func:`keep_freed_memory`)."""
    keep_freed_memory()
    return uvicorn.Config(
        app, host=settings.host, port=settings.port, http=cast("type[asyncio.Protocol]", BufferedHttpProtocol), **kw
    )
