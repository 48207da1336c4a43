"""The OpenAI-compatible chat-completions client of the runtime (vLLM, llama.cpp, Dockyard's CTranslate2
server all serve ``POST <base>/v1/chat/completions``).

A completion that is not streamed, to an ``http://`` endpoint (the engines Dockyard runs, in local mode and in
the cluster), goes through the runtime's own HTTP/1.1 client (:mod:`.modelhttp`: a sixth of a turn's CPU was
aiohttp's per-request work); a streamed one, or one to an ``https://`` endpoint, through one pooled aiohttp
session (aiohttp's pool costs the same per request however many connections are open; see
:mod:`dockyard_core.kubeclient`); each carries at most ``max_connections`` calls at once. Answers are parsed
strictly: an engine that is down is a 503, one that answers an error status or something that is not a chat
completion is a 502 naming what was wrong, and the caller's deadline bounds every call (504).
"""

from __future__ import annotations

import asyncio
import functools
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import aiohttp
import orjson
import yarl

from dockyard_api.runtime import tracing
from dockyard_api.runtime.errors import ModelBadResponseError, ModelUnavailableError
from dockyard_api.runtime.modelhttp import ConnectFailed, Disconnected, ModelHttp, plain
from dockyard_core.errors import DockyardError

if TYPE_CHECKING:
    from dockyard_core.tracing import Span

MAX_ANSWER_BYTES = 8 * 1024 * 1024
"""A chat completion larger than this is not one (a runaway or hostile endpoint)."""
ERROR_BYTES = 4096
"""Of an error status's body, what is read and quoted."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str
    """The arguments as the model wrote them (a JSON text, maybe invalid)."""


@dataclass
class Completion:
    content: str
    tool_calls: list[ToolCall]
    tokens_in: int
    tokens_out: int
    finish_reason: str | None = None


@dataclass
class Usage:
    """Tokens of every model call of a turn, from the engines' ``usage``."""

    tokens_in: int = 0
    tokens_out: int = 0
    calls: int = 0

    def add(self, completion: Completion) -> None:
        self.tokens_in += completion.tokens_in
        self.tokens_out += completion.tokens_out
        self.calls += 1


_DROPPED = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, Disconnected)
"""A connection the server closed before answering (either client's way of saying it)."""

OnDelta = Callable[[str], Awaitable[None]]


@dataclass
class _Accumulator:
    """Pieces of a streamed completion, put together."""

    content: list[str] = field(default_factory=list)
    calls: dict[int, dict[str, Any]] = field(default_factory=dict)
    tokens_in: int = 0
    tokens_out: int = 0
    finish_reason: str | None = None
    done: bool = False
    chunks: int = 0


class _EmptyStreamError(ModelBadResponseError):
    """A 200 event stream without a single chunk: llama-cpp-python's server (chat format
    chatml-function-calling) does this when asked to stream with tools and ``tool_choice: "auto"``
    ("Automatic streaming tool choice is not supported" in its log, after the 200 was sent)."""


