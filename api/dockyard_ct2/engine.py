"""The CTranslate2 generator and the batcher that feeds it.

Batching is *windowed*, and the window adapts to the load: a CTranslate2 batch cannot take new
sequences once it runs, so each worker takes the oldest waiting sequence and waits for others that
share its sampling settings, up to ``max_batch_size`` of them in one ``Generator.generate_batch`` call,
but only as many as the recent load says will come (:meth:`Engine.expected`: the most sequences in the
server at once during the current and the previous batch, per replica), and at most ``batch_wait``
(counted from that sequence's arrival or the end of the previous batch, whichever is later). A lone
client therefore never waits for a window (its request runs at once); concurrent clients are batched
from their second round on. Sequences that arrive while a batch runs form the next one. The
sampling settings (temperature, top-k, top-p, min_tokens) are per batch in CTranslate2, so a batch
only mixes sequences whose settings are equal; ``max_tokens`` and ``stop`` are per sequence: a
per-token callback stops each sequence on its own (and streams its text), so a short request in a
batch of long ones finishes early.

One worker per model replica: ``inter_threads`` on the CPU, one replica per GPU with several GPUs.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import ctranslate2

from dockyard_ct2.tokenizer import IncrementalDecoder, ModelDirError

log = logging.getLogger("dockyard_ct2.engine")

FinishReason = Literal["stop", "length", "cancelled", "error"]

STREAM_INTERVAL_SECONDS = 0.02
"""Streamed text reaches the client at most this often per sequence (the first piece at once): one
wake-up of the event loop, one SSE chunk and one client read per 20 ms instead of per token, which on a
CPU-bound host takes time from the generator's threads."""

BURST_GRACE_SECONDS = 0.005
"""After an idle spell the first request waits this long (at most the window) for others sent with it."""

LOAD_MEMORY_SECONDS = 1.0
"""After this long with nothing running, the batcher forgets the load it saw (a lone request after a
busy spell does not wait for clients that are gone)."""

# The compute type each requested type falls back to when the device cannot run it (first supported wins).
FALLBACKS: dict[str, tuple[str, ...]] = {
    "int8_float16": ("int8_float16", "int8_bfloat16", "int8_float32", "int8", "float32"),
    "int8_bfloat16": ("int8_bfloat16", "int8_float16", "int8_float32", "int8", "float32"),
    "int8_float32": ("int8_float32", "int8", "float32"),
    "int8": ("int8", "int8_float32", "float32"),
    "int16": ("int16", "float32"),
    "float16": ("float16", "bfloat16", "float32"),
    "bfloat16": ("bfloat16", "float16", "float32"),
    "float32": ("float32",),
}


def resolve_device(requested: str) -> str:
    """``auto`` is ``cuda`` when CTranslate2 sees a GPU, else ``cpu``; ``cuda`` without a GPU is an error."""
    gpus = ctranslate2.get_cuda_device_count()
    if requested == "auto":
        return "cuda" if gpus > 0 else "cpu"
    if requested == "cuda" and gpus == 0:
        raise RuntimeError("--device=cuda but CTranslate2 sees no CUDA device (use --device=auto or cpu)")
    return requested


def resolve_compute_type(requested: str, device: str) -> str:
    """The compute type to load with: ``requested`` when the device supports it, else its closest
    supported fallback (``int8_float16`` on a CPU becomes ``int8_float32``). ``default``/``auto`` are
    CTranslate2's own choices and pass through."""
    if requested in ("default", "auto"):
        return requested
    supported = set(ctranslate2.get_supported_compute_types(device))
    for candidate in FALLBACKS.get(requested, (requested,)):
        if candidate in supported:
            return candidate
    raise RuntimeError(f"compute type {requested!r} cannot run on {device} (supported: {sorted(supported)})")


def load_vocabulary(model_dir: Path) -> list[str]:
    """The CTranslate2 model's vocabulary (token strings by id): vocabulary.json or vocabulary.txt."""
    as_json = model_dir / "vocabulary.json"
    if as_json.is_file():
        tokens = json.loads(as_json.read_text(encoding="utf-8"))
        if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
            raise ModelDirError("vocabulary.json is not a list of tokens")
        return tokens
    as_txt = model_dir / "vocabulary.txt"
    if as_txt.is_file():
        return as_txt.read_text(encoding="utf-8").split("\n")[:-1]
    raise ModelDirError(f"{model_dir} has no vocabulary.json or vocabulary.txt (is it a CTranslate2 model?)")


