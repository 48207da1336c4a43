"""What the SLO watcher watches in an Environment and its verdict (pure: unit-tested).

Watched: a running canary (spec.canary: the canary version's turns since it started), else the active
version for ``spec.slo.watchSeconds`` after its deploy (the Active history entry's turns since then) when a
previous working version exists to go back to; an AutoRollback is not watched again (no ping-pong). A
breach needs ``minTurns`` turns in the window (for the pass rate, ``minTurns`` scored turns)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

from pydantic import TypeAdapter

from dockyard_api.store.outcomes import Figures
from dockyard_core.resources.v1alpha1.canary import SloSpec

_TIME = TypeAdapter(datetime)


@dataclass(frozen=True)
class Watch:
    """What is watched now: ``version`` since ``since``, and where new sessions go back on a breach."""

    what: Literal["canary", "deploy"]
    version: str
    since: datetime
    back_to: str
    """The previous working version (the active one, for a canary)."""
    until: datetime | None = None
    """The end of a deploy's watch."""

    def describe(self) -> str:
        if self.what == "canary":
            return f"canary {self.version}"
        until = self.until.isoformat(timespec="seconds").replace("+00:00", "Z") if self.until else ""
        return f"deploy {self.version} until {until}"


@dataclass(frozen=True)
class Breach:
    slo: Literal["errorRate", "p95Latency", "evaluationPassRate"]
    reason: str
    figures: dict[str, Any]


def slo_of(spec: Mapping[str, Any]) -> SloSpec | None:
    raw = spec.get("slo")
    return SloSpec.model_validate(raw) if isinstance(raw, Mapping) else None


def watch_of(env: Mapping[str, Any], slo: SloSpec, now: datetime) -> Watch | None:
    spec, status = env.get("spec") or {}, env.get("status") or {}
    active = str(spec.get("appVersion") or "draft")
    canary = spec.get("canary") or {}
    if canary.get("appVersion") and int(canary.get("weight") or 0) > 0:
        seen = status.get("canary") or {}
        running = seen.get("phase") == "Running" and seen.get("version") == canary["appVersion"]
        since = _TIME.validate_python(seen["since"]) if running and seen.get("since") else now
        return Watch("canary", str(canary["appVersion"]), since, active)
    if slo.watch_seconds <= 0:
        return None
    history: Sequence[Mapping[str, Any]] = status.get("history") or []
    entry = next((h for h in history if h.get("status") == "Active"), None)
    if entry is None or entry.get("version") != active or entry.get("action") == "AutoRollback":
        return None
    deployed = _TIME.validate_python(entry["deployedAt"])
    until = deployed + timedelta(seconds=slo.watch_seconds)
    if now >= until:
        return None
    working = next(
        (h["version"] for h in history if h.get("status") == "Previous" and h.get("healthy") is True
         and h.get("version") != active and h.get("action") != "Canary"),
        None,
    )  # fmt: skip
    if working is None:
        return None
    return Watch("deploy", active, deployed, str(working), until)


def p95(values: Sequence[float]) -> float | None:
    """The 95th percentile (nearest rank)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.95 * len(ordered)) - 1)]


def figures(version: str, found: Figures | None, window_seconds: int) -> dict[str, Any]:
    """A version's :class:`~dockyard_core.resources.v1alpha1.canary.SloFigures` (JSON)."""
    f = found or Figures()
    turns = len(f.seconds)
    out: dict[str, Any] = {"version": version, "turns": turns, "errors": f.errors, "scored": f.scored,
                           "windowSeconds": window_seconds}  # fmt: skip
    if turns:
        out["errorRate"] = round(f.errors / turns, 4)
        out["p95LatencySeconds"] = round(p95(f.seconds) or 0.0, 4)
    if f.scored:
        out["evaluationPassRate"] = round(f.passed / f.scored, 4)
    return out


def breach(slo: SloSpec, fig: Mapping[str, Any]) -> Breach | None:
    """The first SLO ``fig`` breaches (error rate, p95 latency, evaluation pass rate), or None."""
    turns = int(fig.get("turns") or 0)
    version = fig.get("version")
    if turns >= slo.min_turns:
        rate = float(fig.get("errorRate") or 0.0)
        if rate > slo.max_error_rate:
            return Breach(
                "errorRate",
                f"version {version}: error rate {rate:.1%} over {turns} turns of the last {slo.window_seconds}s "
                f"is above the SLO's {slo.max_error_rate:.1%} ({fig.get('errors')} errors)",
                dict(fig),
            )
        latency = float(fig.get("p95LatencySeconds") or 0.0)
        if slo.max_p95_latency_seconds is not None and latency > slo.max_p95_latency_seconds:
            return Breach(
                "p95Latency",
                f"version {version}: p95 latency {latency:.3f}s over {turns} turns of the last "
                f"{slo.window_seconds}s is above the SLO's {slo.max_p95_latency_seconds:g}s",
                dict(fig),
            )
    scored = int(fig.get("scored") or 0)
    if slo.min_evaluation_pass_rate is not None and scored >= slo.min_turns:
        passed = float(fig.get("evaluationPassRate") or 0.0)
        if passed < slo.min_evaluation_pass_rate:
            return Breach(
                "evaluationPassRate",
                f"version {version}: evaluation pass rate {passed:.1%} over {scored} scored live turns of the "
                f"last {slo.window_seconds}s is below the SLO's {slo.min_evaluation_pass_rate:.1%}",
                dict(fig),
            )
    return None
