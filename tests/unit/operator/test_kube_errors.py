"""The operator's KubeApi maps the API server's answers a reconcile acts on, once: 409 on a merge patch is
Conflict, 404 Gone, 401/403 Denied (still KubeErrors); other failures stay as they are."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import Any

import pytest

from dockyard_core.kubeclient import KubeError
from dockyard_operator.kube import Conflict, Denied, Gone, KubeApi


class Refusing:
    """An AsyncKube stand-in whose every call is answered with one status."""

    def __init__(self, status: int) -> None:
        self.status = status

    def _fail(self, *_: Any, **__: Any) -> Any:
        raise KubeError(self.status, "Reason", f"answered {self.status}")

    items = apply = merge = request = _fail


def run(call: Awaitable[Any]) -> Any:
    async def go() -> Any:
        return await call

    return asyncio.run(go())


DEPLOYMENT = {"kind": "Deployment", "metadata": {"namespace": "n", "name": "d"}}


@pytest.mark.parametrize(("status", "kind"), [(404, Gone), (401, Denied), (403, Denied)])
def test_not_found_and_refused_are_typed_on_every_call(status: int, kind: type[KubeError]) -> None:
    kube = KubeApi(Refusing(status))  # type: ignore[arg-type]
    with pytest.raises(kind) as listed:
        run(kube.list_objects("events", "n"))
    assert listed.value.status == status
    assert isinstance(listed.value, KubeError)
    with pytest.raises(kind):
        run(kube.apply(DEPLOYMENT))
    with pytest.raises(kind):
        run(kube.patch_status("modeldeployments", "n", "m", {"phase": "x"}))
    with pytest.raises(kind):
        run(kube.create("secrets", "n", {"metadata": {"name": "s"}}))


def test_a_conflict_on_a_merge_patch_is_conflict_and_on_create_false() -> None:
    kube = KubeApi(Refusing(409))  # type: ignore[arg-type]
    with pytest.raises(Conflict):
        run(kube.patch_object("modeldeployments", "n", "m", {"metadata": {}}, "7"))
    assert run(kube.create("secrets", "n", {"metadata": {"name": "s"}})) is False


def test_other_failures_stay_what_they_are() -> None:
    kube = KubeApi(Refusing(500))  # type: ignore[arg-type]
    with pytest.raises(KubeError) as failed:
        run(kube.list_objects("events", "n"))
    assert type(failed.value) is KubeError
    assert failed.value.status == 500