class ModelClient:
    """Sends chat completions to model endpoints over one connection pool."""

    def __init__(self, *, max_connections: int = 256) -> None:
        self._max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._plain: ModelHttp | None = None
        self._plain_loop: asyncio.AbstractEventLoop | None = None
        self._no_tool_streaming: set[str] = set()
        """Endpoints that answered an empty event stream when tools were offered: asked without streaming."""

    def http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            connector = aiohttp.TCPConnector(limit=self._max_connections, limit_per_host=0, ttl_dns_cache=30)
            self._session = aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=None), json_serialize=_dumps
            )
        return self._session

    def plain_http(self) -> ModelHttp:
        """The client of the calls that are not streamed, to ``http://`` endpoints (:mod:`.modelhttp`)."""
        loop = asyncio.get_running_loop()
        if self._plain is None or self._plain_loop is not loop:
            self._plain, self._plain_loop = ModelHttp(self._max_connections), loop
        return self._plain

    async def aclose(self) -> None:
        if self._plain is not None:
            self._plain.close()
            self._plain = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def complete(
        self, base_url: str, body: dict[str, Any], *, what: str, on_delta: OnDelta | None = None, step: int = 0
    ) -> Completion:
        """One chat completion at ``base_url`` (``what`` names the endpoint in errors). With ``on_delta`` the
        completion is streamed and each piece of text is handed to it as it comes. Traced as a ``chat`` span
        (:mod:`~dockyard_api.runtime.tracing`) when tracing is on; ``step``: the agent's step it is (1, 2, ...),
        0 for a call outside an agent's tool loop (routing, a guard model)."""
        span = tracing.chat(base_url, body, step)  # a child of the current span, not current itself
        try:
            completion = await self._complete(base_url, body, what=what, on_delta=on_delta, span=span)
        except BaseException as exc:
            tracing.chat_failed(span, exc.code if isinstance(exc, DockyardError) else None)
            raise
        if span is not None:
            calls = [c.name for c in completion.tool_calls]
            tracing.chat_done(span, completion.tokens_in, completion.tokens_out, completion.finish_reason, calls)
        return completion

    async def _complete(
        self, base_url: str, body: dict[str, Any], *, what: str, on_delta: OnDelta | None, span: Span | None
    ) -> Completion:
        if on_delta is None:
            return await self._once(base_url, body, what=what, on_delta=None, span=span)
        if not (body.get("tools") and base_url in self._no_tool_streaming):
            try:
                return await self._once(base_url, body, what=what, on_delta=on_delta, span=span)
            except _EmptyStreamError:
                if not body.get("tools"):
                    raise
                self._no_tool_streaming.add(base_url)
        # an engine that cannot stream when tools are offered: the same request, not streamed (the text,
        # if any, is handed out at once). Its server may drop the connections of the failed stream, so a
        # connection it closed before answering is tried again (nothing was answered on it).
        for attempt in range(3):
            try:
                completion = await self._once(base_url, body, what=what, on_delta=None, span=span)
                break
            except ModelBadResponseError as exc:
                dropped = isinstance(exc.__cause__, _DROPPED)
                if not dropped or attempt == 2:
                    raise
        if completion.content:
            await on_delta(completion.content)
        return completion

    async def _once(
        self, base_url: str, body: dict[str, Any], *, what: str, on_delta: OnDelta | None, span: Span | None
    ) -> Completion:
        url = _completions_url(base_url)
        payload = body
        if on_delta is not None:
            payload = {**body, "stream": True, "stream_options": {"include_usage": True}}
        headers = {"Content-Type": "application/json"}
        tracing.inject(headers, span)  # the engine's own spans (vLLM) join the turn's trace, under the model call's
        if on_delta is None and plain(url):
            raw = await self._plain_once(url, orjson.dumps(payload), headers, base_url, what)
            return parse_completion(raw, what)
        try:
            async with self.http().post(url, data=orjson.dumps(payload), headers=headers) as response:
                if response.status >= 300:
                    raise _error_status(what, response.status, await response.content.read(ERROR_BYTES))
                if on_delta is not None and response.content_type == "text/event-stream":
                    return await _read_stream(response, what, on_delta)
                raw = await _read_capped(response, what)
        except aiohttp.ClientConnectorError as exc:
            raise _unreachable(what, base_url, _reason(exc)) from exc
        except (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError) as exc:
            if on_delta is not None and body.get("tools"):  # dropped before the first chunk (see _EmptyStreamError)
                raise _EmptyStreamError(
                    f"the model endpoint of {what} dropped its event stream: {_reason(exc)}"
                ) from exc
            raise _mid_answer(what, base_url, _reason(exc)) from exc
        except (aiohttp.ClientError, socket.gaierror) as exc:
            raise _mid_answer(what, base_url, _reason(exc)) from exc
        completion = parse_completion(raw, what)
        if on_delta is not None and completion.content:
            await on_delta(completion.content)  # an engine that ignored "stream": the text arrives at once
        return completion

    async def _plain_once(
        self, url: yarl.URL, payload: bytes, headers: dict[str, str], base_url: str, what: str
    ) -> bytes:
        """The body of a completion that is not streamed, through :meth:`plain_http`: the same errors as
        aiohttp's way in :meth:`_once`."""
        try:
            answer = await self.plain_http().post_json(url, payload, headers, MAX_ANSWER_BYTES, ERROR_BYTES)
        except ConnectFailed as exc:
            raise _unreachable(what, base_url, str(exc)) from exc
        except Disconnected as exc:
            raise _mid_answer(what, base_url, str(exc)) from exc
        if answer.status >= 300:
            raise _error_status(what, answer.status, answer.body)
        if answer.cut:
            raise _too_large(what)
        return answer.body


