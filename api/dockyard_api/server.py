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
import ctypes
import platform
import sys
import threading
from typing import Any, cast

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
