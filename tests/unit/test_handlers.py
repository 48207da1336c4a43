"""The operator's kopf wiring: what it asks kopf to keep (or not) per kind."""

from __future__ import annotations

import kopf

import dockyard_operator.handlers as handlers

PLURALS = {"Pod": "pods", "Deployment": "deployments", "Node": "nodes", "ModelDeployment": "modeldeployments",
           "ToolDeployment": "tooldeployments", "Tool": "tools", "Model": "models"}  # fmt: skip


def resource(api_version: str, kind: str) -> kopf.Resource:
    group, _, version = api_version.rpartition("/")
    return kopf.Resource(group, version, PLURALS[kind], kind=kind, preferred=True)


def change_handlers(res: kopf.Resource) -> list[str]:
    registry = kopf.get_default_registry()
    return [h.id for h in registry._changing.get_resource_handlers(res)]


def test_watch_only_kinds_have_no_change_handler() -> None:
    """kopf skips their diff base (a deep copy per watch event): a create/update/resume/delete handler
    on one of them would silently see no changes, so there must be none."""
    for api_version, kind in handlers.WATCH_ONLY:
        assert change_handlers(resource(api_version, kind)) == [], kind


def test_models_keep_their_diff_base() -> None:
    model = resource("dockyard.dev/v1alpha1", "Model")
    assert change_handlers(model)  # the hub model's create/resume handler
    body = kopf.Body({"apiVersion": "dockyard.dev/v1alpha1", "kind": "Model", "metadata": {"name": "m"},
                      "spec": {"source": {"hub": {"id": "x"}}}})  # fmt: skip
    storage = handlers.DiffBaseOfChangeHandled(prefix="dockyard.dev", key="last-handled-configuration")
    assert storage.build(body=body) == {"spec": {"source": {"hub": {"id": "x"}}}}


def test_watch_only_kinds_get_an_empty_diff_base() -> None:
    body = kopf.Body({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {"nodeName": "n"}})
    storage = handlers.DiffBaseOfChangeHandled(prefix="dockyard.dev", key="last-handled-configuration")
    assert storage.build(body=body) == {}


def test_no_handler_needs_a_finalizer() -> None:
    """No timers or daemons (kopf adds a finalizer for them), so deleting works without the operator."""
    registry = kopf.get_default_registry()
    assert not registry._spawning.get_all_handlers()
    for kind in ("ModelDeployment", "ToolDeployment"):
        assert not any(h.requires_finalizer for h in registry._changing.get_resource_handlers(
            resource("dockyard.dev/v1alpha1", kind)))  # fmt: skip
