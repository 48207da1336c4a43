"""Canary by session and the figures of each version (docs/promotion.md, "Canary by session").

- The split: a NEW session starts on the canary when its id's hash falls under the canary's weight
  (:func:`on_canary`: BLAKE2b of the session id, 10,000 buckets), so every facade replica decides the same
  for the same id, and the conversation store pins the session to the version it started on (every later
  turn runs that version, whatever the split says by then).
- The figures: each finished turn (its version, duration, outcome, tokens) goes to the store's
  :class:`~dockyard_api.store.outcomes.OutcomeRecorder` (written in batches, off the request path) and to the
  per-version metrics; a sample of live turns (``spec.slo.evaluationSampleRate``, chosen by the message id's
  hash) is scored by the ``judge`` plugged in (the facade plugs the evaluation engine's expectations,
  :mod:`dockyard_api.rollout.start`, with ``spec.slo.expect``; without one: "answered without an error") in
  the recorder's background flush, never in the turn.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from dockyard_api import rollout_metrics
from dockyard_api.store.outcomes import Outcome, OutcomeRecorder
from dockyard_core.clock import utcnow

BUCKETS = 10_000


def bucket(key: str) -> int:
    """``key``'s bucket, 0 to BUCKETS - 1 (BLAKE2b: the same on every replica and every run)."""
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "big") % BUCKETS


def on_canary(session_id: str, weight: int) -> bool:
    """Whether a new session with this id starts on a canary of ``weight`` percent."""
    return bucket(session_id) < weight * (BUCKETS // 100)


@dataclass(frozen=True)
class Canary:
    """An environment's spec.canary as the runtime reads it."""

    version: str
    weight: int

    def chooser(self, active: str) -> Callable[[str], str]:
        """The version a new session with a given id starts on."""
        version, weight = self.version, self.weight
        return lambda sid: version if on_canary(sid, weight) else active


def read_canary(spec: Mapping[str, Any]) -> Canary | None:
    canary = spec.get("canary")
    if not isinstance(canary, Mapping) or not canary.get("appVersion"):
        return None
    return Canary(str(canary["appVersion"]), int(canary.get("weight") or 0))


@dataclass(frozen=True)
class LiveEvaluation:
    """spec.slo's sampling of live turns: the share scored and what their answers must show."""

    sample_rate: float
    expect: Mapping[str, Any]


def read_live_evaluation(spec: Mapping[str, Any]) -> LiveEvaluation | None:
    slo = spec.get("slo")
    if not isinstance(slo, Mapping) or slo.get("minEvaluationPassRate") is None:
        return None
    expect = {k: v for k, v in (slo.get("expect") or {}).items() if k != "rubric"}  # no judge model live
    return LiveEvaluation(float(slo.get("evaluationSampleRate", 0.1)), expect)


def sampled(message_id: str, rate: float) -> bool:
    return rate > 0 and bucket(message_id) < rate * BUCKETS


@dataclass(frozen=True)
class Answer:
    """What a finished turn showed, as the live evaluation judges it (no error: ``error`` empty)."""

    response: str = ""
    agent: str = ""
    tools_used: tuple[str, ...] = ()
    blocked: bool = False
    latency_ms: int = 0
    error: str = ""


Judge = Callable[[Mapping[str, Any], Answer], bool]
"""Whether an answer meets the expectations (camelCase, an evaluation case's ``expect``)."""


def answered_without_error(expect: Mapping[str, Any], answer: Answer) -> bool:
    """The judge when no evaluation engine is plugged in: the turn answered."""
    return not answer.error


def live_answer(result: Any, seconds: float) -> Answer:
    """A finished turn (an agent loop's TurnResult) as the live evaluation judges it."""
    return Answer(
        response=result.response, agent=result.agent, tools_used=tuple(result.tools_used),
        blocked=bool(result.blocked), latency_ms=int(seconds * 1000),
    )  # fmt: skip


class Figures:
    """Where the runtime reports each finished turn (see the module docstring)."""

    def __init__(self, recorder: OutcomeRecorder | None, judge: Judge = answered_without_error) -> None:
        self.recorder = recorder
        self.judge = judge

    def turn(
        self,
        *,
        namespace: str,
        environment: str,
        version: str,
        seconds: float,
        outcome: str,
        tokens: tuple[int, int],
        live: LiveEvaluation | None = None,
        message_id: str = "",
        answer: Answer | None = None,
    ) -> None:
        rollout_metrics.version_turn(namespace, environment, version, outcome, seconds)
        if self.recorder is None:
            return
        at = utcnow()
        self.recorder.add(Outcome(namespace, environment, version, at, seconds, outcome, tokens[0], tokens[1]))
        if live is not None and sampled(message_id or str(at.timestamp()), live.sample_rate):
            verdict = answer if answer is not None else Answer(error=outcome)
            judge, expect = self.judge, live.expect
            self.recorder.add_scored(
                lambda: Outcome(
                    namespace,
                    environment,
                    version,
                    at,
                    seconds,
                    outcome,
                    passed=judge(expect, verdict),
                    counted=False,
                )
            )
