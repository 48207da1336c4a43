"""The builder of a ToolDeployment's workload: the Deployment and Service of a container-image tool."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dockyard_core.resources.v1alpha1 import Tool, ToolDeployment
from dockyard_operator.builders.common import TOOL_DEPLOYMENT_LABEL, child_name, common_labels, served_by, user_labels


@dataclass(frozen=True)
class ToolWorkload:
    deployment: dict[str, Any]
    service: dict[str, Any]
    template_hash: str

    def objects(self) -> list[dict[str, Any]]:
        """In apply order: the Deployment last, so its applied-hash annotation vouches for the set."""
        return [self.service, self.deployment]


def tool_selector_labels(tdep_name: str) -> dict[str, str]:
    return {TOOL_DEPLOYMENT_LABEL: tdep_name}


def tool_workload(tdep: ToolDeployment, tool: Tool, *, progress_deadline_seconds: int) -> ToolWorkload:
    """Deployment and Service of a container-image tool."""
    container_spec = tool.spec.container
    assert container_spec is not None, "only image tools have a workload"
    name = tdep.metadata.name or ""
    namespace = tdep.metadata.namespace
    resource_name = child_name("tool", name)
    labels = {**common_labels(name, "tool"), **tool_selector_labels(name)}
    pod_labels = {**user_labels(tdep.metadata.labels), **labels, "dockyard.dev/tool": tool.spec.name}
    template: dict[str, Any] = {
        "metadata": {"labels": pod_labels, "annotations": {}},
        "spec": {
            "containers": [
                {
                    "name": "tool",
                    "image": container_spec.image,
                    "ports": [{"name": "http", "containerPort": container_spec.port, "protocol": "TCP"}],
                    "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 5},
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                    "securityContext": {"allowPrivilegeEscalation": False},
                }
            ],
        },
    }
    deployment, service, template_hash = served_by(
        resource_name,
        namespace,
        labels,
        tool_selector_labels(name),
        template,
        replicas=tdep.spec.replicas,
        service_port=80,
        progress_deadline_seconds=progress_deadline_seconds,
    )
    return ToolWorkload(deployment, service, template_hash)
