"""One generated choice (:class:`Sequence`): its prompt, limits, the text so far, how it ended, and the
per-token work on the generator's thread that stops it (length, end token, stop sequences) and streams
its text to the event loop; and the per-batch sampling settings (:class:`Sampling`) sequences batch by."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from dockyard_ct2.tokenizer import IncrementalDecoder

FinishReason = Literal["stop", "length", "cancelled", "error"]

STREAM_INTERVAL_SECONDS = 0.02
"""Streamed text reaches the client at most this often per sequence (the first piece at once): one
wake-up of the event loop, one SSE chunk and one client read per 20 ms instead of per token, which on a
CPU-bound host takes time from the generator's threads."""


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
