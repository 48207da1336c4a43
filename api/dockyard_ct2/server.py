"""The OpenAI-compatible HTTP API of the CTranslate2 server.

``POST /v1/completions``, ``POST /v1/chat/completions`` (both with ``stream``), ``GET /v1/models``,
``GET /health`` (200 once the model is loaded: the server listens only after loading it) and
``GET /metrics`` (Prometheus text). Errors are JSON ``{"error": {"code", "message", "details",
"type", "param"}}``: Dockyard's shape plus the fields OpenAI clients read.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, field_validator
from starlette.exceptions import HTTPException as StarletteHTTPException

from dockyard_ct2.config import ServerConfig
from dockyard_ct2.engine import Arrivals, Engine, QueueFull, Sampling, Sequence
from dockyard_ct2.tokenizer import ChatTemplateError, ModelTokenizer

log = logging.getLogger("dockyard_ct2.server")

MAX_STOP = 16


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str, *, param: str | None = None, details: Any = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.details = details


def error_body(code: str, message: str, *, param: str | None = None, details: Any = None) -> dict[str, Any]:
    kind = "invalid_request_error" if code in ("invalid_request", "context_length_exceeded") else code
    return {"error": {"code": code, "message": message, "details": details, "type": kind, "param": param}}


# --- request bodies -----------------------------------------------------------------------------------


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class _Common(BaseModel):
    """Fields both endpoints share. Unknown fields are ignored, as OpenAI clients send many."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    min_tokens: int = Field(default=0, ge=0)
    n: int = Field(default=1, ge=1)
    stop: str | list[str] | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: Any = None
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    seed: int | None = None
    user: str | None = None

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and len(value) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop sequences")
        return value

    def stops(self, defaults: tuple[str, ...]) -> list[str]:
        if self.stop is None:
            return list(defaults)
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)


class CompletionRequest(_Common):
    prompt: str | list[str] | list[int]
    echo: bool = False


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None
    name: str | None = None


class ChatRequest(_Common):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    tools: list[dict[str, Any]] | None = None


# --- the app ------------------------------------------------------------------------------------------


class Server:
    """The loaded model and the request handling around it (one per process)."""

    def __init__(self, config: ServerConfig, tokenizer: ModelTokenizer, engine: Engine) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.engine = engine
        self.created = int(time.time())
        self.requests: dict[str, int] = {}

    # --- validation ---------------------------------------------------------------------------

    def check_model(self, body: _Common) -> None:
        if body.model and body.model != self.config.served_model_name:
            raise ApiError(
                404,
                "model_not_found",
                f"the model {body.model!r} does not exist; this server serves {self.config.served_model_name!r}",
                param="model",
            )

    def check_unsupported(self, body: _Common) -> None:
        if body.logprobs not in (None, False, 0):
            raise ApiError(400, "invalid_request", "logprobs are not supported by this server", param="logprobs")
        if body.presence_penalty or body.frequency_penalty:
            raise ApiError(
                400,
                "invalid_request",
                "presence_penalty and frequency_penalty are not supported by this server",
                param="presence_penalty" if body.presence_penalty else "frequency_penalty",
            )
        if body.n > self.engine.max_batch_size:
            raise ApiError(
                400,
                "invalid_request",
                f"n={body.n} is more than the server's batch size ({self.engine.max_batch_size})",
                param="n",
            )

    def sampling(self, body: _Common) -> Sampling:
        d = self.config.sampling
        temperature = d.temperature if body.temperature is None else body.temperature
        top_p = d.top_p if body.top_p is None else body.top_p
        top_k = d.top_k if body.top_k is None else body.top_k
        return Sampling.of(temperature, top_p, top_k, body.min_tokens)

    def max_tokens(self, requested: int | None, prompt_len: int, default: int | None, min_tokens: int) -> int:
        limit = self.config.max_model_len
        room = limit - prompt_len
        if room < 1:
            raise ApiError(
                400,
                "context_length_exceeded",
                f"the prompt has {prompt_len} tokens; this model's maximum context length is {limit} tokens",
                param="messages",
            )
        if requested is not None:
            if requested > room:
                raise ApiError(
                    400,
                    "context_length_exceeded",
                    f"this model's maximum context length is {limit} tokens; the prompt has {prompt_len} tokens "
                    f"and max_tokens asks for {requested}",
                    param="max_tokens",
                )
            chosen = requested
        else:
            chosen = min(default, room) if default is not None else room
        if min_tokens > chosen:
            raise ApiError(400, "invalid_request", f"min_tokens {min_tokens} exceeds max_tokens {chosen}")
        return chosen

    # --- generation ---------------------------------------------------------------------------

    def sequences(
        self,
        prompts: list[list[int]],
        body: _Common,
        max_tokens: list[int],
        on_delta: Callable[[int], Callable[[str], None]] | None,
    ) -> list[Sequence]:
        loop = asyncio.get_running_loop()
        sampling = self.sampling(body)
        stop = body.stops(self.config.sampling.stop)
        out: list[Sequence] = []
        for p, ids in enumerate(prompts):
            for _ in range(body.n):
                index = len(out)
                out.append(
                    Sequence(
                        prompt_ids=ids,
                        max_tokens=max_tokens[p],
                        sampling=sampling,
                        stop=stop,
                        decoder=self.tokenizer.decoder(),
                        end_ids=self.engine.end_ids,
                        loop=loop,
                        on_delta=on_delta(index) if on_delta else None,
                    )
                )
        return out

    async def run(self, seqs: list[Sequence], request: Request) -> None:
        try:
            await self.engine.submit(seqs, arrived=_arrived(request))
        except QueueFull as exc:
            raise ApiError(503, "server_busy", f"the server is busy: {exc}") from exc
        try:
            await asyncio.gather(*(s.done for s in seqs))
        except asyncio.CancelledError as exc:
            # uvicorn cancels requests still running when its graceful shutdown period ends
            for s in seqs:
                s.cancelled = True
            raise ApiError(503, "shutting_down", "the server is shutting down") from exc

    @staticmethod
    def usage(prompts: list[list[int]], seqs: list[Sequence]) -> dict[str, int]:
        prompt = sum(len(p) for p in prompts)
        completion = sum(s.completion_tokens for s in seqs)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def count(self, endpoint: str) -> None:
        self.requests[endpoint] = self.requests.get(endpoint, 0) + 1