@dataclass(frozen=True)
class Sampling:
    """CTranslate2's per-batch sampling settings; sequences batch together only when equal."""

    topk: int
    topp: float
    temperature: float
    min_tokens: int = 0

    @classmethod
    def of(cls, temperature: float, top_p: float, top_k: int, min_tokens: int = 0) -> Sampling:
        if temperature == 0:  # greedy, whatever top_p and top_k say
            return cls(topk=1, topp=1.0, temperature=1.0, min_tokens=min_tokens)
        return cls(topk=max(top_k, 0), topp=top_p, temperature=temperature, min_tokens=min_tokens)


class Sequence:
    """One generated choice: its prompt, limits, the text so far and how it ended.

    The per-token work (:meth:`on_token`) runs on the generator's thread; results reach the event
    loop through ``call_soon_threadsafe`` only: text deltas when streaming, and the end once. Deltas
    go through an outbox with at most one wake-up of the loop pending, and at most one delivery per
    :data:`STREAM_INTERVAL_SECONDS`: the tokens of several steps reach the loop in one call.
    """

    def __init__(
        self,
        *,
        prompt_ids: list[int],
        max_tokens: int,
        sampling: Sampling,
        stop: list[str],
        decoder: IncrementalDecoder,
        end_ids: frozenset[int],
        loop: asyncio.AbstractEventLoop,
        on_delta: Callable[[str], None] | None = None,
    ) -> None:
        self.prompt_ids = prompt_ids
        self.max_tokens = max_tokens
        self.sampling = sampling
        self.stop = [s for s in stop if s]
        self._hold = max((len(s) for s in self.stop), default=1) - 1
        self._decoder = decoder
        self._end_ids = end_ids
        self._loop = loop
        self._on_delta = on_delta
        self._incremental = on_delta is not None or bool(self.stop)
        self.arrived = time.monotonic()
        self.ids: list[int] = []
        self.text = ""  # the text of `ids`, before any stop sequence was cut off
        self._sent = 0  # how much of `text` went out as deltas
        self.finish_reason: FinishReason | None = None
        self.error: str | None = None
        self.cancelled = False
        self.done: asyncio.Future[None] = loop.create_future()
        self._outbox: collections.deque[str] = collections.deque()
        self._flush_pending = False
        self._last_flush = float("-inf")

    # --- generator thread -----------------------------------------------------------------------

    def on_token(self, token_id: int, is_last: bool) -> bool:
        """Record one generated token; True stops this sequence.

        Text is decoded token by token only when someone needs it early (streaming, stop sequences);
        otherwise once, at the end: this runs on the generator's thread for every token of the batch."""
        if self.finish_reason is not None:
            return True
        if self.cancelled:
            self._finish("cancelled")
            return True
        if token_id in self._end_ids:
            self._end("stop")
            return True
        self.ids.append(token_id)
        if self._incremental:
            self.text += self._decoder.push(token_id)
            if self.stop and self._cut_at_stop():
                return True
        if len(self.ids) >= self.max_tokens or is_last:
            self._end("length")
            return True
        if self._on_delta is not None:
            self._emit(len(self.text) - self._held_back())
        return False

    def _end(self, reason: FinishReason) -> None:
        """The sequence ended by itself (end token, length): complete its text, then cut at a stop."""
        if self._incremental:
            self.text += self._decoder.flush()
        else:
            self.text = self._decoder.decode_all(self.ids)
        if self.stop and self._cut_at_stop():
            return
        self._finish(reason)

    def _cut_at_stop(self) -> bool:
        start = max(0, self._sent - self._hold)
        found = [i for s in self.stop if (i := self.text.find(s, start)) >= 0]
        if not found:
            return False
        self.text = self.text[: min(found)]
        self._finish("stop")
        return True

    def _held_back(self) -> int:
        """Characters at the end of the text that may begin a stop sequence, kept until they don't."""
        for k in range(min(self._hold, len(self.text) - self._sent), 0, -1):
            tail = self.text[-k:]
            if any(s.startswith(tail) for s in self.stop):
                return k
        return 0

    def _emit(self, upto: int) -> None:
        if self._on_delta is not None and upto > self._sent:
            self._outbox.append(self.text[self._sent : upto])
            if not self._flush_pending:
                self._flush_pending = True
                self._loop.call_soon_threadsafe(self._flush_soon)
        self._sent = max(self._sent, upto)

    def _flush_soon(self) -> None:
        """(event loop) Flush now, or when :data:`STREAM_INTERVAL_SECONDS` have passed since the last one."""
        wait = self._last_flush + STREAM_INTERVAL_SECONDS - self._loop.time()
        if wait > 0:
            self._loop.call_later(wait, self._flush)
        else:
            self._flush()

    def _flush(self) -> None:
        """(event loop) Hand what the outbox holds to ``on_delta``, as one piece of text."""
        self._flush_pending = False  # first: a delta appended from now on schedules another flush
        pieces = []
        while self._outbox:
            pieces.append(self._outbox.popleft())
        self._last_flush = self._loop.time()
        if pieces and self._on_delta is not None:
            self._on_delta("".join(pieces))

    def _finish(self, reason: FinishReason, error: str | None = None) -> None:
        if self.finish_reason is not None:
            return
        self.finish_reason = reason
        self.error = error
        if reason in ("stop", "length"):
            self._emit(len(self.text))
        self._loop.call_soon_threadsafe(self._resolve)

    def _resolve(self) -> None:
        self._flush()  # the last deltas before the end
        if not self.done.done():
            self.done.set_result(None)

    def end_after_generation(self, error: str | None = None) -> None:
        """Called once the batch returned: a sequence the callback did not finish ended here."""
        if self.finish_reason is not None:
            return
        if error is not None:
            self._finish("error", error)
        elif self.cancelled:
            self._finish("cancelled")
        else:
            self._end("length" if len(self.ids) >= self.max_tokens else "stop")

    @property
    def completion_tokens(self) -> int:
        return len(self.ids)


