"""A real OpenAI-compatible HTTP server on 127.0.0.1 whose answers each test scripts, recording every request.

It serves ``POST /v1/chat/completions`` (blocking and streamed, with tool calls and ``usage``) and
``POST /tools/<name>`` (HTTP tools the test defines), from an aiohttp server on its own event loop in a
thread. Tests queue replies (:class:`Reply`: text, tool calls, usage, delay, an error status, garbage, a
stream cut short) or give a function of the request; every request is kept in ``requests``.

Run alone (the benchmark does): ``python -m tests.support.scripted_model --port 0 --delay-ms 20``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import inspect
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import orjson
from aiohttp import web


@dataclass
class Call:
    """A tool call the model makes: arguments as a dict (sent as its JSON text) or as raw text."""

    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)
    id: str = ""

    def text(self) -> str:
        return self.arguments if isinstance(self.arguments, str) else orjson.dumps(self.arguments).decode()


@dataclass
class Reply:
    """One scripted answer of the model."""

    text: str = ""
    calls: list[Call] = field(default_factory=list)
    usage: tuple[int, int] | None = (10, 5)
    """(prompt_tokens, completion_tokens); None: no usage in the answer."""
    delay: float = 0.0
    """Seconds to wait before answering (a slow engine)."""
    status: int = 200
    raw: bytes | None = None
    """A body sent as is (garbage), with ``status``."""
    pieces: int = 3
    """Streamed: the text is sent in this many chunks."""
    cut_stream: bool = False
    """Streamed: stop after the first chunk, without a finish reason or [DONE] (an engine that died)."""
    content_null: bool = False
    empty_stream: bool = False
    """Streamed: a 200 event stream that ends without a single chunk (llama-cpp-python's server asked to
    stream with tools and tool_choice "auto")."""
    """Send "content": null (what engines do with tool calls)."""


@dataclass
class Recorded:
    path: str
    body: dict[str, Any]
    headers: dict[str, str]
    at: float


Responder = Callable[[dict[str, Any]], Reply]
ToolHandler = Callable[[dict[str, Any]], Any]


class ScriptedModel:
    """The server; use :func:`scripted_model` to run one."""

    def __init__(self, *, default: Reply | None = None, record: bool = True) -> None:
        self.default = default or Reply(text="ok")
        self.record = record
        self.requests: list[Recorded] = []
        self.tool_requests: list[Recorded] = []
        self._script: deque[Reply] = deque()
        self._responder: Responder | None = None
        self.tools: dict[str, ToolHandler] = {}
        self.url = ""
        self._lock = threading.Lock()

    # --- scripting ---------------------------------------------------------------------------------

    def script(self, *replies: Reply) -> None:
        """Answer the next requests with these replies, in order (then ``default``)."""
        with self._lock:
            self._script.extend(replies)

    def respond_with(self, responder: Responder | None) -> None:
        """Answer every request with ``responder(request body)`` (after the scripted replies)."""
        self._responder = responder

    def tool(self, name: str, handler: ToolHandler) -> str:
        """Serve an HTTP tool at ``/tools/<name>``: ``handler(arguments)`` gives the JSON answer (or raises
        to answer 500). Returns the tool's URL."""
        self.tools[name] = handler
        return f"{self.url}/tools/{name}"

    def reset(self) -> None:
        with self._lock:
            self._script.clear()
            self.requests.clear()
            self.tool_requests.clear()
        self._responder = None

    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in self.requests]

    def _next(self, body: dict[str, Any]) -> Reply:
        with self._lock:
            if self._script:
                return self._script.popleft()
        if self._responder is not None:
            return self._responder(body)
        return self.default

    # --- HTTP --------------------------------------------------------------------------------------

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/health", self._health)
        app.router.add_post("/tools/{name}", self._tool)
        return app

    async def _health(self, _: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def _models(self, _: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "scripted", "object": "model"}]})

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        body = orjson.loads(await request.read())
        if self.record:
            self.requests.append(Recorded(request.path, body, dict(request.headers), time.monotonic()))
        reply = self._next(body)
        if reply.delay:
            await asyncio.sleep(reply.delay)
        if reply.raw is not None:
            return web.Response(body=reply.raw, status=reply.status, content_type="application/json")
        if reply.status >= 300:
            error = {"error": {"message": f"scripted failure {reply.status}", "type": "server_error"}}
            return web.Response(body=orjson.dumps(error), status=reply.status, content_type="application/json")
        model = str(body.get("model", "scripted"))
        if body.get("stream"):
            return await self._stream(request, body, reply, model)
        message: dict[str, Any] = {"role": "assistant", "content": None if reply.content_null else reply.text}
        if reply.calls:
            message["tool_calls"] = [
                {"id": c.id or f"call_{i}", "type": "function", "function": {"name": c.name, "arguments": c.text()}}
                for i, c in enumerate(reply.calls)
            ]
        answer: dict[str, Any] = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if reply.calls else "stop"}],
        }
        if reply.usage is not None:
            answer["usage"] = _usage(reply.usage)
        return web.Response(body=orjson.dumps(answer), content_type="application/json")

    async def _stream(self, request: web.Request, body: dict[str, Any], reply: Reply, model: str) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
        await response.prepare(request)
        if reply.empty_stream:
            await response.write_eof()
            return response
        base = {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion.chunk", "model": model}

        async def send(choice_delta: dict[str, Any], finish: str | None = None, **extra: Any) -> None:
            chunk = {**base, "choices": [{"index": 0, "delta": choice_delta, "finish_reason": finish}], **extra}
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")

        await send({"role": "assistant", "content": ""})
        text = reply.text
        size = max(1, -(-len(text) // max(1, reply.pieces))) if text else 0
        for start in range(0, len(text), size or 1):
            await send({"content": text[start : start + size]})
            if reply.cut_stream:
                return response
        for i, call in enumerate(reply.calls):
            head = {"index": i, "id": call.id or f"call_{i}", "type": "function", "function": {"name": call.name}}
            await send({"tool_calls": [{**head, "function": {"name": call.name, "arguments": ""}}]})
            arguments = call.text()
            half = len(arguments) // 2
            for part in (arguments[:half], arguments[half:]):
                await send({"tool_calls": [{"index": i, "function": {"arguments": part}}]})
        if reply.cut_stream:
            return response
        await send({}, "tool_calls" if reply.calls else "stop")
        if reply.usage is not None and (body.get("stream_options") or {}).get("include_usage"):
            chunk = {**base, "choices": [], "usage": _usage(reply.usage)}
            await response.write(b"data: " + orjson.dumps(chunk) + b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    async def _tool(self, request: web.Request) -> web.Response:
        name = request.match_info["name"]
        raw = await request.read()
        try:
            arguments = orjson.loads(raw) if raw else {}
        except orjson.JSONDecodeError:
            return web.Response(status=400, text="arguments are not JSON")
        self.tool_requests.append(Recorded(request.path, arguments, dict(request.headers), time.monotonic()))
        handler = self.tools.get(name)
        if handler is None:
            return web.Response(status=404, text=f"no tool {name}")
        try:
            result = handler(arguments)
            if asyncio.iscoroutine(result):
                result = await result
        except Exception as exc:
            return web.Response(status=500, text=f"tool failed: {exc}")
        if isinstance(result, web.Response):
            return result
        return web.Response(body=orjson.dumps(result), content_type="application/json")


def _usage(usage: tuple[int, int]) -> dict[str, int]:
    return {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": usage[0] + usage[1]}


@contextlib.contextmanager
def scripted_model(*, default: Reply | None = None, record: bool = True, port: int = 0) -> Iterator[ScriptedModel]:
    """A :class:`ScriptedModel` listening on 127.0.0.1 (a free port) in a thread, stopped afterwards."""
    server = ScriptedModel(default=default, record=record)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    runner = web.AppRunner(server.app(), access_log=None)

    async def start() -> None:
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", port)
        await site.start()
        sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
        server.url = f"http://127.0.0.1:{sockets[0].getsockname()[1]}"
        ready.set()

    def serve() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(start())
        loop.run_forever()
        loop.run_until_complete(runner.cleanup())
        loop.close()

    thread = threading.Thread(target=serve, name="scripted-model", daemon=True)
    thread.start()
    if not ready.wait(10):
        raise RuntimeError("the scripted model server did not start")
    try:
        yield server
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=10)


def main() -> None:
    parser = argparse.ArgumentParser(description="a scripted OpenAI-compatible model server (fixed answer)")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--delay-ms", type=float, default=0.0, help="wait this long before each answer")
    parser.add_argument("--text", default="Hello from the scripted model.")
    args = parser.parse_args()
    default = Reply(text=args.text, delay=args.delay_ms / 1000.0, usage=(12, 7))
    server = ScriptedModel(default=default, record=False)

    async def run() -> None:
        runner = web.AppRunner(server.app(), access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", args.port)
        await site.start()
        sockets = site._server.sockets if site._server is not None else []  # type: ignore[union-attr]
        print(f"http://127.0.0.1:{sockets[0].getsockname()[1]}", flush=True)
        await asyncio.Event().wait()

    with contextlib.suppress(KeyboardInterrupt):
        try:
            import uvloop

            uvloop.run(run())
        except ImportError:
            asyncio.run(run())


if __name__ == "__main__":
    main()


@dataclass
class RunningMcp:
    url: str
    """The MCP endpoint (Streamable HTTP), ``http://127.0.0.1:<port>/mcp``."""
    calls: list[tuple[str, dict[str, Any]]]
    headers: list[dict[str, str]] = field(default_factory=list)
    """The headers of every HTTP request the server received (e.g. a traceparent)."""


@contextlib.contextmanager
def mcp_server(tools: dict[str, Callable[..., Any]], *, name: str = "scripted") -> Iterator[RunningMcp]:
    """A real MCP server (the MCP Python SDK's FastMCP, Streamable HTTP, stateless) serving ``tools`` (plain
    Python functions: their signatures become the tools' input schemas), in uvicorn on a free port."""
    import socket

    import uvicorn
    from mcp.server.fastmcp import FastMCP

    calls: list[tuple[str, dict[str, Any]]] = []
    server = FastMCP(name, stateless_http=True, json_response=True, log_level="WARNING")
    for tool_name, function in tools.items():

        def recorded(function: Callable[..., Any] = function, tool_name: str = tool_name) -> Callable[..., Any]:
            def wrapper(**kwargs: Any) -> Any:
                calls.append((tool_name, kwargs))
                return function(**kwargs)

            wrapper.__signature__ = inspect.signature(function)  # type: ignore[attr-defined]
            wrapper.__annotations__ = function.__annotations__
            wrapper.__doc__ = function.__doc__
            return wrapper

        server.add_tool(recorded(), name=tool_name, description=function.__doc__ or tool_name)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = server.streamable_http_app()
    headers: list[dict[str, str]] = []

    async def recording(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers.append({k.decode(): v.decode() for k, v in scope["headers"]})
        await app(scope, receive, send)

    config = uvicorn.Config(recording, host="127.0.0.1", port=port, log_level="warning")
    web_server = uvicorn.Server(config)
    thread = threading.Thread(target=web_server.run, name="mcp-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not web_server.started:
        if time.monotonic() > deadline:
            raise RuntimeError("the MCP server did not start")
        time.sleep(0.02)
    try:
        yield RunningMcp(f"http://127.0.0.1:{port}/mcp", calls, headers)
    finally:
        web_server.should_exit = True
        thread.join(timeout=10)