def _chat_messages(body: ChatRequest) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, m in enumerate(body.messages):
        message = m.model_dump(exclude_none=True)
        if isinstance(m.content, list):
            texts: list[str] = []
            for part in m.content:
                if part.type != "text" or part.text is None:
                    raise ApiError(
                        400,
                        "invalid_request",
                        f"messages[{i}].content: only text parts are supported, not {part.type!r}",
                        param=f"messages[{i}].content",
                    )
                texts.append(part.text)
            message["content"] = "".join(texts)
        elif m.content is None:
            message["content"] = ""
        out.append(message)
    return out


def _sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

GENERATION_PATHS = frozenset({"/v1/completions", "/v1/chat/completions"})
ARRIVAL_KEY = "dockyard_ct2_arrival"


class CountArrivals:
    """ASGI middleware: counts the generation requests that the server is receiving but whose
    sequences are not queued yet (body being read, validated, tokenized). The batcher waits for them
    (within its window) instead of starting a batch without them: requests that clients sent together
    share one batch even after a quiet spell, and a lone request (none arriving) starts at once."""

    def __init__(self, app: Any, arrivals: Arrivals) -> None:
        self.app = app
        self.arrivals = arrivals

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http" or scope["method"] != "POST" or scope["path"] not in GENERATION_PATHS:
            await self.app(scope, receive, send)
            return
        state = scope.setdefault("state", {})
        state[ARRIVAL_KEY] = True
        self.arrivals.count += 1
        try:
            await self.app(scope, receive, send)
        finally:
            if state.pop(ARRIVAL_KEY, False):  # refused (or failed) before its sequences were queued
                self.arrivals.count -= 1


def _arrived(request: Request) -> bool:
    """The request's sequences are being queued: it no longer counts as arriving (True once)."""
    return bool(request.scope.get("state", {}).pop(ARRIVAL_KEY, False))


