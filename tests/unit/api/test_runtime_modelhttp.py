"""The model calls' own HTTP client (dockyard_api.runtime.modelhttp) against a real TCP server on loopback that
answers as scripted: how answers are framed (length, chunks, the connection's close), which connections are reused,
the limit on connections, failures, cancellation."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import pytest
import uvloop
import yarl

from dockyard_api.runtime.modelhttp import ConnectFailed, Disconnected, ModelHttp, plain
from tests.support.runners import free_port

JSON = b'{"ok": true}'


def ok(body: bytes = JSON, extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        len(body),
        extra,
        body,
    )


@dataclass
class Server:
    """Reads one request at a time per connection (head and Content-Length body) and answers what ``answer``
    gives for it: bytes to send, or None to close the connection without a word; ``hold`` keeps it waiting."""

    answer: Callable[[int, bytes], bytes | None] = lambda n, request: ok()
    connections: int = 0
    open_now: int = 0
    most_open: int = 0
    requests: list[bytes] = field(default_factory=list)
    hold: asyncio.Event | None = None
    close_after: bool = False
    url: yarl.URL = field(default_factory=yarl.URL)
    writers: list[asyncio.StreamWriter] = field(default_factory=list)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.open_now += 1
        self.most_open = max(self.most_open, self.open_now)
        self.writers.append(writer)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                request = head + await reader.readexactly(length)
                self.requests.append(request)
                if self.hold is not None:
                    await self.hold.wait()
                answer = self.answer(len(self.requests), request)
                if answer is None:
                    return
                writer.write(answer)
                await writer.drain()
                if self.close_after:
                    return
        except (asyncio.IncompleteReadError, ConnectionError):
            return
        finally:
            self.open_now -= 1
            writer.close()


@contextlib.asynccontextmanager
async def serving(server: Server) -> AsyncIterator[Server]:
    listening = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    server.url = yarl.URL(f"http://127.0.0.1:{port}/v1/chat/completions")
    async with listening:
        yield server
        for writer in server.writers:
            writer.close()


def run(test: Callable[[], object]) -> None:
    uvloop.run(test())  # type: ignore[arg-type]


async def post(
    client: ModelHttp, server: Server, limit: int = 1 << 20, error_limit: int = 16
) -> tuple[int, bytes, bool]:
    answer = await client.post_json(server.url, b'{"messages": []}', {"traceparent": "00-ab-cd-01"}, limit, error_limit)
    return answer.status, answer.body, answer.cut


def test_a_request_is_one_plain_post_and_its_connection_is_kept_for_the_next() -> None:
    async def test() -> None:
        async with serving(Server()) as server:
            client = ModelHttp(8)
            assert await post(client, server) == (200, JSON, False)
            assert await post(client, server) == (200, JSON, False)
            assert server.connections == 1
            head, _, body = server.requests[0].partition(b"\r\n\r\n")
            lines = head.split(b"\r\n")
            assert lines[0] == b"POST /v1/chat/completions HTTP/1.1"
            assert f"Host: {server.url.raw_authority}".encode() in lines
            assert b"Content-Length: 16" in lines
            assert b"traceparent: 00-ab-cd-01" in lines
            assert [line for line in lines if line.lower().startswith(b"content-type")] == [
                b"Content-Type: application/json"
            ]
            assert body == b'{"messages": []}'
            client.close()

    run(test)


def test_chunked_answers_are_put_together_and_the_connection_kept() -> None:
    chunked = b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n{"ok"\r\n7\r\n: true}\r\n0\r\n\r\n'

    async def test() -> None:
        async with serving(Server(answer=lambda n, r: chunked)) as server:
            client = ModelHttp(8)
            assert await post(client, server) == (200, JSON, False)
            assert await post(client, server) == (200, JSON, False)
            assert server.connections == 1

    run(test)


def test_an_answer_delimited_by_the_close_is_whole_and_its_connection_not_reused() -> None:
    async def test() -> None:
        server = Server(answer=lambda n, r: b"HTTP/1.0 200 OK\r\n\r\n" + JSON, close_after=True)
        async with serving(server):
            client = ModelHttp(8)
            assert await post(client, server) == (200, JSON, False)
            assert await post(client, server) == (200, JSON, False)
            assert server.connections == 2

    run(test)


@pytest.mark.parametrize("extra", [b"Connection: close\r\n", b""], ids=["connection-close", "keep-alive"])
def test_connection_close_is_honoured(extra: bytes) -> None:
    async def test() -> None:
        async with serving(Server(answer=lambda n, r: ok(extra=extra))) as server:
            client = ModelHttp(8)
            for _ in range(3):
                assert await post(client, server) == (200, JSON, False)
            assert server.connections == (3 if extra else 1)

    run(test)


def test_an_answer_over_the_limit_is_cut_and_its_connection_closed() -> None:
    big = b"x" * 5000

    async def test() -> None:
        async with serving(Server(answer=lambda n, r: ok(big) if n == 1 else ok())) as server:
            client = ModelHttp(8)
            assert await post(client, server, limit=1000) == (200, b"x" * 1000, True)
            assert await post(client, server, limit=1000) == (200, JSON, False)
            assert server.connections == 2

    run(test)


def test_an_error_status_keeps_only_the_start_of_its_body() -> None:
    error = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 40\r\n\r\n" + b"e" * 40

    async def test() -> None:
        async with serving(Server(answer=lambda n, r: error)) as server:
            client = ModelHttp(8)
            assert await post(client, server, error_limit=16) == (500, b"e" * 16, True)
            assert await post(client, server, error_limit=100) == (500, b"e" * 40, False)

    run(test)


def test_a_server_that_closes_before_answering_is_disconnected_and_the_next_call_gets_a_new_connection() -> None:
    async def test() -> None:
        half = b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"partial'
        answers = {1: None, 2: half}
        server = Server(answer=lambda n, r: answers.get(n, ok()), close_after=False)
        async with serving(server):
            client = ModelHttp(8)
            with pytest.raises(Disconnected):
                await post(client, server)
            server.close_after = True  # the half answer, then the close
            with pytest.raises(Disconnected):
                await post(client, server)
            server.close_after = False
            assert await post(client, server) == (200, JSON, False)
            assert server.connections == 3

    run(test)


def test_garbage_instead_of_http_is_disconnected() -> None:
    async def test() -> None:
        async with serving(Server(answer=lambda n, r: b"SSH-2.0-OpenSSH_9.2\r\n\r\n")) as server:
            with pytest.raises(Disconnected, match="not HTTP"):
                await post(ModelHttp(8), server)

    run(test)


def test_an_endpoint_that_is_not_there_is_connect_failed() -> None:
    async def test() -> None:
        client = ModelHttp(8)
        url = yarl.URL(f"http://127.0.0.1:{free_port()}/v1/chat/completions")
        with pytest.raises(ConnectFailed, match="ConnectionRefused"):
            await client.post_json(url, b"{}", {}, 100, 100)
        with pytest.raises(ConnectFailed):
            await client.post_json(yarl.URL("http://no-such-host.invalid/v1"), b"{}", {}, 100, 100)
        server = Server()
        async with serving(server):  # the failures gave their places back
            assert await post(client, server) == (200, JSON, False)

    run(test)


def test_an_idle_connection_the_server_closed_is_not_used_again() -> None:
    async def test() -> None:
        async with serving(Server()) as server:
            client = ModelHttp(8)
            assert await post(client, server) == (200, JSON, False)
            for writer in server.writers:
                writer.close()
            await asyncio.sleep(0.05)  # the close reaches the client
            assert await post(client, server) == (200, JSON, False)
            assert server.connections == 2

    run(test)


def test_at_most_the_limit_of_connections_carry_calls_the_others_wait_their_turn() -> None:
    async def test() -> None:
        async with serving(Server(hold=asyncio.Event())) as server:
            assert server.hold is not None
            client = ModelHttp(2)
            calls = [asyncio.ensure_future(post(client, server)) for _ in range(6)]
            while len(server.requests) < 2:
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.05)
            assert server.most_open == 2
            assert len(server.requests) == 2  # the other four wait
            server.hold.set()
            assert await asyncio.gather(*calls) == [(200, JSON, False)] * 6
            assert server.connections == 2

    run(test)


def test_a_cancelled_call_closes_its_connection_and_gives_its_place_back() -> None:
    async def test() -> None:
        hold = asyncio.Event()
        async with serving(Server(hold=hold)) as server:
            client = ModelHttp(1)
            first = asyncio.ensure_future(post(client, server))
            waiting = asyncio.ensure_future(post(client, server))  # waits for the one place
            while not server.requests:
                await asyncio.sleep(0.01)
            waiting.cancel()
            first.cancel()
            for task in (first, waiting):
                with pytest.raises(asyncio.CancelledError):
                    await task
            hold.set()
            assert await asyncio.wait_for(post(client, server), 5) == (200, JSON, False)
            assert server.connections == 2  # the cancelled call's connection was not reused

    run(test)


def test_a_closed_client_refuses_calls() -> None:
    async def test() -> None:
        async with serving(Server()) as server:
            client = ModelHttp(4)
            assert await post(client, server) == (200, JSON, False)
            client.close()
            with pytest.raises(ConnectFailed, match="closed"):
                await post(client, server)

    run(test)


@pytest.mark.parametrize(
    ("url", "served"),
    [
        ("http://10.0.0.5:8000/v1/chat/completions", True),
        ("http://engine.ns.svc/prefix/v1/chat/completions", True),
        ("http://[::1]:8000/v1/chat/completions", True),
        ("https://api.example.com/v1/chat/completions", False),
        ("http://user:secret@engine:8000/v1/chat/completions", False),
    ],
)
def test_plain_http_urls_without_credentials_are_served_the_others_go_to_aiohttp(url: str, served: bool) -> None:
    assert plain(yarl.URL(url)) is served


def test_a_server_that_answers_twice_to_one_request_is_not_used_again() -> None:
    async def test() -> None:
        async with serving(Server(answer=lambda n, r: ok() + ok() if n == 1 else ok())) as server:
            client = ModelHttp(8)
            assert await post(client, server) == (200, JSON, False)
            assert await post(client, server) == (200, JSON, False)
            assert server.connections == 2

    run(test)
