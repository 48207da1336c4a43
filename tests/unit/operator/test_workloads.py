"""The operator's views of its workloads (dockyard_operator.workloads): one list, then each watch event
kept as a slim copy under its owner's key and the owner queued when what it can decide changed
(dockyard_operator.signals); a lost watch lists again and keeps the
objects meanwhile (the reconciles cannot work without them); only the operator's own objects are asked
for (the label selector)."""

from __future__ import annotations

import asyncio
from typing import Any

from dockyard_core.kubeclient import KubeError
from dockyard_operator.signals import pod_signal
from dockyard_operator.workloads import FAILED_MOUNT_FIELDS, POD_STATUS, WORKLOAD_SELECTOR, FailedMounts, Workloads
from tests.support.listwatch import ScriptedKube

NS = "team"
PODS = "/api/v1/pods"


def pod(name: str, owner: str, version: str, *, uid: str | None = None, ready: bool = False) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name, "namespace": NS, "uid": uid or f"uid-{name}", "resourceVersion": version,
            "labels": {"app.kubernetes.io/managed-by": "dockyard", "app.kubernetes.io/component": "model-server",
                       "app.kubernetes.io/instance": owner},
            "annotations": {"dockyard.dev/template-hash": "h"}, "managedFields": [{"manager": "kubelet"}],
        },
        "spec": {"nodeName": "node-1", "containers": [{"name": "engine", "image": "vllm"}]},
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": str(ready)}], "hostIP": "10.0.0.1"},
    }  # fmt: skip


