"""The loaded model and the request handling around it (:class:`Server`, one per process): the checks of
a request against the model and the server's limits, the sampling settings, the sequences of a request
and running them on the engine; the prompts of both endpoints; :func:`load_server`."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import Request

from dockyard_ct2.arrivals import arrived
from dockyard_ct2.bodies import ChatRequest, GenerationBody
from dockyard_ct2.config import ServerConfig
from dockyard_ct2.engine import Engine, QueueFull
from dockyard_ct2.errors import ApiError
from dockyard_ct2.sequence import Sampling, Sequence
from dockyard_ct2.tokenizer import ModelTokenizer

log = logging.getLogger("dockyard_ct2.server")


class Server:
    """The loaded model and the request handling around it (one per process)."""

    def __init__(self, config: ServerConfig, tokenizer: ModelTokenizer, engine: Engine) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.engine = engine
        self.created = int(time.time())
        self.requests: dict[str, int] = {}

    # --- validation ---------------------------------------------------------------------------

    def check_model(self, body: GenerationBody) -> None:
        if body.model and body.model != self.config.served_model_name:
            raise ApiError(
                404,
                "model_not_found",
                f"the model {body.model!r} does not exist; this server serves {self.config.served_model_name!r}",
                param="model",
            )

    def check_unsupported(self, body: GenerationBody) -> None:
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

    def sampling(self, body: GenerationBody) -> Sampling:
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
        body: GenerationBody,
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
            await self.engine.submit(seqs, arrived=arrived(request))
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


def chat_messages(body: ChatRequest) -> list[dict[str, Any]]:
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


def completion_prompts(s: Server, prompt: str | list[str] | list[int]) -> list[list[int]]:
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


def finish_reason(seq: Sequence) -> str:
    return "length" if seq.finish_reason == "length" else "stop"


def raise_engine_error(seqs: list[Sequence]) -> None:
    for seq in seqs:
        if seq.finish_reason == "error":
            raise ApiError(500, "engine_error", seq.error or "generation failed")


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