@dataclass
class Arrivals:
    """Requests the HTTP layer is receiving whose sequences are not queued yet (the server counts them)."""

    count: int = 0


class QueueFull(RuntimeError):
    """More sequences wait than the server accepts (``--max-queue``)."""


@dataclass
class Stats:
    generate_calls: int = 0
    batched_sequences: int = 0
    largest_batch: int = 0
    prompt_tokens: int = 0
    generated_tokens: int = 0
    requests: dict[str, int] = field(default_factory=dict)


class Engine:
    """A loaded CTranslate2 generator plus the batcher in front of it."""

    def __init__(
        self,
        model_dir: Path,
        *,
        device: str = "auto",
        compute_type: str = "default",
        device_count: int = 1,
        inter_threads: int = 1,
        intra_threads: int = 0,
        max_batch_size: int = 8,
        batch_wait: float = 0.05,
        max_queue: int = 1024,
        end_ids: frozenset[int] = frozenset(),
    ) -> None:
        self.device = resolve_device(device)
        self.requested_compute_type = compute_type
        self.compute_type = resolve_compute_type(compute_type, self.device)
        self.vocabulary = load_vocabulary(model_dir)
        if self.device == "cuda":
            available = ctranslate2.get_cuda_device_count()
            if device_count > available:
                raise RuntimeError(f"--device-count={device_count} but only {available} CUDA devices are visible")
            device_index: int | list[int] = list(range(device_count))
            self.replicas = device_count * inter_threads
        else:
            device_index = 0
            self.replicas = inter_threads
        self.generator = ctranslate2.Generator(
            str(model_dir),
            device=self.device,
            device_index=device_index,
            compute_type=self.compute_type,
            inter_threads=inter_threads,
            intra_threads=intra_threads,
        )
        self.loaded_compute_type = str(self.generator.compute_type)
        self.max_batch_size = max_batch_size
        self.batch_wait = batch_wait
        self.max_queue = max_queue
        self.end_ids = end_ids
        self.stats = Stats()
        self._pending: list[Sequence] = []
        self._running = 0
        self._last_end = 0.0
        self._peak = 0
        """The most sequences in the server (running + waiting) at once since the last batch started."""
        self._previous_peak = 0
        """The same during the batch before: clients that took part in it come back after it ends."""
        self.arrivals = Arrivals()
        """Requests being received (set by the server): the next batch waits for them."""
        self._inflight: set[Sequence] = set()
        self._cond: asyncio.Condition | None = None
        self._workers: list[asyncio.Task[None]] = []
        self._executor = ThreadPoolExecutor(max_workers=self.replicas, thread_name_prefix="ct2-generate")
        self._lock = threading.Lock()

    # --- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        self._cond = asyncio.Condition()
        self._workers = [asyncio.create_task(self._worker(), name=f"ct2-batcher-{i}") for i in range(self.replicas)]

    async def stop(self) -> None:
        for seq in self._inflight:  # running batches end at their next token
            seq.cancelled = True
        for task in self._workers:
            task.cancel()
        for task in self._workers:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._executor.shutdown(wait=True)
        for seq in self._pending:
            seq.end_after_generation("the server is shutting down")
        self._pending.clear()
        # Release the model before interpreter shutdown: CTranslate2 aborts when its thread pool is
        # torn down during finalisation.
        del self.generator

    # --- load -----------------------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        return len(self._pending)

    @property
    def running(self) -> int:
        return self._running

    def token_strings(self, ids: list[int]) -> list[str]:
        vocab = self.vocabulary
        return [vocab[i] for i in ids]

    async def submit(self, sequences: list[Sequence], *, arrived: bool = False) -> None:
        """Queue the sequences of one request (all or none). ``arrived``: the request was counted in
        :attr:`arrivals` until now."""
        assert self._cond is not None, "Engine.start() was not called"
        if arrived:
            self.arrivals.count -= 1
        async with self._cond:
            if len(self._pending) + len(sequences) > self.max_queue:
                raise QueueFull(f"{len(self._pending)} sequences are waiting (--max-queue={self.max_queue})")
            self._pending.extend(sequences)
            self._peak = max(self._peak, self._running + len(self._pending))
            self._cond.notify_all()

    # --- batcher --------------------------------------------------------------------------------

    def _matching(self, key: Sampling) -> int:
        return sum(1 for s in self._pending if s.sampling == key)

    def expected(self) -> int:
        """How many sequences the next batch waits for (within the window): the recent load per replica,
        counting the requests being received now, 1 to ``max_batch_size``. One client's next request, or
        a lone request after a quiet spell, starts at once; clients that ran together recently, and
        requests that arrive together, are waited for."""
        now = self._running + len(self._pending) + self.arrivals.count
        recent = max(self._peak, self._previous_peak, now, 1)
        return min(self.max_batch_size, -(-recent // self.replicas))

    async def _worker(self) -> None:
        assert self._cond is not None
        loop = asyncio.get_running_loop()
        while True:
            async with self._cond:
                await self._cond.wait_for(lambda: bool(self._pending))
                first = self._pending[0]
                key = first.sampling
                grace = loop.time()
                if not self._running and first.arrived - self._last_end > LOAD_MEMORY_SECONDS:
                    # the server sat idle: the load it saw before is gone, only what waits now counts; the
                    # requests of a burst reach it over a few milliseconds, so the first waits that long
                    self._previous_peak = 0
                    self._peak = len(self._pending)
                    grace = first.arrived + min(self.batch_wait, BURST_GRACE_SECONDS)
                # The window opens when the oldest sequence arrived or the last batch ended, whichever is
                # later: the clients of a batch that just ended send their next requests now, and waiting
                # for them keeps two half batches from alternating for ever.
                opened = max(first.arrived, self._last_end)
                deadline = loop.time() + max(0.0, self.batch_wait - (time.monotonic() - opened))
                while (matching := self._matching(key)) < self.max_batch_size:
                    short = matching < self.expected()
                    if not short and loop.time() >= grace:
                        break
                    remaining = (deadline if short else min(grace, deadline)) - loop.time()
                    if remaining <= 0:
                        break
                    try:
                        await asyncio.wait_for(self._cond.wait(), remaining)
                    except TimeoutError:
                        break
                batch: list[Sequence] = []
                rest: list[Sequence] = []
                for seq in self._pending:
                    if seq.cancelled:
                        seq.end_after_generation()
                    elif seq.sampling == key and len(batch) < self.max_batch_size:
                        batch.append(seq)
                    else:
                        rest.append(seq)
                self._pending = rest
                if batch:
                    self._previous_peak = self._peak
                    self._peak = self._running + len(batch) + len(rest)
            if not batch:
                continue
            self._running += len(batch)
            self._inflight.update(batch)
            try:
                await loop.run_in_executor(self._executor, self._generate, batch, key)
            finally:
                self._running -= len(batch)
                self._inflight.difference_update(batch)
                self._last_end = time.monotonic()

    def _generate(self, batch: list[Sequence], key: Sampling) -> None:
        """One generate_batch call (on an executor thread)."""
        with self._lock:
            self.stats.generate_calls += 1
            self.stats.batched_sequences += len(batch)
            self.stats.largest_batch = max(self.stats.largest_batch, len(batch))
            self.stats.prompt_tokens += sum(len(s.prompt_ids) for s in batch)

        def on_step(step: Any) -> bool:
            return batch[int(step.batch_id)].on_token(int(step.token_id), bool(step.is_last))

        error: str | None = None
        try:
            self.generator.generate_batch(
                [self.token_strings(s.prompt_ids) for s in batch],
                max_length=max(s.max_tokens for s in batch),
                min_length=key.min_tokens,
                sampling_topk=key.topk,
                sampling_topp=key.topp,
                sampling_temperature=key.temperature,
                end_token=sorted(self.end_ids) if self.end_ids else None,
                include_prompt_in_result=False,
                callback=on_step,
            )
        except Exception as exc:  # an engine failure ends these sequences, not the server
            log.exception("generate_batch failed")
            error = f"generation failed: {exc}"
        for seq in batch:
            seq.end_after_generation(error)
        with self._lock:
            self.stats.generated_tokens += sum(s.completion_tokens for s in batch)
