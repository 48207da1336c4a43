"""The canary in an Environment's history and status (operator/dockyard_operator/canary.py, docs/promotion.md)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

from dockyard_core.resources.v1alpha1 import DEPLOY_ACTION_ANNOTATION, DEPLOY_REQUEST_ANNOTATION, HistoryEntry
from dockyard_operator import canary
from dockyard_operator import environments as envs
from dockyard_operator.admission import deployment_stamp

T0 = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)


def _entry(version: str, status: str, at: datetime, **more: Any) -> HistoryEntry:
    return HistoryEntry.model_validate(
        {"version": version, "status": status, "deployedAt": at, "deployedBy": "ann", "healthy": True, **more}
    )


def _reconcile(
    history: list[HistoryEntry], spec: dict[str, Any], notes: dict[str, Any], at: datetime, action: str = "Deploy"
) -> tuple[list[HistoryEntry], dict[str, Any] | None]:
    """What the reconcile does: the deployments through next_history, then the canaries."""
    deployments, canaries = canary.split_history(history)
    deployed_at = notes.get("deployedAt", T0)
    deployments = envs.next_history(deployments, spec["appVersion"], deployed_at, "ann", action)
    return canary.with_canaries(deployments, canaries, spec, notes, action, at)


def test_a_canary_from_start_to_promotion() -> None:
    history = [_entry("1.0.0", "Active", T0)]
    spec = {"appVersion": "1.0.0", "canary": {"appVersion": "1.1.0", "weight": 10}}
    notes = {canary.CANARY_BY_ANNOTATION: "bob"}
    history, state = _reconcile(history, spec, notes, T0 + timedelta(minutes=1))
    assert [(h.version, h.status, h.action, h.weight) for h in history] == [
        ("1.1.0", "Canary", "Canary", 10),
        ("1.0.0", "Active", "Deploy", None),
    ]
    assert history[0].deployed_by == "bob"
    assert state is not None
    assert (state["summary"], state["phase"]) == ("1.1.0 10%", "Running")
    again, unchanged = _reconcile(history, spec, notes, T0 + timedelta(minutes=2))
    assert again == history  # level-based: nothing new
    assert unchanged is None
    spec["canary"]["weight"] = 50
    history, state = _reconcile(history, spec, notes, T0 + timedelta(minutes=3))
    assert [(h.status, h.weight, h.outcome) for h in history[:2]] == [
        ("Canary", 50, None),
        ("Previous", 10, "Reweighted"),
    ]
    promoted = {"appVersion": "1.1.0"}
    history, state = _reconcile(
        history, promoted, {"deployedAt": T0 + timedelta(minutes=4)}, T0 + timedelta(minutes=4), action="Promote"
    )
    assert [(h.version, h.status, h.action, h.outcome) for h in history] == [
        ("1.1.0", "Active", "Promote", None),
        ("1.1.0", "Previous", "Canary", "Promoted"),
        ("1.1.0", "Previous", "Canary", "Reweighted"),
        ("1.0.0", "Previous", "Deploy", None),
    ]
    assert history[1].healthy is None  # a canary entry is no deployment: never a "working version"
    assert state is not None
    assert state["summary"] == "Promoted 1.1.0"


def test_a_canary_rolled_back_by_the_watcher_keeps_the_reason_and_figures() -> None:
    history = [_entry("1.1.0", "Canary", T0, action="Canary", weight=20, healthy=None), _entry("1.0.0", "Active", T0)]
    figures = {"version": "1.1.0", "turns": 30, "errors": 9, "errorRate": 0.3, "windowSeconds": 60}
    notes = {
        canary.CANARY_REQUEST_ANNOTATION: "RolledBack 1f",
        canary.ROLLOUT_REASON_ANNOTATION: "version 1.1.0: error rate 30.0% ...",
        canary.ROLLOUT_FIGURES_ANNOTATION: json.dumps(figures),
    }
    history, state = _reconcile(history, {"appVersion": "1.0.0"}, notes, T0 + timedelta(minutes=1))
    ended = next(h for h in history if h.action == "Canary")
    assert (ended.status, ended.outcome) == ("Previous", "RolledBack")
    assert ended.reason.startswith("version 1.1.0: error rate 30.0%")
    assert ended.figures is not None
    assert ended.figures.error_rate == 0.3
    assert state is not None
    assert (state["phase"], state["weight"], state["summary"]) == ("RolledBack", 0, "RolledBack 1.1.0")
    again, state = _reconcile(history, {"appVersion": "1.0.0"}, notes, T0 + timedelta(minutes=2))
    assert again == history
    assert state is None  # no canary running: nothing more to end


def test_an_automatic_rollback_after_a_deploy_is_recorded_with_its_reason() -> None:
    history = [_entry("1.1.0", "Active", T0), _entry("1.0.0", "Previous", T0 - timedelta(days=1))]
    notes = {
        "deployedAt": T0 + timedelta(minutes=2),
        canary.ROLLOUT_REASON_ANNOTATION: "version 1.1.0: p95 latency 9.000s ...",
        canary.ROLLOUT_FIGURES_ANNOTATION: json.dumps({"version": "1.1.0", "turns": 12, "p95LatencySeconds": 9.0}),
    }
    history, _ = _reconcile(history, {"appVersion": "1.0.0"}, notes, T0 + timedelta(minutes=2), "AutoRollback")
    top = history[0]
    assert (top.version, top.status, top.action) == ("1.0.0", "Active", "AutoRollback")
    assert top.reason.startswith("version 1.1.0: p95 latency")
    assert top.figures is not None
    assert top.figures.p95_latency_seconds == 9.0


def test_the_webhook_records_promote_and_automatic_rollback_as_asked() -> None:
    old = {"spec": {"appVersion": "1.0.0"}}
    for request, action in (("Promote 1a", "Promote"), ("AutoRollback 2b", "AutoRollback"), ("Other 3", "Deploy")):
        body = {"spec": {"appVersion": "1.1.0"}}
        notes = {DEPLOY_REQUEST_ANNOTATION: request}
        stamp = deployment_stamp(
            operation="UPDATE", old=old, body=body, notes=notes, old_notes={}, username="u", now=T0
        )
        assert stamp[DEPLOY_ACTION_ANNOTATION] == action


def test_a_canary_started_within_the_second_of_a_promotion_is_listed_above_it() -> None:
    promoted_at = T0 + timedelta(microseconds=800_000)
    history = [_entry("1.1.0", "Active", promoted_at, action="Promote"), _entry("1.0.0", "Previous", T0)]
    spec = {"appVersion": "1.1.0", "canary": {"appVersion": "1.2.0", "weight": 50}}
    deployments, canaries = canary.split_history(history)
    seen_at = T0 + timedelta(microseconds=900_000)  # the operator's clock, to the microsecond
    merged, _ = canary.with_canaries(deployments, canaries, spec, {}, "Promote", seen_at)
    assert [(h.version, h.action) for h in merged] == [("1.2.0", "Canary"), ("1.1.0", "Promote"), ("1.0.0", "Deploy")]
