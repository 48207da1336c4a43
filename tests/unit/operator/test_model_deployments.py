"""The operator's own watch of ModelDeployments (dockyard_operator.model_deployments) and what its events
do (handlers/deployments.py): every listed object and every watch event reaches the listeners, a new list
reports the objects it no longer holds as deleted, only the namespaces kopf serves count, and kopf itself
no longer watches ModelDeployments."""

from __future__ import annotations

import asyncio
from typing import Any

import kopf

import dockyard_operator.handlers  # noqa: F401  (registers every handler and listener)
from dockyard_operator.context import KindStates
from dockyard_operator.handlers import deployments, environments
from dockyard_operator.handlers.lifecycle import _namespace_filter
from dockyard_operator.model_deployments import ModelDeployments
from tests.support.listwatch import ScriptedKube

PATH = "/apis/dockyard.dev/v1alpha1/modeldeployments"


def mdep(name: str, version: str, *, namespace: str = "team", uid: str | None = None) -> dict[str, Any]:
    # as a list's items may come: without apiVersion and kind
    return {"metadata": {"name": name, "namespace": namespace, "uid": uid or f"uid-{name}",
                         "resourceVersion": version}, "spec": {"modelRef": "m"}}  # fmt: skip


def listing(version: str, *items: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"resourceVersion": version}, "items": list(items)}


async def follow(kube: ScriptedKube, watched: Any = None) -> list[tuple[str, str, str, bool]]:
    seen: list[tuple[str, str, str, bool]] = []

    def changed(body: dict[str, Any], deleted: bool) -> None:
        assert (body["apiVersion"], body["kind"]) == ("dockyard.dev/v1alpha1", "ModelDeployment")
        meta = body["metadata"]
        seen.append((meta["name"], meta["uid"], meta["resourceVersion"], deleted))

    watch = ModelDeployments(kube, changed, watched)  # type: ignore[arg-type]
    watch.start()
    await asyncio.wait_for(kube.done.wait(), timeout=10)
    await watch.stop()
    return seen


def test_every_listed_object_then_every_watch_event_reaches_the_listeners() -> None:
    """After a start the list hands over every existing object, as kopf's initial listing did."""

    async def scenario() -> None:
        kube = ScriptedKube(
            PATH,
            lists=[listing("10", mdep("a", "8"), mdep("b", "9"))],
            watches=[[
                {"type": "ADDED", "object": mdep("c", "11")},
                {"type": "MODIFIED", "object": mdep("a", "12")},
                {"type": "DELETED", "object": mdep("b", "13")},
            ]],
        )  # fmt: skip
        seen = await follow(kube)
        assert seen == [("a", "uid-a", "8", False), ("b", "uid-b", "9", False), ("c", "uid-c", "11", False),
                        ("a", "uid-a", "12", False), ("b", "uid-b", "13", True)]  # fmt: skip
        assert kube.list_params == [None]  # cluster-wide, every ModelDeployment
        assert kube.watch_params[0]["resourceVersion"] == "10"

    asyncio.run(scenario())


def test_a_new_list_reports_what_it_no_longer_holds_as_deleted() -> None:
    """Deleted (or deleted and created again under its name) while the watch was down: forgotten, so no
    queue entry, autoscaler or cache outlives it."""

    async def scenario() -> None:
        expired = {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}
        kube = ScriptedKube(
            PATH,
            lists=[listing("10", mdep("a", "8"), mdep("b", "9"), mdep("c", "7")),
                   listing("20", mdep("a", "15"), mdep("c", "18", uid="uid-c2"))],
            watches=[[expired]],
        )  # fmt: skip
        seen = await follow(kube)
        assert seen[3:] == [("b", "uid-b", "9", True), ("c", "uid-c", "7", True),
                            ("a", "uid-a", "15", False), ("c", "uid-c2", "18", False)]  # fmt: skip

    asyncio.run(scenario())


def test_only_the_namespaces_kopf_serves_count() -> None:
    async def scenario() -> None:
        kube = ScriptedKube(
            PATH,
            lists=[listing("10", mdep("a", "8"), mdep("b", "9", namespace="other"))],
            watches=[[{"type": "ADDED", "object": mdep("c", "11", namespace="other")},
                      {"type": "ADDED", "object": mdep("d", "12", namespace="team-2")}]],
        )  # fmt: skip
        seen = await follow(kube, _namespace_filter(["team*, !other"]))
        assert [name for name, *_ in seen] == ["a", "d"]

    asyncio.run(scenario())
    assert _namespace_filter([]) is None  # cluster-wide: no filter at all


def test_kopf_does_not_watch_model_deployments() -> None:
    """One watch of them, the operator's: a kopf handler of any sort on ModelDeployments would make kopf
    watch them again (its per-event processing was a fifth of the operator's CPU in a rollout of 200)."""
    registry = kopf.get_default_registry()
    res = kopf.Resource("dockyard.dev", "v1alpha1", "modeldeployments", kind="ModelDeployment", preferred=True)
    for part in (registry._watching, registry._changing, registry._spawning, registry._indexing):
        assert not [h.id for h in part.get_all_handlers() if h.selector is not None and h.selector.check(res)]
    listeners = [deployments.model_deployment_event, environments.environment_model_changed]
    assert listeners == deployments.MODEL_DEPLOYMENT_LISTENERS


class FakeQueue:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def observe(self, body: Any) -> None:
        self.calls.append(("observe", body["metadata"]["name"]))

    def forget(self, body: Any) -> None:
        self.calls.append(("forget", body["metadata"]["name"]))


class FakeContext:
    def __init__(self) -> None:
        self.forgotten: list[str] = []
        self.indexes: dict[str, Any] = {"environment_index": {}}  # no Environment uses it
        self.states = KindStates()

    def state(self, kind: Any) -> Any:
        return self.states.of(kind)

    def forget(self, uid: str) -> None:
        self.forgotten.append(uid)


def test_an_event_queues_a_reconcile_and_a_deletion_forgets() -> None:
    """What the listeners do with the watch's events: queue (or forget) the object in the work queue,
    forget its cached state; no autoscaler for an object without autoscaling."""
    queue, ctx = FakeQueue(), FakeContext()
    memo = kopf.Memo(mdeps=queue, ctx=ctx, autoscalers={}, http=None)
    body = {"apiVersion": "dockyard.dev/v1alpha1", "kind": "ModelDeployment", **mdep("a", "8")}
    deployments.model_deployment_changed(memo, body, False)
    deployments.model_deployment_changed(memo, body, True)
    assert queue.calls == [("observe", "a"), ("forget", "a")]
    assert ctx.forgotten == ["uid-a"]
    assert memo.autoscalers == {}
