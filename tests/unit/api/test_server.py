"""The facade's uvicorn protocol (dockyard_api.server.HttpProtocol) against the pinned uvicorn: a request
body arrives whole and in order however it is cut, a piece that nobody waits for is handed to the app
as the very bytes object the parser made (no copy), and a response of known length leaves in one write."""

from __future__ import annotations

import asyncio
import hashlib
import os
import platform
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from dockyard_api.server import READ_BYTES, BufferedHttpProtocol, HttpProtocol


class Transport(asyncio.Transport):
    """What the protocol writes, and whether it paused reading."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.writes: list[bytes] = []
        """Each call to ``write`` (``writelines`` joins its pieces into one, as asyncio's transports do)."""
        self.paused = False
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 5000)}.get(name, default)

    def write(self, data: Any) -> None:
        self.written += data
        self.writes.append(bytes(data))

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


def request(body: bytes) -> bytes:
    head = f"POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: {len(body)}\r\n\r\n"
    return head.encode() + body


def connected(app: Any) -> tuple[HttpProtocol, Transport]:
    """The facade's protocol serving ``app`` on a new connection of a recording :class:`Transport`."""
    config = uvicorn.Config(app, http=HttpProtocol, lifespan="off", log_level="warning")
    protocol = HttpProtocol(config=config, server_state=ServerState(), app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport


def collecting_app(received: list[bytes], answer: Callable[[bytes], bytes]) -> Any:
    """An ASGI app that keeps every body message of a request in ``received`` and answers 200 with
    ``answer(the whole body)``."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            received.append(message["body"])
            if not message.get("more_body"):
                break
        body = answer(b"".join(received))
        headers = [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    return app


async def serve(pieces: list[bytes], *, read_between: bool) -> tuple[list[bytes], bytes, HttpProtocol]:
    """Feed the request in ``pieces`` (letting the app read between them when ``read_between``); return the
    body messages the app received, the response and the protocol."""
    received: list[bytes] = []
    app = collecting_app(received, lambda body: hashlib.sha256(body).hexdigest().encode())
    protocol, transport = connected(app)
    for piece in pieces:
        protocol.data_received(piece)
        if read_between:
            for _ in range(5):
                await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)
    return received, bytes(transport.written), protocol


@pytest.mark.parametrize("read_between", [True, False])
@pytest.mark.parametrize("cut", [1, 3, 17])
def test_a_body_arrives_whole_however_it_is_cut(cut: int, read_between: bool) -> None:
    body = os.urandom(300_000)
    raw = request(body)
    step = len(raw) // cut + 1
    pieces = [raw[i : i + step] for i in range(0, len(raw), step)]
    received, response, _ = asyncio.run(serve(pieces, read_between=read_between))
    assert b"".join(received) == body
    assert response.startswith(b"HTTP/1.1 200")
    assert response.endswith(hashlib.sha256(body).hexdigest().encode())


def test_a_piece_nobody_waits_for_is_kept_as_it_is_and_reading_pauses() -> None:
    """The parser's bytes object is kept (not appended to a bytearray), and above uvicorn's high-water
    mark reading pauses as before."""

    async def run() -> None:
        async def app(scope: Any, receive: Any, send: Any) -> None:
            await asyncio.Event().wait()  # never reads

        protocol, transport = connected(app)
        protocol.data_received(request(os.urandom(200_000)))
        assert type(protocol.cycle.body) is bytes
        assert len(protocol.cycle.body) == 200_000
        assert transport.paused
        protocol.connection_lost(None)

    asyncio.run(run())


def streaming_app(headers: list[tuple[bytes, bytes]], pieces: list[bytes], between: asyncio.Event) -> Any:
    """An ASGI app that starts its response with ``headers``, waits for ``between``, then sends ``pieces``."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while (await receive()).get("more_body"):
            pass
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await between.wait()
        for i, piece in enumerate(pieces):
            await send({"type": "http.response.body", "body": piece, "more_body": i < len(pieces) - 1})

    return app


async def answer(app: Any, raw: bytes) -> tuple[list[bytes], list[bytes], Transport]:
    """Serve ``raw`` to ``app`` (a :func:`streaming_app`); the writes so far (before the app's ``between`` is set),
    the list that will hold all the writes, and the transport."""
    protocol, transport = connected(app)
    protocol.data_received(raw)
    for _ in range(20):
        await asyncio.sleep(0)
    before = list(transport.writes)
    return before, transport.writes, transport


def test_a_response_of_known_length_leaves_in_one_write() -> None:
    """The status line and headers wait for the body and leave with it: one write per response, also for each of
    two pipelined requests; the bytes are uvicorn's."""

    async def echo(scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message["body"]
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]})
        await send({"type": "http.response.body", "body": body})

    async def pipelined() -> Transport:
        protocol, transport = connected(echo)
        protocol.data_received(request(b"abc") + request(b"defgh"))
        for _ in range(40):
            await asyncio.sleep(0)
        return transport

    transport = asyncio.run(pipelined())
    assert len(transport.writes) == 2
    first, second = transport.writes
    assert first.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b"\r\ncontent-length: 3\r\n" in first
    assert first.endswith(b"\r\n\r\nabc")
    assert second.startswith(b"HTTP/1.1 200 OK\r\n")
    assert second.endswith(b"\r\n\r\ndefgh")

    async def run() -> None:
        between = asyncio.Event()
        app = streaming_app([(b"content-length", b"6")], [b"abc", b"def"], between)
        before, writes, _ = await answer(app, request(b""))
        assert before == []  # the head waits for the body
        between.set()
        for _ in range(20):
            await asyncio.sleep(0)
        assert len(writes) == 2  # the head with the first piece, then the second piece
        assert writes[0].startswith(b"HTTP/1.1 200 OK\r\n")
        assert writes[0].endswith(b"\r\n\r\nabc")
        assert writes[1] == b"def"

    asyncio.run(run())


