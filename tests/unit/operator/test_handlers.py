"""The operator's kopf wiring: what it asks kopf to keep (or not) per kind."""

from __future__ import annotations

from typing import Any

import kopf

import dockyard_operator.handlers  # noqa: F401  (registers every handler)
from dockyard_operator.handlers import lifecycle

PLURALS = {"Pod": "pods", "Deployment": "deployments", "Node": "nodes", "ModelDeployment": "modeldeployments",
           "ToolDeployment": "tooldeployments", "Tool": "tools", "Model": "models"}  # fmt: skip


def resource(api_version: str, kind: str) -> kopf.Resource:
    group, _, version = api_version.rpartition("/")
    return kopf.Resource(group, version, PLURALS[kind], kind=kind, preferred=True)


def handlers_of(part: Any, res: kopf.Resource) -> list[Any]:
    """The handlers of one part of kopf's registry (changing, spawning, ...) that match a resource."""
    return [h for h in part.get_all_handlers() if h.selector is not None and h.selector.check(res)]


def change_handlers(res: kopf.Resource) -> list[str]:
    return [h.id for h in handlers_of(kopf.get_default_registry()._changing, res)]


def test_watch_only_kinds_have_no_change_handler() -> None:
    """kopf skips their diff base (a deep copy per watch event): a create/update/resume/delete handler
    on one of them would silently see no changes, so there must be none."""
    for api_version, kind in lifecycle.WATCH_ONLY:
        assert change_handlers(resource(api_version, kind)) == [], kind


def test_models_keep_their_diff_base() -> None:
    model = resource("dockyard.dev/v1alpha1", "Model")
    assert change_handlers(model)  # the hub model's create/resume handler
    body = kopf.Body({"apiVersion": "dockyard.dev/v1alpha1", "kind": "Model", "metadata": {"name": "m"},
                      "spec": {"source": {"hub": {"id": "x"}}}})  # fmt: skip
    storage = lifecycle.DiffBaseOfChangeHandled(prefix="dockyard.dev", key="last-handled-configuration")
    assert storage.build(body=body) == {"spec": {"source": {"hub": {"id": "x"}}}}


def test_watch_only_kinds_get_an_empty_diff_base() -> None:
    body = kopf.Body({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}, "spec": {"podCIDR": "x"}})
    storage = lifecycle.DiffBaseOfChangeHandled(prefix="dockyard.dev", key="last-handled-configuration")
    assert storage.build(body=body) == {}


def test_deployments_need_no_finalizer() -> None:
    """No timer, daemon or deletion handler for ModelDeployments and ToolDeployments (kopf adds a
    finalizer for those), so deleting one works while the operator is down."""
    registry = kopf.get_default_registry()
    for kind in ("ModelDeployment", "ToolDeployment"):
        res = resource("dockyard.dev/v1alpha1", kind)
        assert not [h.id for h in handlers_of(registry._spawning, res)], kind
        assert not any(h.requires_finalizer for h in handlers_of(registry._changing, res)), kind