def create_app(config: ServerConfig, load: Callable[[ServerConfig], Server] | None = None) -> FastAPI:
    """The FastAPI app; the model is loaded in the lifespan, before the server accepts connections."""

    arrivals = Arrivals()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        server = (load or load_server)(config)
        server.engine.arrivals = arrivals
        server.engine.start()
        app.state.server = server
        log.info(
            "serving %s from %s on %s (compute type %s, requested %s), max batch %d",
            config.served_model_name,
            config.model_dir,
            server.engine.device,
            server.engine.loaded_compute_type,
            config.compute_type,
            config.max_batch_size,
        )
        try:
            yield
        finally:
            await server.engine.stop()

    app = FastAPI(title="Dockyard CTranslate2 server", lifespan=lifespan)
    app.add_middleware(CountArrivals, arrivals=arrivals)

    def srv(request: Request) -> Server:
        server: Server = request.app.state.server
        return server

    @app.exception_handler(ApiError)
    async def _api_error(_: Request, exc: ApiError) -> JSONResponse:
        headers = {"Retry-After": "1"} if exc.status == 503 else None
        return JSONResponse(
            error_body(exc.code, exc.message, param=exc.param, details=exc.details), exc.status, headers=headers
        )

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": [str(x) for x in e.get("loc", ())], "msg": str(e.get("msg", "")), "type": str(e.get("type", ""))}
            for e in exc.errors()
        ]
        first = errors[0] if errors else {"loc": [], "msg": "invalid request", "type": ""}
        if first["type"] == "json_invalid":
            return JSONResponse(error_body("invalid_request", "the body is not valid JSON", details=errors), 400)
        where = ".".join(x for x in first["loc"] if x != "body") or "body"
        message = f"{where}: {first['msg']}"
        return JSONResponse(error_body("invalid_request", message, param=where, details=errors), 400)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return JSONResponse(error_body(code, str(exc.detail)), exc.status_code, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unexpected error")
        return JSONResponse(error_body("internal_error", "internal server error"), 500)

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        s = srv(request)
        return {
            "status": "ok",
            "model": s.config.served_model_name,
            "device": s.engine.device,
            "compute_type": s.engine.loaded_compute_type,
            "max_batch_size": s.engine.max_batch_size,
        }

    @app.get("/v1/models")
    async def models(request: Request) -> dict[str, Any]:
        s = srv(request)
        return {
            "object": "list",
            "data": [
                {
                    "id": s.config.served_model_name,
                    "object": "model",
                    "created": s.created,
                    "owned_by": "dockyard",
                    "max_model_len": s.config.max_model_len,
                }
            ],
        }

    @app.get("/metrics")
    async def metrics(request: Request) -> PlainTextResponse:
        s = srv(request)
        e = s.engine
        name = s.config.served_model_name.replace("\\", "\\\\").replace('"', '\\"')
        lines = [
            "# HELP vllm:num_requests_running Sequences in a running batch (vLLM's name, read by the autoscaler).",
            "# TYPE vllm:num_requests_running gauge",
            f'vllm:num_requests_running{{model_name="{name}"}} {e.running}',
            "# HELP vllm:num_requests_waiting Sequences waiting for a batch.",
            "# TYPE vllm:num_requests_waiting gauge",
            f'vllm:num_requests_waiting{{model_name="{name}"}} {e.waiting}',
            "# HELP dockyard_ct2_generate_calls_total generate_batch calls.",
            "# TYPE dockyard_ct2_generate_calls_total counter",
            f"dockyard_ct2_generate_calls_total {e.stats.generate_calls}",
            "# HELP dockyard_ct2_batched_sequences_total Sequences run through generate_batch.",
            "# TYPE dockyard_ct2_batched_sequences_total counter",
            f"dockyard_ct2_batched_sequences_total {e.stats.batched_sequences}",
            "# HELP dockyard_ct2_largest_batch Largest batch so far.",
            "# TYPE dockyard_ct2_largest_batch gauge",
            f"dockyard_ct2_largest_batch {e.stats.largest_batch}",
            "# HELP dockyard_ct2_prompt_tokens_total Prompt tokens of batched sequences.",
            "# TYPE dockyard_ct2_prompt_tokens_total counter",
            f"dockyard_ct2_prompt_tokens_total {e.stats.prompt_tokens}",
            "# HELP dockyard_ct2_generation_tokens_total Generated tokens.",
            "# TYPE dockyard_ct2_generation_tokens_total counter",
            f"dockyard_ct2_generation_tokens_total {e.stats.generated_tokens}",
            "# HELP dockyard_ct2_requests_total Requests by endpoint.",
            "# TYPE dockyard_ct2_requests_total counter",
            *(f'dockyard_ct2_requests_total{{endpoint="{k}"}} {v}' for k, v in sorted(s.requests.items())),
        ]
        return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest, request: Request) -> Response | dict[str, Any]:
        s = srv(request)
        s.count("completions")
        s.check_model(body)
        s.check_unsupported(body)
        if body.echo:
            raise ApiError(400, "invalid_request", "echo is not supported by this server", param="echo")
        prompts = _completion_prompts(s, body.prompt)
        if len(prompts) * body.n > s.engine.max_batch_size:
            raise ApiError(
                400,
                "invalid_request",
                f"{len(prompts)} prompts x n={body.n} is more than the server's batch size ({s.engine.max_batch_size})",
                param="prompt",
            )
        default = s.config.sampling.max_tokens or 16  # OpenAI's default for completions
        limits = [s.max_tokens(body.max_tokens, len(p), default, body.min_tokens) for p in prompts]
        rid = f"cmpl-{uuid.uuid4().hex}"
        head = {
            "id": rid,
            "object": "text_completion",
            "created": int(time.time()),
            "model": s.config.served_model_name,
        }
        if body.stream:

            def chunk(index: int, text: str, finish: str | None) -> dict[str, Any]:
                choice = {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
                return {**head, "choices": [choice]}

            return await _stream(s, request, prompts, body, limits, chunk, None)
        seqs = s.sequences(prompts, body, limits, None)
        await s.run(seqs, request)
        _raise_engine_error(seqs)
        choices = [
            {"index": i, "text": q.text, "logprobs": None, "finish_reason": _reason(q)} for i, q in enumerate(seqs)
        ]
        return {**head, "choices": choices, "usage": s.usage(prompts, seqs)}

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatRequest, request: Request) -> Response | dict[str, Any]:
        s = srv(request)
        s.count("chat_completions")
        s.check_model(body)
        s.check_unsupported(body)
        extra: dict[str, Any] = {}
        if body.tools:
            extra["tools"] = body.tools
        try:
            text = s.tokenizer.render_chat(_chat_messages(body), extra)
        except ChatTemplateError as exc:
            raise ApiError(400, "invalid_request", str(exc), param="messages") from exc
        ids = s.tokenizer.encode(text, add_special_tokens=False)
        if not ids:
            raise ApiError(400, "invalid_request", "the chat template rendered an empty prompt", param="messages")
        prompts = [ids]
        requested = body.max_completion_tokens or body.max_tokens
        limits = [s.max_tokens(requested, len(ids), s.config.sampling.max_tokens, body.min_tokens)]
        rid = f"chatcmpl-{uuid.uuid4().hex}"
        head = {
            "id": rid,
            "object": "chat.completion",
            "created": int(time.time()),
            "model": s.config.served_model_name,
        }
        if body.stream:
            chunk_head = {**head, "object": "chat.completion.chunk"}

            def chunk(index: int, text: str, finish: str | None) -> dict[str, Any]:
                delta = {"content": text} if text else {}
                choice = {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
                return {**chunk_head, "choices": [choice]}

            def opening(index: int) -> dict[str, Any]:
                choice = {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None}
                return {**chunk_head, "choices": [{**choice, "finish_reason": None}]}

            return await _stream(s, request, prompts, body, limits, chunk, opening)
        seqs = s.sequences(prompts, body, limits, None)
        await s.run(seqs, request)
        _raise_engine_error(seqs)
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": q.text},
                "logprobs": None,
                "finish_reason": _reason(q),
            }
            for i, q in enumerate(seqs)
        ]
        return {**head, "choices": choices, "usage": s.usage(prompts, seqs)}

    return app


