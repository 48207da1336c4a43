"""What of a workload's Pod or Deployment can change the operator's verdict (dockyard_operator.signals): a
rollout's progress events that change nothing are no news, everything that can end or break it is."""

from __future__ import annotations

from typing import Any

from dockyard_operator.signals import deployment_signal, pod_signal


def pod(phase: str = "Pending", node: str | None = None, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "p"}, "spec": {"nodeName": node} if node else {}, "status": {"phase": phase, **status}}


def condition(kind: str, status: str, **more: str) -> dict[str, str]:
    return {"type": kind, "status": status, "lastTransitionTime": "2026-11-26T06:00:00Z", **more}


RUNNING = {"name": "engine", "ready": False, "restartCount": 0, "state": {"running": {"startedAt": "t"}}}
INIT_DONE = {"name": "weights", "restartCount": 0, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}


def test_a_pod_starting_and_loading_as_it_should_is_no_news_until_it_is_ready() -> None:
    created = pod()
    scheduled = pod(node="n1", conditions=[condition("PodScheduled", "True")])
    loading = pod("Running", "n1", conditions=[condition("PodScheduled", "True"), condition("Ready", "False")],
                  containerStatuses=[RUNNING], initContainerStatuses=[INIT_DONE], podIP="10.0.0.1")  # fmt: skip
    ready = pod("Running", "n1", conditions=[condition("Ready", "True")], containerStatuses=[RUNNING])
    assert pod_signal({}) == pod_signal(created) == pod_signal(loading)  # nothing to decide: no reconcile
    assert pod_signal(scheduled) != pod_signal(created)  # on a node, not started: its mount is looked at
    assert pod_signal(ready) != pod_signal(loading)
    # while FailedMount Events are watched they tell a mount that fails: being scheduled is no news
    assert pod_signal(scheduled, starting=False) == pod_signal(created, starting=False)


def test_everything_that_can_end_or_break_a_rollout_is_news() -> None:
    loading = pod("Running", "n1", conditions=[condition("Ready", "False")], containerStatuses=[RUNNING])
    base = pod_signal(loading)
    waiting = {**RUNNING, "state": {"waiting": {"reason": "CrashLoopBackOff"}}, "restartCount": 3}
    pull = {**RUNNING, "state": {"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}}
    failed_init = {**INIT_DONE, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}
    broken = [
        pod("Running", "n1", conditions=[condition("Ready", "False")], containerStatuses=[waiting]),
        pod("Pending", "n1", conditions=[condition("Ready", "False")], containerStatuses=[pull]),
        pod("Pending", "n1", initContainerStatuses=[failed_init]),
        pod("Failed", "n1"),
        pod(conditions=[condition("PodScheduled", "False", reason="Unschedulable", message="0/8 nodes")]),
        {**loading, "metadata": {"name": "p", "deletionTimestamp": "t"}},
        {**loading, "metadata": {"name": "p", "annotations": {"dockyard.dev/local-endpoint": "http://127.0.0.1:1"}}},
    ]
    for other in broken:
        assert pod_signal(other) != base, other
    # the scheduler's new reason is news too, its timestamps are not
    refused = pod(conditions=[condition("PodScheduled", "False", reason="Unschedulable", message="0/8 nodes")])
    again = pod(conditions=[{**condition("PodScheduled", "False", reason="Unschedulable", message="0/8 nodes"),
                             "lastTransitionTime": "later"}])  # fmt: skip
    assert pod_signal(refused) == pod_signal(again)


def deployment(generation: int = 1, **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "d", "generation": generation}, "spec": {"replicas": 1}, "status": status}


def test_a_deployment_counts_by_what_can_finish_fail_or_drift() -> None:
    created = deployment()
    progressing = deployment(observedGeneration=1, replicas=1, updatedReplicas=1, unavailableReplicas=1, conditions=[
        condition("Progressing", "True", reason="ReplicaSetUpdated"), condition("Available", "False")])  # fmt: skip
    available = deployment(observedGeneration=1, replicas=1, updatedReplicas=1, readyReplicas=1, availableReplicas=1,
                           conditions=[condition("Available", "True")])  # fmt: skip
    assert deployment_signal(progressing) == deployment_signal(created) != deployment_signal({})
    assert deployment_signal(available) != deployment_signal(progressing)
    stalled = deployment(conditions=[condition("Progressing", "False", reason="ProgressDeadlineExceeded")])
    assert deployment_signal(stalled) != deployment_signal(created)
    assert deployment_signal(deployment(generation=2)) != deployment_signal(created)  # edited: re-apply or roll out
    scaled = {**created, "spec": {"replicas": 2}}
    assert deployment_signal(scaled) != deployment_signal(created)


def test_a_deployment_counts_by_dockyards_annotations_only() -> None:
    """Drift is read from Dockyard's own annotations; the revision the Deployment controller adds to every new
    Deployment a moment after its creation is no news."""
    created = deployment()
    revised = {
        **created,
        "metadata": {**created["metadata"], "annotations": {"deployment.kubernetes.io/revision": "1"}},
    }
    drifted = {**created, "metadata": {**created["metadata"], "annotations": {"dockyard.dev/template-hash": "other"}}}
    assert deployment_signal(revised) == deployment_signal(created)
    assert deployment_signal(drifted) != deployment_signal(created)
