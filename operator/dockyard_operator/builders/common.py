"""What the builders of both kinds share: the labels and annotations of every child, child names, the
template hash, and the Deployment and Service a workload is served by."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

from dockyard_core.resources.v1alpha1 import DOCK_STATUS_ID_LABEL

MANAGED_BY = "dockyard"
MODEL_DEPLOYMENT_LABEL = "dockyard.dev/model-deployment"
TOOL_DEPLOYMENT_LABEL = "dockyard.dev/tool-deployment"
COMPONENT_LABEL = "app.kubernetes.io/component"
RESERVED_LABEL_PREFIXES = (
    "app.kubernetes.io/",
    "dockyard.dev/model-deployment",
    "dockyard.dev/tool-deployment",
    "dockyard.dev/local-engine",
)
TEMPLATE_HASH_ANNOTATION = "dockyard.dev/template-hash"
"""On the Deployment and its pods: the hash of the pod template a job rolls out."""
LOCAL_ENGINE_LABEL = "dockyard.dev/local-engine"
"""On model pods (and readiness gate) when the local control plane runs their engines on the host."""
APPLIED_HASH_ANNOTATION = "dockyard.dev/applied-hash"
"""On every child: the hash of all children as last applied (skip the apply when unchanged)."""


def child_name(prefix: str, name: str) -> str:
    """``<prefix>-<name>`` as an RFC 1035 label (what Service names must be): characters other than
    ``[a-z0-9-]`` become ``-`` and a hash of the original keeps different names different."""
    full = f"{prefix}-{name}"
    safe = re.sub(r"[^a-z0-9-]", "-", full)
    if safe == full and len(full) <= 63:
        return full
    digest = hashlib.sha256(name.encode()).hexdigest()[:8]
    return f"{safe[:54].rstrip('-')}-{digest}"


def user_labels(labels: dict[str, str] | None) -> dict[str, str]:
    """The resource's own labels that its pods inherit (cost allocation, policies, simulations)."""
    return {
        k: v
        for k, v in (labels or {}).items()
        if k != DOCK_STATUS_ID_LABEL and not k.startswith(RESERVED_LABEL_PREFIXES)
    }


def common_labels(name: str, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "dockyard-model" if component == "model-server" else "dockyard-tool",
        "app.kubernetes.io/instance": name,
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": "dockyard",
        COMPONENT_LABEL: component,
    }


def hash_of(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()).hexdigest()[:16]


def served_by(
    name: str,
    namespace: str | None,
    labels: dict[str, str],
    selector: dict[str, str],
    template: dict[str, Any],
    *,
    replicas: int,
    service_port: int,
    progress_deadline_seconds: int,
    strategy: dict[str, Any] | None = None,
) -> tuple[dict[str, Any], dict[str, Any], str]:
    """The Deployment running ``template`` (stamped with its hash) and the Service in front of its
    ``http`` port; returns both and the template hash."""
    template_hash = hash_of(template)
    template["metadata"]["annotations"][TEMPLATE_HASH_ANNOTATION] = template_hash
    spec: dict[str, Any] = {
        "replicas": replicas,
        "selector": {"matchLabels": selector},
        "progressDeadlineSeconds": progress_deadline_seconds,
        "template": template,
    }
    if strategy is not None:
        spec["strategy"] = strategy
    metadata = {"name": name, "namespace": namespace, "labels": labels}
    deployment = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {**metadata, "annotations": {TEMPLATE_HASH_ANNOTATION: template_hash}},
        "spec": spec,
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata,
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": service_port, "targetPort": "http", "protocol": "TCP"}],
        },
    }
    return deployment, service, template_hash


def endpoint_of(service: dict[str, Any]) -> str:
    """The in-cluster base URL of a Service (the port left out when it is HTTP's 80)."""
    meta = service["metadata"]
    port = service["spec"]["ports"][0]["port"]
    suffix = "" if port == 80 else f":{port}"
    return f"http://{meta['name']}.{meta['namespace']}.svc{suffix}"
