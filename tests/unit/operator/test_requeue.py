"""When a reconcile looks again without an event (reconcile/workload.py ``outcome_of``): a rollout that goes
as it should waits for its watch events, so its reconciles do not grow with the time a model takes to load."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from dockyard_core.resources.v1alpha1 import DockJob
from dockyard_operator.reconcile.workload import ROLLOUT_BATCH_SECONDS, STARTUP_BATCH_SECONDS, outcome_of
from dockyard_operator.settings import OperatorSettings

SETTINGS = OperatorSettings(observe_interval_seconds=5, settled_interval_seconds=10)
CTX: Any = SimpleNamespace(settings=SETTINGS, workloads=None)
WATCHED: Any = SimpleNamespace(settings=SETTINGS, workloads=SimpleNamespace(mounts=SimpleNamespace(synced=True)))
"""The FailedMount Events of the workloads' Pods are watched (workloads.FailedMounts)."""


def job(status: str = "IN_PROGRESS", reason: str = "RollingOut") -> DockJob:
    return DockJob(dock_status_id="j", job_type="MODELS", action="DEPLOY", status=status, reason=reason)


def pod(phase: str, node: str | None = "n1", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase, **status}}


def after(j: DockJob, pods: list[dict[str, Any]], hold: float = 0.0) -> float | None:
    return outcome_of(CTX, j, pods, (None, (), ()), hold).requeue_after


def test_a_model_loading_as_it_should_is_looked_at_when_its_hold_ends_or_at_the_settled_interval() -> None:
    loading = [pod("Running", conditions=[{"type": "Ready", "status": "False"}])]
    assert after(job(), loading, hold=80.0) == 80.1  # the hold's end: its IN_PROGRESS status is due then
    assert after(job(), loading) == 10  # no hold: the safety net of settled objects, not every 5 s
    assert after(job(reason="Deploying"), []) == 10  # no Deployment yet: its creation is an event
    assert after(job(), [pod("Pending", node=None)]) == 10  # not scheduled yet: the scheduler's answer is an event


def test_a_pod_on_a_node_that_has_not_started_is_looked_at_every_observe_interval() -> None:
    # only its Events tell a volume that cannot be mounted
    assert after(job(), [pod("Pending")], hold=80.0) == 5
    assert after(job(), [pod("Pending")]) == 5


def test_a_pod_on_a_node_that_has_not_started_needs_no_look_while_failed_mounts_are_watched() -> None:
    """Its FailedMount Events are then events: however long an image pull or a model download takes, the
    rollout costs no periodic reconcile."""
    assert outcome_of(WATCHED, job(), [pod("Pending")], (None, (), ()), 0.0).requeue_after == 10
    assert outcome_of(WATCHED, job(), [pod("Pending")], (None, (), ()), 80.0).requeue_after == 80.1
    assert after(job(reason="FailedMount"), [pod("Running")]) == 5  # a job that waits for something


def test_a_settled_job_is_looked_at_every_settled_interval() -> None:
    assert after(job("SUCCESS", "Available"), [pod("Running")]) == 10
    assert after(job("FAILED", "CrashLoop"), [pod("Running")]) == 10


def test_a_job_rolling_out_as_it_should_batches_its_events_for_a_second() -> None:
    """Its status is held back or unchanged until it ends: a second's wait joins a Pod turning Ready and its
    Deployment reporting it (or a new object's first burst) into one reconcile."""
    loading = [pod("Running", conditions=[{"type": "Ready", "status": "False"}])]

    def window(j: DockJob) -> float | None:
        return outcome_of(CTX, j, loading, (None, (), ()), 0.0).batch_window

    assert window(job()) == window(job(reason="Deploying")) == ROLLOUT_BATCH_SECONDS == 1.0
    assert window(job(reason="Unschedulable")) is None  # the queue's own window: a change there is news
    assert window(job("SUCCESS", "Available")) is None


def test_a_rollout_that_has_not_started_its_pods_batches_its_events_for_three_seconds() -> None:
    """The Deployment, ReplicaSet and Pods are created, scheduled and started by three controllers, whose
    events spread over seconds when many rollouts start at once: until every pod runs, three seconds of them
    join one reconcile; once they run, a second (Ready, then the Deployment's replicas)."""

    def window(pods: list[dict[str, Any]], j: DockJob | None = None) -> float | None:
        return outcome_of(CTX, j or job(), pods, (None, (), ()), 0.0).batch_window

    assert window([]) == window([pod("Pending", node=None)]) == STARTUP_BATCH_SECONDS == 3.0
    assert window([pod("Running"), pod("Pending")]) == STARTUP_BATCH_SECONDS  # one of two has not started
    assert window([pod("Running"), pod("Running")]) == ROLLOUT_BATCH_SECONDS
    assert window([pod("Pending")], job(reason="Unschedulable")) is None  # waiting for something: news at once
