"""The facade's watch-fed object cache: list, then follow ADDED / MODIFIED / DELETED; list again when the
watch's version expires (410) or the connection fails; give up (every lookup live) on 403; a live lookup
answers None for a missing object and a domain error for a failure."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from dockyard_api.cache import Informer
from dockyard_core import kubepaths
from dockyard_core.errors import KubeUnavailableError
from dockyard_core.kubeclient import KubeError
from tests.support.listwatch import ScriptedKube

MODELS = kubepaths.collection("models", None)


def model(namespace: str, name: str, phase: str | None, version: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "resourceVersion": version, "managedFields": [{}]},
        "status": {"phase": phase} if phase else {},
    }


async def follow(kube: ScriptedKube) -> Informer:
    cache = Informer(kube, "models")  # type: ignore[arg-type]
    cache.start()
    await asyncio.wait_for(kube.done.wait(), timeout=10)
    return cache


def test_list_then_follow_the_watch() -> None:
    async def scenario() -> None:
        kube = ScriptedKube(
            MODELS,
            lists=[{"metadata": {"resourceVersion": "10"}, "items": [model("a", "m1", "Importing", "5")]}],
            watches=[
                [
                    {"type": "MODIFIED", "object": model("a", "m1", "ReadyToDeploy", "11")},
                    {"type": "ADDED", "object": model("b", "m2", None, "12")},
                    {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "13"}}},
                ],
                [{"type": "DELETED", "object": model("b", "m2", None, "14")}],
            ],
        )
        cache = await follow(kube)
        assert cache.synced
        m1 = cache.cached("a", "m1")
        assert m1 is not None
        assert m1["status"]["phase"] == "ReadyToDeploy"
        assert "managedFields" not in m1["metadata"]
        assert cache.cached("b", "m2") is None
        assert cache.cached("a", "nope") is None
        # the watch resumes (after the server ends it) from the last version seen
        assert [p["resourceVersion"] for p in kube.watch_params] == ["10", "13", "14"]
        assert kube.list_calls == 1
        await cache.stop()

    asyncio.run(scenario())


def test_an_expired_watch_lists_again() -> None:
    async def scenario() -> None:
        expired = {"type": "ERROR", "object": {"code": 410, "reason": "Expired", "message": "too old"}}
        kube = ScriptedKube(
            MODELS,
            lists=[
                {"metadata": {"resourceVersion": "1"}, "items": [model("a", "gone", "ReadyToDeploy", "1")]},
                {"metadata": {"resourceVersion": "50"}, "items": [model("a", "new", "ReadyToDeploy", "49")]},
            ],
            watches=[[expired]],
        )
        cache = await follow(kube)
        assert kube.list_calls == 2
        assert cache.cached("a", "gone") is None  # the second list replaced everything
        assert cache.cached("a", "new") is not None
        await cache.stop()

    asyncio.run(scenario())


@pytest.mark.parametrize("failure", [KubeError(502, "Unreachable", "down"), ValueError("garbled event")])
def test_a_failed_watch_backs_off_and_lists_again(failure: Exception) -> None:
    async def scenario() -> None:
        kube = ScriptedKube(
            MODELS,
            lists=[
                {"metadata": {"resourceVersion": "1"}, "items": []},
                {"metadata": {"resourceVersion": "2"}, "items": [model("a", "m", "ReadyToDeploy", "2")]},
            ],
            watches=[failure],
        )
        cache = await follow(kube)
        assert kube.list_calls == 2
        assert cache.cached("a", "m") is not None
        await cache.stop()

    asyncio.run(scenario())


def test_without_permission_to_list_every_lookup_is_live() -> None:
    async def scenario() -> None:
        kube = ScriptedKube(
            MODELS, lists=[KubeError(403, "Forbidden", "cannot list models at the cluster scope")], watches=[]
        )
        cache = Informer(kube, "models")  # type: ignore[arg-type]
        cache.start()
        await asyncio.sleep(0.1)
        assert not cache.synced
        assert cache.cached("a", "m") is None
        assert kube.list_calls == 1
        await cache.stop()

    asyncio.run(scenario())


class LiveKube:
    """Answers single GETs and label-selected lists by path (what an unsynced informer asks)."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.calls: list[tuple[str, dict[str, str] | None]] = []

    async def request(self, method: str, path: str, params: dict[str, str] | None = None, **_: Any) -> dict[str, Any]:
        assert method == "GET"
        self.calls.append((path, params))
        answer = self.answers[path]
        if isinstance(answer, Exception):
            raise answer
        result: dict[str, Any] = answer
        return result


def test_an_unsynced_informer_reads_the_api_server_with_domain_errors() -> None:
    async def scenario() -> None:
        models_in_a, pods = "/apis/dockyard.dev/v1alpha1/namespaces/a/models", "/api/v1/namespaces/a/pods"
        kube = LiveKube(
            {
                f"{models_in_a}/m": model("a", "m", "ReadyToDeploy", "1"),
                f"{models_in_a}/gone": KubeError(404, "NotFound", "not found"),
                f"{models_in_a}/down": KubeError(503, "Unreachable", "down"),
                pods: {"items": [{"metadata": {"namespace": "a", "name": "p"}}]},
            }
        )
        models = Informer(kube, "models")  # type: ignore[arg-type]
        found = await models.get("a", "m")
        assert found is not None
        assert found["status"]["phase"] == "ReadyToDeploy"
        assert await models.get("a", "gone") is None
        with pytest.raises(KubeUnavailableError):
            await models.get("a", "down")
        by_label = Informer(kube, "pods", index_label="dockyard.dev/model-deployment")  # type: ignore[arg-type]
        assert [p["metadata"]["name"] for p in await by_label.indexed("a", "tiny")] == ["p"]
        assert kube.calls[-1] == (pods, {"labelSelector": "dockyard.dev/model-deployment=tiny"})

    asyncio.run(scenario())


def test_a_cached_object_is_validated_once_per_version(monkeypatch: pytest.MonkeyPatch) -> None:
    """The deploy call reads its Model as a resource model from the cache: one validation per version of
    the object, a new one when the watch brings a change, none after the object is gone."""
    from dockyard_core.resources.v1alpha1 import Model

    cache = Informer(ScriptedKube(MODELS, [], []), "models")  # type: ignore[arg-type]
    first = {
        **model("team", "llama", "ReadyToDeploy", "1"),
        "spec": {"modelType": "openSource", "source": {"hub": {"id": "meta-llama/Llama-3.1-8B"}}},
    }
    cache.replace([first])
    validated: list[str] = []
    validate = Model.model_validate

    def counting(obj: Any, *args: Any, **kwargs: Any) -> Model:
        validated.append(obj["metadata"]["resourceVersion"])
        return validate(obj, *args, **kwargs)

    monkeypatch.setattr(Model, "model_validate", counting)
    one = cache.cached_as("team", "llama", Model)
    assert one is not None
    assert one.status.phase == "ReadyToDeploy"
    assert cache.cached_as("team", "llama", Model) is one
    assert validated == ["1"]
    changed = {
        **model("team", "llama", "Failed", "2"),
        "spec": {"modelType": "openSource", "source": {"hub": {"id": "meta-llama/Llama-3.1-8B"}}},
    }
    cache.put(changed)
    two = cache.cached_as("team", "llama", Model)
    assert two is not None
    assert two.status.phase == "Failed"
    assert validated == ["1", "2"]
    cache.drop(changed)
    assert cache.cached_as("team", "llama", Model) is None
    assert cache.cached_as("team", "other", Model) is None