@functools.lru_cache(maxsize=256)
def _completions_url(base_url: str) -> yarl.URL:
    """The chat completions URL of a model endpoint, parsed once (yarl's parsing cost a turn about 30 µs)."""
    return yarl.URL(f"{base_url}/v1/chat/completions")


def _dumps(obj: Any) -> str:
    return orjson.dumps(obj).decode()


def _reason(exc: BaseException) -> str:
    text = str(exc)
    return f"{exc.__class__.__name__}: {text}" if text else exc.__class__.__name__


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


async def _read_capped(response: aiohttp.ClientResponse, what: str) -> bytes:
    raw = await response.content.read(MAX_ANSWER_BYTES + 1)
    chunks = [raw]
    size = len(raw)
    while raw and size <= MAX_ANSWER_BYTES:
        raw = await response.content.read(MAX_ANSWER_BYTES + 1 - size)
        chunks.append(raw)
        size += len(raw)
    if size > MAX_ANSWER_BYTES:
        raise _too_large(what)
    return b"".join(chunks)


def _unreachable(what: str, base_url: str, reason: str) -> ModelUnavailableError:
    return ModelUnavailableError(
        f"the model endpoint of {what} cannot be reached ({base_url}): {reason}", {"endpoint": base_url}
    )


def _mid_answer(what: str, base_url: str, reason: str) -> ModelBadResponseError:
    return ModelBadResponseError(f"the model endpoint of {what} failed mid-answer: {reason}", {"endpoint": base_url})


def _error_status(what: str, status: int, start: bytes) -> ModelBadResponseError:
    """An error status, quoting the start of its body (at most :data:`ERROR_BYTES` of it)."""
    text = start[:ERROR_BYTES].decode("utf-8", "replace")
    message = f"the model endpoint of {what} answered HTTP {status}: {_short(text)}"
    return ModelBadResponseError(message, {"status": status})


def _too_large(what: str) -> ModelBadResponseError:
    return ModelBadResponseError(f"the model endpoint of {what} sent more than {MAX_ANSWER_BYTES} bytes")


def _garbage(what: str, why: str) -> ModelBadResponseError:
    return ModelBadResponseError(f"the model endpoint of {what} did not answer a chat completion: {why}")


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def _usage(body: dict[str, Any]) -> tuple[int, int]:
    usage = body.get("usage")
    if not isinstance(usage, dict):
        return 0, 0
    return _int(usage.get("prompt_tokens")), _int(usage.get("completion_tokens"))


