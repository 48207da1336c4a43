"""When the operator writes a job's status: once per transition (reconcile.workload.in_flight)."""

from __future__ import annotations

from datetime import UTC, datetime

from dockyard_core.resources.v1alpha1 import DockJob
from dockyard_operator.reconcile.workload import in_flight


def job(status: str = "IN_PROGRESS", reason: str = "RollingOut", job_id: str = "a", message: str = "m") -> DockJob:
    return DockJob(
        dock_status_id=job_id, job_type="MODELS", action="DEPLOY", status=status, reason=reason, message=message,
        start_time=datetime(2026, 11, 23, tzinfo=UTC), generation=1, template_hash="h",
    )  # fmt: skip


def test_the_same_job_in_progress_for_the_same_reason_is_not_written_again() -> None:
    assert in_flight(job(message="0 of 1 required replica(s) ready"), job(message="1 of 2 required replica(s) ready"))


def test_every_transition_is_written() -> None:
    assert not in_flight(None, job())  # the job starts
    assert not in_flight(job(), job(status="SUCCESS", reason="Available"))  # it ends
    assert not in_flight(job(), job(status="FAILED", reason="Unschedulable"))
    assert not in_flight(job(), job(reason="Unschedulable"))  # a new reason while it runs
    assert not in_flight(job(), job(job_id="b"))  # a new job


def test_a_finished_job_is_written_as_it_changes() -> None:
    done = job(status="SUCCESS", reason="Available")
    assert not in_flight(done, done)