@pytest.mark.parametrize(
    ("case", "raw", "headers"),
    [
        ("chunked", request(b""), []),
        ("HEAD", b"HEAD / HTTP/1.1\r\nHost: x\r\n\r\n", [(b"content-length", b"3")]),
        ("empty", request(b""), [(b"content-length", b"0")]),
    ],
)
def test_a_response_without_a_body_of_known_length_writes_its_head_at_once(
    case: str, raw: bytes, headers: list[tuple[bytes, bytes]]
) -> None:
    """A streamed (chunked) response, an answer to HEAD and an empty body: the head is written when the app starts
    the response, before the app sends anything else, as uvicorn writes it."""

    async def run() -> None:
        between = asyncio.Event()
        pieces = [b""] if case != "chunked" else [b"abc", b""]
        before, writes, _ = await answer(streaming_app(headers, pieces, between), raw)
        assert len(before) == 1
        assert before[0].startswith(b"HTTP/1.1 200 OK\r\n")
        assert before[0].endswith(b"\r\n\r\n")
        between.set()
        for _ in range(20):
            await asyncio.sleep(0)
        if case == "chunked":
            assert b"".join(writes[1:]) == b"3\r\nabc\r\n0\r\n\r\n"

    asyncio.run(run())


def test_a_connection_to_close_gets_its_writes_then_the_close() -> None:
    """A request with ``Connection: close``: uvicorn's two writes, then the transport closed after them."""

    async def run() -> None:
        between = asyncio.Event()
        between.set()
        raw = b"POST / HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n"
        _, writes, transport = await answer(streaming_app([(b"content-length", b"3")], [b"abc"], between), raw)
        assert len(writes) == 2
        assert writes[1] == b"abc"
        assert b"\r\nconnection: close\r\n" in writes[0]
        assert transport.closed

    asyncio.run(run())


def test_a_client_gone_before_the_body_gets_nothing_more() -> None:
    """The client leaves between the head and the body: nothing is written to the closed connection."""

    async def run() -> None:
        between = asyncio.Event()
        app = streaming_app([(b"content-length", b"3")], [b"abc"], between)
        protocol, transport = connected(app)
        protocol.data_received(request(b""))
        for _ in range(20):
            await asyncio.sleep(0)
        protocol.connection_lost(None)
        between.set()
        for _ in range(20):
            await asyncio.sleep(0)
        assert transport.writes == []

    asyncio.run(run())


