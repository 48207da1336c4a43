"""The rest of a chunk upload's body read raw (server.RawBody, chunks.ChunkUpload): a real uvloop server with the
facade's protocol on loopback, the multipart parser and the model store's files, clients on raw sockets. The
stored bytes are exactly the file part's; the connection carries the next request; a client that goes away,
a chunk over the limit and a busy pool of raw readers all end as on the event loop's path. Each test runs with the
plain file data appended in C (``dockyard_core._pump``, where it was built) and with every read through Python."""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
import uvicorn
from starlette.requests import ClientDisconnect, Request
from uvicorn.server import ServerState

from dockyard_api import server
from dockyard_api.public.imports.chunks import ChunkUpload, Publish
from dockyard_core.storeerrors import ChunkConflict, ChunkTooLarge
from dockyard_core.storefiles import ReceivedChunk
from tests.unit.api.test_chunkupload import Harness, encoded

uvloop = pytest.importorskip("uvloop")
MiB = 1024 * 1024


@pytest.fixture(params=["c", "python"], autouse=True)
def pumped(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """The form of the raw reads: ``c``, the server's C pump (counted: its calls and the bytes it appended), or
    ``python``, every read handed to the upload's parse."""
    counts = {"calls": 0, "bytes": 0, "c": int(request.param == "c")}
    if request.param == "python":
        monkeypatch.setattr(server, "PUMP", False)
        return counts
    if not server.PUMP:
        pytest.skip("the C extension was not built")
    real = server._pump

    def pump(*args: object) -> tuple[int, int, int, int, int]:
        answer = real.pump(*args)
        counts["calls"] += 1
        counts["bytes"] += answer[3]
        return answer

    names = ("DONE", "PIECE", "CLOSED", "SILENT", "SOCKET_ERROR", "WRITE_ERROR")
    monkeypatch.setattr(server, "_pump", SimpleNamespace(pump=pump, **{n: getattr(real, n) for n in names}))
    return counts


def post(body: bytes, content_type: str, extra: bytes = b"") -> bytes:
    return (
        f"POST /chunk HTTP/1.1\r\nHost: t\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n".encode()
        + extra
        + b"\r\n"
        + body
    )


class Served:
    """What the app saw, per request: (number, stored bytes, read raw) or the error's name."""

    def __init__(self, tmp_path: Path, limit: int = 64 * MiB, publish: Publish | None = None) -> None:
        self.harness = Harness(tmp_path)
        self.limit = limit
        self.publish = publish
        self.results: list[Any] = []

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive)
        raw = (scope.get("extensions") or {}).get(server.RAW_BODY)
        upload = ChunkUpload(lambda: self.harness.store.writer(self.harness.meta, self.limit), self.harness.check)
        status = 200
        try:
            number, chunk = await upload.read(request.headers.get("content-type"), request.stream(), raw, self.publish)
            self.results.append((number, chunk.path.read_bytes(), upload.raw))
            chunk.path.unlink()
        except (ClientDisconnect, ChunkTooLarge, ChunkConflict) as exc:
            self.results.append(type(exc).__name__)
            status = 413
        answer = orjson.dumps({"n": len(self.results)})
        headers = [(b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


def serve(served: Served, client: Callable[[int], Awaitable[None]]) -> None:
    async def run() -> None:
        config = uvicorn.Config(served.app, lifespan="off", log_level="warning", interface="asgi3")
        config.load()
        loop = asyncio.get_running_loop()
        listener = await loop.create_server(
            lambda: server.BufferedHttpProtocol(config=config, server_state=ServerState(), app_state={}),
            "127.0.0.1",
            0,
        )
        try:
            await asyncio.wait_for(client(listener.sockets[0].getsockname()[1]), 30)  # a hang fails the test
        finally:
            listener.close()

    uvloop.run(run())


async def answer(reader: asyncio.StreamReader) -> tuple[int, bytes]:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.split(b"content-length: ")[1].split(b"\r\n")[0])
    return int(head.split(b" ")[1]), await reader.readexactly(length)


async def exchange(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, message: bytes) -> tuple[int, bytes]:
    """Send one request on the connection and read its answer."""
    writer.write(message)
    await writer.drain()
    return await answer(reader)


def awkward_file(size: int) -> bytes:
    """Random bytes with the delimiter's prefixes (and all of it but its last byte) spread through them."""
    delimiter = b"\r\n------dockyard-test-boundary"
    data = bytearray(os.urandom(size))
    for at in range(1000, size - 64, 65_521):
        k = at % len(delimiter)
        data[at : at + k] = delimiter[:k]
    data[-len(delimiter) :] = delimiter[:-1] + b"x"
    return bytes(data)


@pytest.mark.parametrize("file_first", [True, False])
def test_the_rest_of_the_body_is_read_raw_and_stored_exactly(
    tmp_path: Path, file_first: bool, pumped: dict[str, int]
) -> None:
    """Sent in pieces of odd sizes with pauses between them, so the raw reads end anywhere, also inside a
    delimiter's prefix and inside the closing delimiter: the stored file is exactly the file part."""
    served = Served(tmp_path)
    data = awkward_file(5 * MiB + 123)
    fields: list[tuple[str, tuple[str, bytes] | str]] = [("file", ("blob", data)), ("chunkNumber", "3")]
    ctype, body = encoded(fields if file_first else fields[::-1])
    message = post(body, ctype)

    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        at, sizes = 0, [1, 29, 30, 31, 4096, 65_537, 700_001]
        for i in range(10_000):
            if at >= len(message):
                break
            piece = sizes[i % len(sizes)] if at > 2 * MiB else len(message)
            writer.write(message[at : at + piece])
            await writer.drain()
            at += piece
            await asyncio.sleep(0.001 if i % 3 == 0 else 0)
        assert await answer(reader) == (200, b'{"n":1}')
        writer.close()

    serve(served, client)
    assert served.results == [(3, data, True)]
    assert served.harness.temp_files() == []
    if pumped["c"]:  # most of the file was appended in C (the rest: the event loop's first reads, and the reads
        assert pumped["bytes"] > 2 * MiB  # that end in a start of the delimiter or hold the delimiter)


def test_the_connection_carries_the_next_request_sent_at_once(tmp_path: Path) -> None:
    """Two uploads back to back in one write on one connection (pipelined): the raw read takes exactly the
    first body, and the second request is parsed afresh."""
    served = Served(tmp_path)
    first, second = os.urandom(3 * MiB), os.urandom(2 * MiB + 5)
    ctype, body1 = encoded([("chunkNumber", "1"), ("file", ("a", first))])
    _, body2 = encoded([("chunkNumber", "2"), ("file", ("b", second))])

    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(post(body1, ctype) + post(body2, ctype))
        await writer.drain()
        assert await answer(reader) == (200, b'{"n":1}')
        assert await answer(reader) == (200, b'{"n":2}')
        writer.close()

    serve(served, client)
    assert [(n, d) for n, d, _ in served.results] == [(1, first), (2, second)]
    assert served.results[0][2]  # the first read raw; the second may have come whole with the first's reads


def test_a_client_gone_mid_chunk_leaves_no_file_and_the_server_serves_on(
    tmp_path: Path, pumped: dict[str, int]
) -> None:
    served = Served(tmp_path)
    ctype, body = encoded([("chunkNumber", "1"), ("file", ("a", os.urandom(4 * MiB)))])
    ctype2, body2 = encoded([("chunkNumber", "2"), ("file", ("b", b"small"))])

    async def client(port: int) -> None:
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(post(body, ctype)[: 2 * MiB])
        await writer.drain()
        await asyncio.sleep(0.2)  # the raw read is under way
        writer.transport.abort()  # type: ignore[attr-defined]  # a reset, as a killed client's
        await asyncio.sleep(0.2)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await exchange(reader, writer, post(body2, ctype2)) == (200, b'{"n":2}')
        writer.close()

    serve(served, client)
    assert served.results[0] == "ClientDisconnect"
    assert served.results[1] == (2, b"small", False)  # whole in the first read: nothing left to read raw
    assert served.harness.temp_files() == []
    assert pumped["calls"] >= pumped["c"]  # in C: the pump saw the reset


def test_a_chunk_over_the_limit_in_the_raw_read_is_refused_and_the_connection_carries_on(
    tmp_path: Path, pumped: dict[str, int]
) -> None:
    """The raw read drops the rest of the body (the client, still sending, gets the 413, not a reset) and the
    connection takes the next request."""
    served = Served(tmp_path, limit=3 * MiB)
    ctype, body = encoded([("chunkNumber", "1"), ("file", ("a", os.urandom(5 * MiB)))])
    _, small = encoded([("chunkNumber", "2"), ("file", ("b", b"small"))])

    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert (await exchange(reader, writer, post(body, ctype)))[0] == 413
        assert await exchange(reader, writer, post(small, ctype)) == (200, b'{"n":2}')
        writer.close()

    serve(served, client)
    assert served.results == ["ChunkTooLarge", (2, b"small", False)]
    assert served.harness.temp_files() == []
    assert pumped["calls"] >= pumped["c"]  # in C: the pump handed back the read past the limit


def test_without_a_free_raw_reader_the_body_comes_through_the_event_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(server, "_RAW_ACTIVE", [server.RAW_READERS])
    served = Served(tmp_path)
    data = os.urandom(3 * MiB)
    ctype, body = encoded([("chunkNumber", "1"), ("file", ("a", data))])

    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await exchange(reader, writer, post(body, ctype)) == (200, b'{"n":1}')
        writer.close()

    serve(served, client)
    assert served.results == [(1, data, False)]


def test_the_chunk_is_flushed_and_published_by_the_reading_thread(tmp_path: Path, pumped: dict[str, int]) -> None:
    """After a raw read, the reading thread itself completes the parse, flushes the chunk and calls ``publish``
    (no hop back to the event loop and out to another thread); a chunk read through the event loop is flushed and
    published in one call of a write thread. An error of ``publish`` is the request's, and the chunk's temporary
    file is gone."""
    seen: list[tuple[int, int, str, bool]] = []

    def publish(number: int, chunk: ReceivedChunk) -> bool:
        seen.append((number, chunk.size, threading.current_thread().name.split("_")[0], chunk.path.exists()))
        if number == 3:
            chunk.path.unlink()  # as the store's publish does when it refuses a chunk
            raise ChunkConflict("different bytes", {"chunkNumber": number})
        return True

    served = Served(tmp_path, publish=publish)
    big, small = os.urandom(3 * MiB), b"small"
    ctype, body1 = encoded([("chunkNumber", "1"), ("file", ("a", big))])
    _, body2 = encoded([("chunkNumber", "2"), ("file", ("b", small))])
    _, body3 = encoded([("chunkNumber", "3"), ("file", ("c", big))])

    async def client(port: int) -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await exchange(reader, writer, post(body1, ctype)) == (200, b'{"n":1}')
        assert await exchange(reader, writer, post(body2, ctype)) == (200, b'{"n":2}')
        assert (await exchange(reader, writer, post(body3, ctype)))[0] == 413
        writer.close()

    serve(served, client)
    assert served.results == [(1, big, True), (2, small, False), "ChunkConflict"]
    assert seen == [(1, len(big), "raw-body", True), (2, len(small), "chunk-writes", True),
                    (3, len(big), "raw-body", True)]  # fmt: skip
    assert served.harness.temp_files() == []
