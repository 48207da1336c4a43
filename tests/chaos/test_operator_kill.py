"""The operator SIGKILLed in the middle of an environment deploy and of a rollback, round after round:
after each restart the history has exactly one Active entry, of the version asked for last, no entry
twice, and the environment serves that version (its tool deployments are that version's)."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kubernetes import client

from dockyard_core.resources.v1alpha1 import DEPLOY_REQUEST_ANNOTATION
from dockyard_core.resources.v1alpha1.tool import tool_deployment_name
from tests.chaos.conftest import Figures, OperatorProcess
from tests.support.dockyard import create, get, hub_model, model_deployment, patch
from tests.support.waiting import wait_for

ROUNDS = 6
KILL_AFTER = (0.0, 0.3, 1.0)
"""Seconds between the change and the SIGKILL, cycled: before the operator sees the change, while it
reconciles, after it recorded the history (and is deploying the tools)."""


def tool(api: client.ApiClient, namespace: str, version: str) -> None:
    spec = {"name": "weather", "version": version,
            "container": {"image": f"registry.example.com/tools/weather:{version}", "port": 8080}}  # fmt: skip
    create(api, namespace, "tools", "Tool", f"weather-{version}", spec)


def app_version(api: client.ApiClient, namespace: str, version: str) -> None:
    spec = {"appRef": "bot", "version": version, "displayName": f"v{version}",
            "agents": [{"name": "helper", "version": "1.0.0", "model": "llama"}],  # a version needs one, with a model
            "toolVersions": [{"name": "weather", "version": version}]}  # fmt: skip
    create(api, namespace, "appversions", "AppVersion", f"bot-{version}", spec)


def history(api: client.ApiClient, namespace: str) -> list[dict[str, Any]]:
    return list((get(api, namespace, "environments", "bot-production").get("status") or {}).get("history") or [])


def set_version(api: client.ApiClient, namespace: str, version: str, action: str) -> None:
    """What the facade's deploy and rollback do (acting as the user): the version and a deploy request."""
    body = {"metadata": {"annotations": {DEPLOY_REQUEST_ANNOTATION: f"{action} {uuid.uuid4().hex}"}},
            "spec": {"appVersion": version}}  # fmt: skip
    patch(api, namespace, "environments", "bot-production", body)


def tool_refs(api: client.ApiClient, namespace: str) -> list[str]:
    found = client.CustomObjectsApi(api).list_namespaced_custom_object(
        "dockyard.dev",
        "v1alpha1",
        namespace,
        "tooldeployments",
        label_selector="dockyard.dev/environment=bot-production",
    )
    return sorted(t["spec"]["toolRef"] for t in found["items"] if not t["metadata"].get("deletionTimestamp"))


def settled(api: client.ApiClient, namespace: str, version: str, count: int) -> bool:
    entries = history(api, namespace)
    status = get(api, namespace, "environments", "bot-production").get("status") or {}
    return (
        len(entries) == count
        and entries[0]["version"] == version
        and status.get("activeVersion") == version
        and status.get("phase") == "Active"
        and tool_refs(api, namespace) == [f"weather-{version}"]
    )


@pytest.mark.timeout(900)  # six operator restarts
def test_sigkill_mid_deploy_and_mid_rollback_leaves_one_active_entry_of_the_right_version(
    api: client.ApiClient, namespace: str, operator_process: OperatorProcess, figures: Figures
) -> None:
    operator_process.start()
    for version in ("1.0.0", "1.1.0"):
        tool(api, namespace, version)
    create(api, namespace, "apps", "App", "bot", {"toolVersions": [{"name": "weather", "version": "1.0.0"}]})
    hub_model(api, namespace, "llama")
    model_deployment(api, namespace, "llama")
    for version in ("1.0.0", "1.1.0"):
        app_version(api, namespace, version)
    create(api, namespace, "environments", "Environment", "bot-production", {"appRef": "bot", "appVersion": "1.0.0"})
    wait_for(lambda: settled(api, namespace, "1.0.0", 1), timeout=90, what="1.0.0 deployed and healthy")

    expected = 1
    version = "1.0.0"
    for round_ in range(ROUNDS):
        # even rounds deploy 1.1.0, odd rounds roll back to 1.0.0 (a previous working version)
        version, action = ("1.1.0", "Deploy") if round_ % 2 == 0 else ("1.0.0", "Rollback")
        set_version(api, namespace, version, action)
        figures.count("operations_tried")
        time.sleep(KILL_AFTER[round_ % len(KILL_AFTER)])
        operator_process.kill()
        figures.count("operator_sigkills")
        # while no operator answers, the webhooks refuse (fail closed): a Tool in use cannot go unchecked
        refused = _delete_tool_refused(api, namespace, "weather-1.0.0")
        figures.count("deletes_refused_while_down" if refused else "deletes_let_through_while_down")
        assert refused, "a Tool delete went through while the operator was down"
        operator_process.start()
        expected += 1
        started = time.monotonic()
        wait_for(lambda v=version, n=expected: settled(api, namespace, v, n), timeout=120,
                 what=f"round {round_}: {version} Active after the restart")  # fmt: skip
        figures.count("recovered")
        figures.numbers.setdefault("recovery_seconds", []).append(round(time.monotonic() - started, 1))
        entries = history(api, namespace)
        assert [e["status"] for e in entries].count("Active") == 1, entries
        assert entries[0]["action"] == action, entries[0]
        assert entries[0]["healthy"] is True, entries[0]
        stamps = [e["deployedAt"] for e in entries]
        assert len(stamps) == len(set(stamps)), f"an entry recorded twice: {entries}"

    figures.add("lost", figures.numbers["operations_tried"] - figures.numbers["recovered"])
    figures.add("history_entries", len(history(api, namespace)))
    assert figures.numbers["lost"] == 0
    deployments = client.AppsV1Api(api).list_namespaced_deployment(namespace).items
    names = [d.metadata.name for d in deployments]
    assert len(names) == len(set(names))
    # every Deployment has its owner: a ToolDeployment, or the ModelDeployment the versions' agent calls
    owners = {t["metadata"]["uid"] for plural in ("tooldeployments", "modeldeployments")
              for t in client.CustomObjectsApi(api).list_namespaced_custom_object(
                  "dockyard.dev", "v1alpha1", namespace, plural)["items"]}  # fmt: skip
    orphans = [d.metadata.name for d in deployments if not {o.uid for o in d.metadata.owner_references or []} & owners]
    assert orphans == [], "Deployments whose ToolDeployment (or ModelDeployment) is gone"
    assert tool_deployment_name("bot-production", "weather", version) in {
        t["metadata"]["name"] for t in client.CustomObjectsApi(api).list_namespaced_custom_object(
            "dockyard.dev", "v1alpha1", namespace, "tooldeployments")["items"]
    }  # fmt: skip


def _delete_tool_refused(api: client.ApiClient, namespace: str, name: str) -> bool:
    """A real delete of a Tool the draft uses: refused by the API server because no webhook answers."""
    try:
        client.CustomObjectsApi(api).delete_namespaced_custom_object(
            "dockyard.dev", "v1alpha1", namespace, "tools", name
        )
    except client.ApiException as exc:
        return "failed calling webhook" in (exc.body or "")
    return False
