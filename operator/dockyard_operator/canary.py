"""An Environment's canary in its history and status (pure: unit-tested; docs/promotion.md).

A canary (``spec.canary``: a version and the percent of new sessions that start on it) is a history entry
of its own: action Canary, status Canary while it runs, its weight. A new weight ends the running entry
(Reweighted) and starts another; a canary that ends leaves its entry Previous with how it ended: Promoted
(``spec.appVersion`` became its version), RolledBack (the SLO watcher's breach: its reason and figures from
the annotations the watcher wrote) or Aborted. ``status.canary`` is the running canary, or how the last one
ended (``kubectl get env`` prints its summary). An automatic rollback after a deploy (action AutoRollback)
gets the watcher's reason and figures on its Active entry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from dockyard_core.resources.v1alpha1 import HistoryEntry
from dockyard_core.resources.v1alpha1.canary import (
    CANARY_REQUEST_ANNOTATION,
    ROLLOUT_FIGURES_ANNOTATION,
    ROLLOUT_REASON_ANNOTATION,
    SloFigures,
)

CANARY_BY_ANNOTATION = "dockyard.dev/canary-by"
"""Who asked for the canary change (written by the facade's management API as the caller's name)."""


def _stamp(when: datetime) -> str:
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


def _figures(notes: Mapping[str, Any]) -> SloFigures | None:
    try:
        raw = json.loads(str(notes.get(ROLLOUT_FIGURES_ANNOTATION) or ""))
        return SloFigures.model_validate(raw)
    except ValueError:
        return None


def _running(history: list[HistoryEntry]) -> int | None:
    return next((i for i, h in enumerate(history) if h.status == "Canary"), None)


def canary_history(
    history: list[HistoryEntry],
    spec: Mapping[str, Any],
    notes: Mapping[str, Any],
    now: datetime,
) -> tuple[list[HistoryEntry], dict[str, Any] | None]:
    """The history after ``spec.canary`` as it is now, and the new ``status.canary`` (None: unchanged)."""
    canary = spec.get("canary") or None
    at = _running(history)
    running = history[at] if at is not None else None
    request = str(notes.get(CANARY_REQUEST_ANNOTATION) or "").split(" ", 1)[0]
    if canary is not None:
        version, weight = str(canary["appVersion"]), int(canary.get("weight") or 0)
        if running is not None and running.version == version and running.weight == weight:
            return history, None
        out = list(history)
        if running is not None and at is not None:
            out[at] = running.model_copy(
                update={"status": "Previous", "outcome": "Reweighted" if running.version == version else "Aborted"}
            )
        entry = HistoryEntry.model_validate(
            {
                "version": version,
                "deployedAt": now,
                "deployedBy": str(notes.get(CANARY_BY_ANNOTATION) or "unknown"),
                "status": "Canary",
                "action": "Canary",
                "weight": weight,
            }
        )
        state = {"version": version, "weight": weight, "phase": "Running", "since": _stamp(now),
                 "summary": f"{version} {weight}%"}  # fmt: skip
        return [entry, *out], state
    if running is None or at is None:
        return history, None
    reason = ""
    figures = None
    if request == "RolledBack":
        outcome = "RolledBack"
        reason = str(notes.get(ROLLOUT_REASON_ANNOTATION) or "")[:1024]
        figures = _figures(notes)
    elif str(spec.get("appVersion") or "") == running.version:
        outcome = "Promoted"
    else:
        outcome = "Aborted"
    out = list(history)
    out[at] = running.model_copy(
        update={"status": "Previous", "outcome": outcome, "reason": reason, "figures": figures}
    )
    state = {"version": running.version, "weight": 0, "phase": outcome, "since": _stamp(now),
             "summary": f"{outcome} {running.version}", "reason": reason}  # fmt: skip
    return out, state


def rollback_reason(history: list[HistoryEntry], notes: Mapping[str, Any], action: str) -> list[HistoryEntry]:
    """The Active entry of an automatic rollback after a deploy, with the watcher's reason and figures."""
    if action != "AutoRollback":
        return history
    at = next((i for i, h in enumerate(history) if h.status == "Active"), None)
    if at is None or history[at].action != "AutoRollback" or history[at].reason:
        return history
    out = list(history)
    reason = str(notes.get(ROLLOUT_REASON_ANNOTATION) or "")[:1024]
    out[at] = history[at].model_copy(update={"reason": reason, "figures": _figures(notes)})
    return out


def split_history(history: list[HistoryEntry]) -> tuple[list[HistoryEntry], list[HistoryEntry]]:
    """The deployments (what :func:`~dockyard_operator.environments.next_history` keeps) and the canaries."""
    return [h for h in history if h.action != "Canary"], [h for h in history if h.action == "Canary"]


def with_canaries(
    deployments: list[HistoryEntry],
    canaries: list[HistoryEntry],
    spec: Mapping[str, Any],
    notes: Mapping[str, Any],
    action: str,
    now: datetime,
    limit: int = 100,
) -> tuple[list[HistoryEntry], dict[str, Any] | None]:
    """The whole history (newest first) from the deployments after this reconcile and the canary entries, and
    the new ``status.canary`` (None: unchanged): a Promote or AutoRollback deployment keeps its action (and an
    AutoRollback the watcher's reason and figures), the canary entries follow ``spec.canary``."""
    at = next((i for i, h in enumerate(deployments) if h.status == "Active"), None)
    if at is not None and action in ("Promote", "AutoRollback") and deployments[at].action == "Deploy":
        deployments = list(deployments)
        deployments[at] = deployments[at].model_copy(update={"action": action})
    deployments = rollback_reason(deployments, notes, action)
    merged = sorted([*deployments, *canaries], key=lambda h: h.deployed_at, reverse=True)
    history, state = canary_history(merged, spec, notes, now)
    return history[:limit], state
