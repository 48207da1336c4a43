"""The facade's uvicorn protocol (dockyard_api.server.HttpProtocol) against the pinned uvicorn: a request
body arrives whole and in order however it is cut, and a piece that nobody waits for is handed to the app
as the very bytes object the parser made (no copy)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from dockyard_api.server import HttpProtocol


class Transport(asyncio.Transport):
    """What the protocol writes, and whether it paused reading."""

    def __init__(self) -> None:
        super().__init__()
        self.written = bytearray()
        self.paused = False
        self.closed = False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 8000), "peername": ("127.0.0.1", 5000)}.get(name, default)

    def write(self, data: Any) -> None:
        self.written += data

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


async def serve(pieces: list[bytes], *, read_between: bool) -> tuple[list[bytes], bytes, HttpProtocol]:
    """Feed the request in ``pieces`` (letting the app read between them when ``read_between``); return the
    body messages the app received, the response and the protocol."""
    received: list[bytes] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        while True:
            message = await receive()
            received.append(message["body"])
            if not message.get("more_body"):
                break
        digest = hashlib.sha256(b"".join(received)).hexdigest().encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"64")]})
        await send({"type": "http.response.body", "body": digest})

    config = uvicorn.Config(app, http=HttpProtocol, lifespan="off", log_level="warning")
    protocol = HttpProtocol(config=config, server_state=ServerState(), app_state={})
    protocol.connection_made(Transport())
    for piece in pieces:
        protocol.data_received(piece)
        if read_between:
            for _ in range(5):
                await asyncio.sleep(0)
    for _ in range(20):
        await asyncio.sleep(0)
    transport = protocol.transport
    assert isinstance(transport, Transport)
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

        config = uvicorn.Config(app, http=HttpProtocol, lifespan="off", log_level="warning")
        protocol = HttpProtocol(config=config, server_state=ServerState(), app_state={})
        transport = Transport()
        protocol.connection_made(transport)
        protocol.data_received(request(os.urandom(200_000)))
        assert type(protocol.cycle.body) is bytes
        assert len(protocol.cycle.body) == 200_000
        assert transport.paused
        protocol.connection_lost(None)

    asyncio.run(run())
