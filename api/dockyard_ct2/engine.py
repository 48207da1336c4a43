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

One worker per model replica: ``inter_threads`` on the CPU, one replica per GPU with several GPUs. The
sequences it batches, with their per-token work, are :mod:`dockyard_ct2.sequence`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ctranslate2

from dockyard_ct2.sequence import Sampling, Sequence
from dockyard_ct2.tokenizer import ModelDirError

log = logging.getLogger("dockyard_ct2.engine")

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