def _completion_prompts(s: Server, prompt: str | list[str] | list[int]) -> list[list[int]]:
    if not prompt:
        raise ApiError(400, "invalid_request", "prompt is empty", param="prompt")
    if isinstance(prompt, str):
        texts = [prompt]
    elif all(isinstance(p, int) for p in prompt):
        ids = [int(p) for p in prompt]
        bad = [i for i in ids if not 0 <= i < len(s.engine.vocabulary)]
        if bad:
            raise ApiError(400, "invalid_request", f"token ids out of the vocabulary: {bad[:5]}", param="prompt")
        return [ids]
    else:
        texts = [str(p) for p in prompt]
    prompts = [s.tokenizer.encode(t, add_special_tokens=True) for t in texts]
    for i, ids in enumerate(prompts):
        if not ids:
            raise ApiError(400, "invalid_request", f"prompt {i} encodes to no tokens", param="prompt")
    return prompts


def _reason(seq: Sequence) -> str:
    return "length" if seq.finish_reason == "length" else "stop"


def _raise_engine_error(seqs: list[Sequence]) -> None:
    for seq in seqs:
        if seq.finish_reason == "error":
            raise ApiError(500, "engine_error", seq.error or "generation failed")


async def _stream(
    s: Server,
    request: Request,
    prompts: list[list[int]],
    body: _Common,
    limits: list[int],
    chunk: Callable[[int, str, str | None], dict[str, Any]],
    opening: Callable[[int], dict[str, Any]] | None,
) -> StreamingResponse:
    queue: asyncio.Queue[tuple[int, str | None]] = asyncio.Queue()

    def on_delta(index: int) -> Callable[[str], None]:
        return lambda text: queue.put_nowait((index, text))

    seqs = s.sequences(prompts, body, limits, on_delta)

    def on_done(index: int) -> Callable[[asyncio.Future[None]], None]:
        return lambda _: queue.put_nowait((index, None))

    for i, seq in enumerate(seqs):
        seq.done.add_done_callback(on_done(i))
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    try:
        await s.engine.submit(seqs, arrived=_arrived(request))  # before the 200: a full queue is a plain 503
    except QueueFull as exc:
        raise ApiError(503, "server_busy", f"the server is busy: {exc}") from exc

    async def events() -> AsyncIterator[bytes]:
        try:
            if opening is not None:
                for i in range(len(seqs)):
                    yield _sse(opening(i))
            left = len(seqs)
            while left:
                items = [await queue.get()]
                while not queue.empty():  # when the generator is ahead of the client, one chunk per run
                    items.append(queue.get_nowait())
                out: list[bytes] = []
                pending: tuple[int, str] | None = None
                for index, text in items:
                    if text is not None and pending is not None and pending[0] == index:
                        pending = (index, pending[1] + text)
                        continue
                    if pending is not None:
                        out.append(_sse(chunk(pending[0], pending[1], None)))
                        pending = None
                    if text is not None:
                        pending = (index, text)
                        continue
                    left -= 1
                    seq = seqs[index]
                    if seq.finish_reason == "error":
                        out.append(_sse(error_body("engine_error", seq.error or "generation failed")))
                    else:
                        out.append(_sse(chunk(index, "", _reason(seq))))
                if pending is not None:
                    out.append(_sse(chunk(pending[0], pending[1], None)))
                yield b"".join(out)
            if include_usage:
                usage_chunk = {k: v for k, v in chunk(0, "", None).items() if k != "choices"}
                yield _sse({**usage_chunk, "choices": [], "usage": s.usage(prompts, seqs)})
            yield _sse("[DONE]")
        finally:
            for seq in seqs:  # the client went away (or we are done): stop what still runs
                seq.cancelled = True

    return StreamingResponse(events(), media_type="text/event-stream", headers=SSE_HEADERS)


def load_server(config: ServerConfig) -> Server:
    tokenizer = ModelTokenizer(config.model_dir, config.chat_template)
    engine = Engine(
        config.model_dir,
        device=config.device,
        compute_type=config.compute_type,
        device_count=config.device_count,
        inter_threads=config.inter_threads,
        intra_threads=config.intra_threads,
        max_batch_size=config.max_batch_size,
        batch_wait=config.batch_wait_ms / 1000,
        max_queue=config.max_queue,
        end_ids=tokenizer.end_ids,
    )
    if len(engine.vocabulary) < tokenizer.vocab_size:
        log.warning(
            "tokenizer.json has %d tokens but the model's vocabulary %d", tokenizer.vocab_size, len(engine.vocabulary)
        )
    return Server(config, tokenizer, engine)


__all__ = ["ApiError", "Server", "create_app", "load_server"]