def parse_completion(raw: bytes, what: str) -> Completion:
    """A non-streamed chat completion, strictly: anything else is a 502 that says what was wrong."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise _garbage(what, f"not JSON ({_short(raw[:200].decode('utf-8', 'replace'))!r})") from None
    if not isinstance(body, dict):
        raise _garbage(what, "the body is not a JSON object")
    if isinstance(body.get("error"), dict | str):
        error = body["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise ModelBadResponseError(f"the model endpoint of {what} answered an error: {_short(str(message))}")
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise _garbage(what, "no choices")
    message = choices[0].get("message")
    if not isinstance(message, dict):
        raise _garbage(what, "choices[0] has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise _garbage(what, "the message's content is not text")
    calls = []
    for i, call in enumerate(message.get("tool_calls") or []):
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or not isinstance(function.get("name"), str):
            raise _garbage(what, f"tool call {i} has no function name")
        arguments = function.get("arguments")
        if isinstance(arguments, dict):  # some engines send an object instead of its JSON text
            arguments = orjson.dumps(arguments).decode()
        call_id = call.get("id") if isinstance(call.get("id"), str) and call.get("id") else f"call_{i}"
        calls.append(ToolCall(call_id, function["name"], arguments if isinstance(arguments, str) else ""))
    tokens_in, tokens_out = _usage(body)
    finish = choices[0].get("finish_reason")
    return Completion(content or "", calls, tokens_in, tokens_out, finish if isinstance(finish, str) else None)


async def _read_stream(response: aiohttp.ClientResponse, what: str, on_delta: OnDelta) -> Completion:
    acc = _Accumulator()
    size = 0
    buffer = b""
    try:
        async for piece in response.content.iter_any():
            size += len(piece)
            if size > MAX_ANSWER_BYTES:
                raise ModelBadResponseError(f"the model endpoint of {what} streamed more than {MAX_ANSWER_BYTES} bytes")
            buffer += piece
            *lines, buffer = buffer.split(b"\n")
            for line in lines:
                await _stream_line(line.strip(), acc, what, on_delta)
                if acc.done:
                    break
            if acc.done:
                break
    except aiohttp.ClientError as exc:
        if acc.chunks == 0:  # the engine closed the connection before its first chunk
            raise _EmptyStreamError(
                f"the model endpoint of {what} closed its event stream empty: {_reason(exc)}"
            ) from exc
        raise
    if not acc.done:
        await _stream_line(buffer.strip(), acc, what, on_delta)
    if not acc.done and acc.finish_reason is None:
        if acc.chunks == 0:
            response.close()  # its server may drop this connection: never reuse it
            raise _EmptyStreamError(f"the model endpoint of {what} answered an empty event stream")
        raise ModelBadResponseError(f"the model endpoint of {what} ended its stream before the answer was complete")
    calls = []
    for index in sorted(acc.calls):
        call = acc.calls[index]
        if not call.get("name"):
            raise _garbage(what, f"streamed tool call {index} has no function name")
        calls.append(ToolCall(call.get("id") or f"call_{index}", call["name"], "".join(call["arguments"])))
    return Completion("".join(acc.content), calls, acc.tokens_in, acc.tokens_out, acc.finish_reason)


async def _stream_line(line: bytes, acc: _Accumulator, what: str, on_delta: OnDelta) -> None:
    if not line or line.startswith(b":") or not line.startswith(b"data:"):
        return  # SSE comments, event names, keep-alives
    data = line[5:].strip()
    if data == b"[DONE]":
        acc.done = True
        return
    try:
        chunk = orjson.loads(data)
    except orjson.JSONDecodeError:
        raise _garbage(
            what, f"a stream chunk is not JSON ({_short(data[:200].decode('utf-8', 'replace'))!r})"
        ) from None
    if not isinstance(chunk, dict):
        raise _garbage(what, "a stream chunk is not a JSON object")
    acc.chunks += 1
    if isinstance(chunk.get("error"), dict | str):
        error = chunk["error"]
        message = error.get("message", error) if isinstance(error, dict) else error
        raise ModelBadResponseError(f"the model endpoint of {what} streamed an error: {_short(str(message))}")
    tokens_in, tokens_out = _usage(chunk)
    if tokens_in or tokens_out:
        acc.tokens_in, acc.tokens_out = tokens_in, tokens_out
    for choice in chunk.get("choices") or []:
        if not isinstance(choice, dict):
            continue
        if isinstance(choice.get("finish_reason"), str):
            acc.finish_reason = choice["finish_reason"]
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            continue
        text = delta.get("content")
        if isinstance(text, str) and text:
            acc.content.append(text)
            await on_delta(text)
        for call in delta.get("tool_calls") or []:
            if not isinstance(call, dict):
                continue
            index: int = call["index"] if isinstance(call.get("index"), int) else len(acc.calls)
            slot = acc.calls.setdefault(index, {"id": "", "name": "", "arguments": []})
            if isinstance(call.get("id"), str) and call["id"]:
                slot["id"] = call["id"]
            function = call.get("function") or {}
            if isinstance(function.get("name"), str) and function["name"]:
                slot["name"] = function["name"]
            if isinstance(function.get("arguments"), str):
                slot["arguments"].append(function["arguments"])
