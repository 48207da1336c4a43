"""Streamed answers of the CTranslate2 server: the sequences' text deltas as server-sent events, merged per
sequence while the client reads slower than the generator writes, ending with ``[DONE]``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from dockyard_ct2.arrivals import arrived
from dockyard_ct2.bodies import GenerationBody
from dockyard_ct2.engine import QueueFull
from dockyard_ct2.errors import ApiError, error_body
from dockyard_ct2.service import Server, finish_reason


def _sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"data: {text}\n\n".encode()


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


async def stream(
    s: Server,
    request: Request,
    prompts: list[list[int]],
    body: GenerationBody,
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
        await s.engine.submit(seqs, arrived=arrived(request))  # before the 200: a full queue is a plain 503
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
                        out.append(_sse(chunk(index, "", finish_reason(seq))))
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
