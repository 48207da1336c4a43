"""The first status of a new ModelDeployment created as the facade creates it (labelled with its job) is
held back for the settle window: a rollout that ends within it gets one status write (its end), one that
is still running then gets its IN_PROGRESS status at that moment. Objects created without the label get
their IN_PROGRESS status at once."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes import client, watch

from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import DOCK_STATUS_ID_LABEL, VERSION
from tests.support.cluster import E2ECluster
from tests.support.dockyard import get, hub_model, job, model_deployment
from tests.support.runners import RunningOperator, run_operator
from tests.support.waiting import holds_for, wait_for

SETTLE = 8.0
OPERATOR_ENV = {
    "DOCKYARD_OPERATOR_STATUS_SETTLE_SECONDS": str(SETTLE),
    "DOCKYARD_OPERATOR_UNSCHEDULABLE_DEADLINE_SECONDS": "120",
    "DOCKYARD_OPERATOR_PROGRESS_DEADLINE_SECONDS": "120",
}


@pytest.fixture(scope="module")
def operator(cluster: E2ECluster, crds: None) -> Iterator[RunningOperator]:
    with run_operator(env=OPERATOR_ENV) as running:
        yield running


pytestmark = pytest.mark.usefixtures("operator")


def job_statuses(api: client.ApiClient, namespace: str, name: str, since: str, until: str) -> list[str]:
    """The job status of every version of the object the API server sends from ``since`` on, until one
    has the status ``until`` (versions without a job in their status are left out)."""
    seen: list[str] = []
    stream = watch.Watch().stream(
        client.CustomObjectsApi(api).list_namespaced_custom_object, GROUP, VERSION, namespace, "modeldeployments",
        field_selector=f"metadata.name={name}", resource_version=since, timeout_seconds=60,
    )  # fmt: skip
    for event in stream:
        status = ((event["object"].get("status") or {}).get("job") or {}).get("status")
        if status is not None:
            seen.append(status)
        if status == until:
            break
    return seen


def created_at(obj: dict[str, Any]) -> datetime:
    return datetime.fromisoformat(obj["metadata"]["creationTimestamp"].replace("Z", "+00:00"))


def test_a_labelled_rollout_that_ends_within_the_window_is_written_once(api: client.ApiClient, namespace: str) -> None:
    hub_model(api, namespace, "fast")
    created = model_deployment(api, namespace, "fast", labels={DOCK_STATUS_ID_LABEL: "job-fast"})
    seen = job_statuses(api, namespace, "fast", created["metadata"]["resourceVersion"], "SUCCESS")
    done = job(api, namespace, "modeldeployments", "fast")
    assert done is not None
    assert done["dockStatusId"] == "job-fast"
    start = datetime.fromisoformat(done["startTime"].replace("Z", "+00:00"))
    end = datetime.fromisoformat(done["completionTime"].replace("Z", "+00:00"))
    assert start == created_at(created)  # the job started when the object was created
    if (end - start).total_seconds() < SETTLE - 1:  # a single replica on a simulated node: about a second
        assert seen == ["SUCCESS"]  # no IN_PROGRESS version: one status write
    else:  # a machine too busy to roll it out within the window: its IN_PROGRESS status came first
        assert seen == ["IN_PROGRESS", "SUCCESS"]


def test_a_labelled_rollout_still_running_gets_its_status_when_the_window_ends(
    api: client.ApiClient, namespace: str
) -> None:
    hub_model(api, namespace, "slow")
    created = model_deployment(
        api, namespace, "slow", labels={DOCK_STATUS_ID_LABEL: "job-slow", "dockyard.dev/simulate": "never-ready"}
    )

    def no_job_yet() -> None:
        assert job(api, namespace, "modeldeployments", "slow") is None

    holds_for(no_job_yet, SETTLE - 4)
    in_progress = wait_for(lambda: job(api, namespace, "modeldeployments", "slow"), timeout=30,
                           what="the IN_PROGRESS status after the settle window")  # fmt: skip
    seen_at = datetime.now(UTC)
    assert in_progress["status"] == "IN_PROGRESS"
    assert in_progress["dockStatusId"] == "job-slow"
    # written when the window ended, not before (creationTimestamp has whole seconds)
    assert (seen_at - created_at(created)).total_seconds() >= SETTLE - 1
    assert get(api, namespace, "modeldeployments", "slow")["status"]["observedGeneration"] == 1


def test_a_labelled_rollout_that_waits_for_a_node_shows_it_at_once(api: client.ApiClient, namespace: str) -> None:
    hub_model(api, namespace, "big")
    # the pool has 2 g5.48xlarge nodes, each with 8 GPUs: a third replica waits (deadline: 120 s here)
    created = model_deployment(api, namespace, "big", "g5.48xlarge", labels={DOCK_STATUS_ID_LABEL: "job-big"},
                               scalingParameters={"minReplicas": 3})  # fmt: skip
    waiting = wait_for(lambda: job(api, namespace, "modeldeployments", "big"), timeout=30, what="a status")
    seen_at = datetime.now(UTC)
    assert (waiting["status"], waiting["reason"]) == ("IN_PROGRESS", "Unschedulable")
    assert (seen_at - created_at(created)).total_seconds() < SETTLE  # not held back for the window


def test_an_unlabelled_object_gets_its_in_progress_status_at_once(api: client.ApiClient, namespace: str) -> None:
    hub_model(api, namespace, "plain")
    created = model_deployment(api, namespace, "plain")
    started = time.monotonic()
    seen = job_statuses(api, namespace, "plain", created["metadata"]["resourceVersion"], "SUCCESS")
    assert seen[0] == "IN_PROGRESS"
    assert seen[-1] == "SUCCESS"
    assert time.monotonic() - started < 30