@pytest.mark.parametrize("cut", [1, 3, 17])
def test_the_buffered_protocol_reads_into_the_threads_one_buffer(cut: int) -> None:
    """Reads go into the thread's receive buffer (no bytes object per read), the same one every time and for
    every connection, and the body arrives whole; the protocol is a BufferedProtocol and not an
    asyncio.Protocol, which uvloop would feed bytes."""
    received: list[bytes] = []
    app = collecting_app(received, lambda body: b"")

    async def run() -> None:
        config = uvicorn.Config(app, lifespan="off", log_level="warning")
        protocol = BufferedHttpProtocol(config=config, server_state=ServerState(), app_state={})
        assert isinstance(protocol, asyncio.BufferedProtocol)
        assert not isinstance(protocol, asyncio.Protocol)
        protocol.connection_made(Transport())
        raw = request(body)
        step = len(raw) // cut + 1
        buffers = set()
        for i in range(0, len(raw), step):
            buffer = protocol.get_buffer(-1)
            buffers.add(id(buffer.obj))
            piece = raw[i : i + step]
            buffer[: len(piece)] = piece
            protocol.buffer_updated(len(piece))
            for _ in range(5):
                await asyncio.sleep(0)
        assert len(buffers) == 1
        assert len(buffer) == READ_BYTES
        other = BufferedHttpProtocol(config=config, server_state=ServerState(), app_state={})
        assert other.get_buffer(-1).obj is buffer.obj  # one buffer per thread, not per connection
        protocol.connection_lost(None)

    body = os.urandom(300_000)
    asyncio.run(run())
    assert b"".join(received) == body


def test_uvloop_reads_the_socket_into_the_protocols_buffer() -> None:
    """Served by uvloop on a socket, the facade's protocol is fed through get_buffer / buffer_updated (reads
    of up to READ_BYTES, where uvloop's own buffer takes 256,000 bytes), and the bodies of two connections sent
    at once arrive whole."""
    uvloop = pytest.importorskip("uvloop")
    updates: list[int] = []
    digests: list[str] = []

    class Recording(BufferedHttpProtocol):
        def buffer_updated(self, nbytes: int) -> None:
            updates.append(nbytes)
            super().buffer_updated(nbytes)

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        digest = hashlib.sha256()
        while True:
            message = await receive()
            digest.update(message["body"])
            if not message.get("more_body"):
                break
        digests.append(digest.hexdigest())
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"2")]})
        await send({"type": "http.response.body", "body": b"ok"})

    bodies = [os.urandom(4 * 1024 * 1024), os.urandom(3 * 1024 * 1024 + 17)]

    async def send(port: int, body: bytes) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(request(body))
        await writer.drain()
        answer = await reader.readuntil(b"ok")
        writer.close()
        assert answer.startswith(b"HTTP/1.1 200")

    async def run() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(
            lambda: Recording(config=config, server_state=ServerState(), app_state={}), "127.0.0.1", 0
        )
        port = server.sockets[0].getsockname()[1]
        await asyncio.gather(*(send(port, body) for body in bodies))  # two connections, one shared buffer
        server.close()

    config = uvicorn.Config(app, lifespan="off", log_level="warning")
    config.load()
    uvloop.run(run())
    assert sorted(digests) == sorted(hashlib.sha256(body).hexdigest() for body in bodies)
    assert sum(updates) == sum(len(request(body)) for body in bodies)
    assert max(updates) <= READ_BYTES


KEEP_SCRIPT = """
import ctypes, resource, sys
from dockyard_api.server import M_MMAP_THRESHOLD, keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
else:  # glibc's starting threshold, held: every piece mapped and unmapped (see the test's docstring)
    assert ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, 128 * 1024)
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for i in range(200):  # body pieces of 1 MiB gathered into batches, each batch freed once written, as an upload's
    batch = [b"\\x01" * (1024 * 1024) for _ in range(8)]  # written, as received bytes are (bytes(n) may not touch them)
    del batch
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_body_pieces_are_reused_without_page_faults() -> None:
    """With keep_freed_memory, 1,600 MiB of 1 MiB pieces allocated and freed in batches of 8 fault in the
    first batch's pages and few more, not those of most pieces again (glibc otherwise hands the memory back
    and faults zeroed pages in again: 411,200 faults here against 2,047). The pieces are written, as received
    bytes are: ``bytes(n)`` comes from ``calloc``, which leaves freshly mapped pages untouched, so the default's
    count then depended on where glibc happened to place the pieces (10,212 or 47,796 faults after importing
    the server module, by the module's code), not on keep_freed_memory. The default's run holds glibc's
    threshold at its starting value (128 KiB), which glibc otherwise moves after the first large free."""

    def faults(mode: str) -> int:
        out = subprocess.run([sys.executable, "-c", KEEP_SCRIPT, mode], capture_output=True, text=True, check=True)
        return int(out.stdout)

    kept = faults("keep")
    assert kept <= 3 * 8 * 256  # the first batch's pages (8 MiB) and little more
    assert faults("default") > 10 * kept
