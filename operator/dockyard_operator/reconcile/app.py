"""What an App's reconcile does (kopf-free): every App has its draft Environment (``<app>-draft``), and an
edited or restored draft reaches the Environments that serve the draft."""

from __future__ import annotations

from typing import Any

from dockyard_core.resources.v1alpha1 import API_VERSION
from dockyard_operator.kube import KubeApi
from dockyard_operator.reconcile.environment import Index, in_namespace
from dockyard_operator.workqueue import Event, Outcome


def draft_environment(name: str, uid: str) -> dict[str, Any]:
    """The App's default environment, named draft, for development and testing."""
    return {
        "apiVersion": API_VERSION,
        "kind": "Environment",
        "metadata": {
            "name": f"{name}-draft",
            "ownerReferences": [
                {"apiVersion": API_VERSION, "kind": "App", "name": name, "uid": uid, "blockOwnerDeletion": True}
            ],
        },
        "spec": {"appRef": name, "displayName": "draft", "description": "Development and testing (the App's draft)"},
    }


async def ensure_draft_environment(kube: KubeApi, namespace: str, name: str, uid: str) -> Outcome:
    """Create the App's draft environment unless it exists; the Event says when it was created."""
    if await kube.create("environments", namespace, draft_environment(name, uid)):
        return Outcome(events=(Event("Normal", "DraftEnvironment", f"created the draft environment {name}-draft"),))
    return Outcome()


def environments_serving_draft(environments: Index, namespace: str, app: str) -> list[tuple[str, dict[str, Any]]]:
    """The Environments of the App that deploy its draft (no ``appVersion``): (name, snapshot)."""
    out = []
    for env_name, env in in_namespace(environments, namespace):
        spec = env.get("spec") or {}
        if spec.get("appRef") == app and not spec.get("appVersion"):
            out.append((env_name, env))
    return out