def listing(version: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": version}, "items": list(items)}


async def follow(kube: ScriptedKube) -> tuple[Workloads, list[tuple[str, str, str]]]:
    changed: list[tuple[str, str, str]] = []
    pods = Workloads(kube, PODS, POD_STATUS, changed.append, pod_signal)  # type: ignore[arg-type]
    pods.start()
    await asyncio.wait_for(kube.done.wait(), timeout=10)
    await pods.stop()
    return pods, changed


def test_a_list_then_watch_events_keep_slim_copies_by_owner_and_queue_the_owner() -> None:
    async def scenario() -> None:
        kube = ScriptedKube(
            PODS,
            lists=[listing("10", pod("a-1", "a", "9"))],
            watches=[[
                {"type": "ADDED", "object": pod("b-1", "b", "11")},
                {"type": "MODIFIED", "object": pod("a-1", "a", "12", ready=True)},
                {"type": "ADDED", "object": pod("a-2", "a", "13", ready=True)},
                {"type": "DELETED", "object": pod("b-1", "b", "14")},
            ]],
        )  # fmt: skip
        pods, changed = await follow(kube)
        assert pods.synced
        assert kube.list_params == [{"labelSelector": WORKLOAD_SELECTOR}]
        assert kube.watch_params[0]["resourceVersion"] == "10"
        assert kube.watch_params[0]["labelSelector"] == WORKLOAD_SELECTOR
        key_a, key_b = (NS, "model-server", "a"), (NS, "model-server", "b")
        # the list queues its owners; then b-1 created running, not Ready, with nothing wrong is no news (its
        # owner learns nothing it must act on), a-1 turning Ready and a-2 created Ready are, and so is b-1 gone
        assert changed == [key_a, key_a, key_a, key_b]
        assert key_b not in pods
        first, second = pods[key_a]
        assert first["status"]["conditions"] == [{"type": "Ready", "status": "True"}]  # the newest version
        assert first["metadata"] == {"name": "a-1", "generation": None, "deletionTimestamp": None,
                                     "annotations": {"dockyard.dev/template-hash": "h"}}  # fmt: skip
        assert "hostIP" not in first["status"]
        assert first["spec"] == {"nodeName": "node-1"}
        assert second["metadata"]["name"] == "a-2"

    asyncio.run(scenario())


def test_an_object_whose_owner_label_changes_moves_and_both_owners_are_queued() -> None:
    async def scenario() -> None:
        moved = pod("p", "b", "11", uid="u-1")
        kube = ScriptedKube(PODS, lists=[listing("10", pod("p", "a", "9", uid="u-1"))],
                        watches=[[{"type": "MODIFIED", "object": moved}]])  # fmt: skip
        pods, changed = await follow(kube)
        assert changed[-2:] == [(NS, "model-server", "a"), (NS, "model-server", "b")]
        assert list(pods) == [(NS, "model-server", "b")]

    asyncio.run(scenario())


def test_an_expired_watch_lists_again_and_queues_every_owner_before_and_after() -> None:
    async def scenario() -> None:
        expired = {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}
        kube = ScriptedKube(
            PODS,
            lists=[listing("10", pod("a-1", "a", "9")), listing("20", pod("b-1", "b", "19"))],
            watches=[[expired]],
        )
        pods, changed = await follow(kube)
        assert len(kube.list_params) == 2
        assert kube.watch_params[-1]["resourceVersion"] == "20"
        assert list(pods) == [(NS, "model-server", "b")]
        assert set(changed[1:]) == {(NS, "model-server", "a"), (NS, "model-server", "b")}

    asyncio.run(scenario())


def test_a_failed_watch_keeps_the_objects_while_it_lists_again_and_a_refused_list_is_retried() -> None:
    async def scenario() -> None:
        kube = ScriptedKube(
            PODS,
            lists=[listing("10", pod("a-1", "a", "9")), KubeError(403, "Forbidden", "no"), listing("30")],
            watches=[KubeError(503, "Unavailable", "the API server restarts")],
        )
        changed: list[tuple[str, str, str]] = []
        pods = Workloads(kube, PODS, POD_STATUS, changed.append, pod_signal)  # type: ignore[arg-type]
        pods.start()
        while len(kube.list_params) < 2:
            await asyncio.sleep(0.01)
        assert pods.synced  # still: the reconciles wait for nothing and read the last objects
        assert (NS, "model-server", "a") in pods
        await asyncio.wait_for(kube.done.wait(), timeout=10)  # the refused list was retried
        assert len(kube.list_params) == 3
        assert len(pods) == 0
        await pods.stop()

    asyncio.run(scenario())


def failed_mount(pod_name: str, version: str, count: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{pod_name}.1", "namespace": NS, "uid": f"ev-{pod_name}", "resourceVersion": version},
        "involvedObject": {"kind": "Pod", "namespace": NS, "name": pod_name, "uid": f"uid-{pod_name}"},
        "reason": "FailedMount", "count": count,
        "message": 'MountVolume.SetUp failed for volume "creds" : secret "hf-token" not found',
    }  # fmt: skip


def test_failed_mount_events_of_the_workloads_pods_are_watched_and_queue_the_pods_owner() -> None:
    """A Pod that sits on its node without starting needs no periodic look at its Events: the kubelet's
    FailedMount Events (the API server sends only those) queue its owner, each repetition again."""

    async def scenario() -> None:
        changed: list[tuple[str, str, str]] = []
        pods = Workloads(ScriptedKube(PODS, [], []), PODS, POD_STATUS, lambda key: None, pod_signal)  # type: ignore[arg-type]
        pods.replace([pod("a-1", "a", "5")])
        kube = ScriptedKube(
            "/api/v1/events",
            lists=[listing("10", failed_mount("a-1", "8"))],
            watches=[[
                {"type": "MODIFIED", "object": failed_mount("a-1", "11", count=2)},
                {"type": "ADDED", "object": failed_mount("someone-elses", "12")},  # not a workload's Pod
            ]],
        )  # fmt: skip
        mounts = FailedMounts(kube, pods, changed.append)  # type: ignore[arg-type]
        mounts.start()
        await asyncio.wait_for(kube.done.wait(), timeout=10)
        await mounts.stop()
        assert kube.list_params == [{"fieldSelector": FAILED_MOUNT_FIELDS}]
        assert kube.watch_params[0]["fieldSelector"] == FAILED_MOUNT_FIELDS
        key_a = (NS, "model-server", "a")
        assert changed == [key_a, key_a]
        assert mounts.synced
        [event] = mounts.events_of(NS, {"a-1"})
        assert event["count"] == 2  # the newest
        assert mounts.events_of("other", {"a-1"}) == []

    asyncio.run(scenario())
