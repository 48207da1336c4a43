"""The OpenAI-compatible HTTP API of the CTranslate2 server.

``POST /v1/completions``, ``POST /v1/chat/completions`` (both with ``stream``), ``GET /v1/models``,
``GET /health`` (200 once the model is loaded: the server listens only after loading it) and
``GET /metrics`` (Prometheus text). Errors are JSON ``{"error": {"code", "message", "details",
"type", "param"}}``: Dockyard's shape plus the fields OpenAI clients read.

This module assembles the app (lifespan, middleware, routes); the request handling is in
:mod:`dockyard_ct2.service`, the bodies in :mod:`dockyard_ct2.bodies`, streamed answers in
:mod:`dockyard_ct2.streaming` and the error shape in :mod:`dockyard_ct2.errors`.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response

from dockyard_ct2.arrivals import CountArrivals
from dockyard_ct2.bodies import ChatRequest, CompletionRequest
from dockyard_ct2.config import ServerConfig
from dockyard_ct2.engine import Arrivals
from dockyard_ct2.errors import ApiError, install_error_handlers
from dockyard_ct2.service import (
    Server,
    chat_messages,
    completion_prompts,
    finish_reason,
    load_server,
    raise_engine_error,
)
from dockyard_ct2.streaming import stream
from dockyard_ct2.tokenizer import ChatTemplateError

log = logging.getLogger("dockyard_ct2.server")


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

    install_error_handlers(app)

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
        prompts = completion_prompts(s, body.prompt)
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

            return await stream(s, request, prompts, body, limits, chunk, None)
        seqs = s.sequences(prompts, body, limits, None)
        await s.run(seqs, request)
        raise_engine_error(seqs)
        choices = [
            {"index": i, "text": q.text, "logprobs": None, "finish_reason": finish_reason(q)}
            for i, q in enumerate(seqs)
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
            text = s.tokenizer.render_chat(chat_messages(body), extra)
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

            return await stream(s, request, prompts, body, limits, chunk, opening)
        seqs = s.sequences(prompts, body, limits, None)
        await s.run(seqs, request)
        raise_engine_error(seqs)
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": q.text},
                "logprobs": None,
                "finish_reason": finish_reason(q),
            }
            for i, q in enumerate(seqs)
        ]
        return {**head, "choices": choices, "usage": s.usage(prompts, seqs)}

    return app


__all__ = ["create_app"]
