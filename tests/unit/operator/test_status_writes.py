"""When the operator writes a job's status: once per transition (reconcile.workload.in_flight), the first one
of a new object held back while its rollout may still end quickly (held_back), and the job's Events."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from dockyard_core.resources.v1alpha1 import DockJob
from dockyard_operator.reconcile.workload import held_back, in_flight, job_events, job_for


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


CREATED = datetime(2026, 11, 23, 10, 0, 0, tzinfo=UTC)


def body(labels: dict[str, str] | None = None) -> dict[str, object]:
    return {"metadata": {"name": "m", "creationTimestamp": "2026-11-23T10:00:00Z", "labels": labels or {}}}


def at(seconds: float) -> datetime:
    return CREATED + timedelta(seconds=seconds)


def test_the_first_status_of_a_new_labelled_object_is_held_back_for_the_settle_window() -> None:
    first = job(job_id="a")
    assert held_back(body({"dockyard.dev/dock-status-id": "a"}), None, first, "a", 10.0, at(3.5)) == 6.5
    assert held_back(body(), None, first, "a", 10.0, at(10.0)) == 0.0  # the window is over: written now
    assert held_back(body(), None, first, "a", 0.0, at(0.0)) == 0.0  # settle_seconds 0: never held


def test_nothing_else_is_held_back() -> None:
    assert held_back(body(), None, job(status="SUCCESS", reason="Available"), "a", 10.0, at(1)) == 0.0  # its end
    assert held_back(body(), None, job(status="FAILED", reason="Unschedulable"), "a", 10.0, at(1)) == 0.0
    assert held_back(body(), job(job_id="old"), job(), "a", 10.0, at(1)) == 0.0  # a later job: status shows the old
    assert held_back(body(), None, job(job_id="random"), None, 10.0, at(1)) == 0.0  # unlabelled: label patch first
    assert held_back(body(), None, job(reason="Unschedulable"), "a", 10.0, at(1)) == 0.0  # waits: shown at once
    assert held_back(body(), None, job(reason="Deploying"), "a", 10.0, at(1)) == 9.0  # its first assessment


def test_a_new_objects_first_job_started_at_its_creation() -> None:
    first, new = job_for(None, "a", "h", 1, "MODELS", CREATED)
    assert new
    assert first.start_time == CREATED
    assert first.dock_status_id == "a"
    again, _ = job_for(None, "a", "h", 1, "MODELS", CREATED)
    assert again.start_time == first.start_time  # rebuilt the same on every reconcile until it is written
    later, new = job_for(first, "b", "h", 1, "MODELS", CREATED)
    assert new
    assert later.start_time is not None
    assert later.start_time > CREATED


def test_a_success_gets_an_event_only_when_asked_for_a_failure_always() -> None:
    obj = {"kind": "ModelDeployment", "metadata": {"name": "m", "namespace": "ns"}, "spec": {}}
    done = job(status="SUCCESS", reason="Available")
    assert job_events(obj, job(), done, False) == ()
    assert [e.reason for e in job_events(obj, job(), done, False, success_events=True)] == ["Deployed"]
    failed = job(status="FAILED", reason="Unschedulable")
    assert [(e.type, e.reason) for e in job_events(obj, job(), failed, False)] == [("Warning", "Unschedulable")]
