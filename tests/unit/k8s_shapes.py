"""Small builders of Kubernetes-shaped inputs for the operator's pure functions.

Deployments, Pods and container statuses as plain dicts, the way the API server returns them (only
the fields the operator reads), plus ModelDeployment objects and the node capacity of a device type.
Every builder takes keyword arguments for what a test varies and defaults for the rest.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from dockyard_core.devices import BUILT_IN as DEVICES
from dockyard_core.devices import GPU_RESOURCE
from dockyard_core.resources.v1alpha1 import ModelDeployment, ModelDeploymentSpec, ObjectMeta
from dockyard_operator.scheduling import NodeFit

T0 = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
"""A fixed point in time: tests compute every other time from it."""

NAMESPACE = "team-a"


def at(seconds: float) -> datetime:
    """``seconds`` after :data:`T0`."""
    return T0 + timedelta(seconds=seconds)


def iso(when: datetime) -> str:
    """A timestamp as the API server writes it (RFC 3339, ``Z``)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- ModelDeployment --------------------------------------------------------------------------------


def mdep_spec(**fields: Any) -> ModelDeploymentSpec:
    """A valid ModelDeploymentSpec (camelCase keys, as in a manifest) with ``fields`` overriding."""
    body: dict[str, Any] = {
        "modelRef": "llama-3-8b-instruct",
        "modelType": "openSource",
        "name": "llama-3-8b-instruct",
        "deviceType": "g5.xlarge",
        **fields,
    }
    return ModelDeploymentSpec.model_validate(body)


def model_deployment(
    object_name: str = "llama", *, labels: dict[str, str] | None = None, **fields: Any
) -> ModelDeployment:
    """A ModelDeployment ``object_name`` in :data:`NAMESPACE` whose spec is :func:`mdep_spec` of ``fields``
    (so ``name=`` is the spec's served model name)."""
    return ModelDeployment(
        metadata=ObjectMeta(name=object_name, namespace=NAMESPACE, generation=1, labels=labels),
        spec=mdep_spec(**fields),
    )


HYPER_PARAMETERS: dict[str, Any] = {
    "temperature": 0.7,
    "maxTokens": 512,
    "topP": 0.9,
    "topK": 50,
    "stopSequence": ["</s>", "###"],
}
"""hyperParameters as in docs/examples/modeldeployment.yaml (camelCase)."""


# --- nodes --------------------------------------------------------------------------------------------


def node_fit(device_type: str, *, nodes: int = 2, **largest: float) -> NodeFit:
    """What ``nodes`` nodes of the device type hold: the catalog's full capacity, or ``largest`` overrides
    (keyword ``gpu`` stands for ``nvidia.com/gpu``)."""
    device = DEVICES[device_type]
    capacity: dict[str, float] = {
        "cpu": float(device.vcpu),
        "memory": float(device.memory_gib * 2**30),
        GPU_RESOURCE: float(device.gpus),
    }
    for key, value in largest.items():
        capacity[GPU_RESOURCE if key == "gpu" else key] = value
    return NodeFit(device_type, nodes, capacity)


# --- Deployments ----------------------------------------------------------------------------------------


def condition(kind: str, status: str, reason: str = "", message: str = "", since: datetime = T0) -> dict[str, Any]:
    """One status condition (Deployment or Pod)."""
    return {"type": kind, "status": status, "reason": reason, "message": message, "lastTransitionTime": iso(since)}


def deployment(
    *,
    generation: int = 1,
    observed: int | None = 1,
    replicas: int = 1,
    updated: int | None = None,
    ready: int | None = None,
    available: int | None = None,
    is_available: bool | None = None,
    progressing: tuple[str, str, str] = ("True", "NewReplicaSetAvailable", "ReplicaSet has successfully progressed."),
) -> dict[str, Any]:
    """An apps/v1 Deployment as read back: by default fully rolled out with ``replicas`` ready pods.

    ``updated``/``ready``/``available`` default to ``replicas``; the Available condition defaults to
    whether ``available`` ≥ 1; ``progressing`` is the Progressing condition's (status, reason, message).
    """
    updated = replicas if updated is None else updated
    ready = replicas if ready is None else ready
    available = ready if available is None else available
    is_available = available >= 1 if is_available is None else is_available
    status: dict[str, Any] = {
        "replicas": replicas,
        "updatedReplicas": updated,
        "readyReplicas": ready,
        "availableReplicas": available,
        "conditions": [
            condition(
                "Available",
                "True" if is_available else "False",
                "MinimumReplicasAvailable" if is_available else "MinimumReplicasUnavailable",
            ),
            condition("Progressing", *progressing),
        ],
    }
    if observed is not None:
        status["observedGeneration"] = observed
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "model-llama", "namespace": NAMESPACE, "generation": generation},
        "spec": {"replicas": replicas},
        "status": status,
    }


# --- Pods -------------------------------------------------------------------------------------------------


def container_status(
    *,
    name: str = "engine",
    waiting: str | None = None,
    message: str | None = None,
    restarts: int = 0,
    exit_code: int | None = None,
    exit_reason: str | None = None,
    exit_message: str | None = None,
    ready: bool = False,
) -> dict[str, Any]:
    """A containerStatuses entry: waiting with ``waiting`` as reason, or running; ``exit_code`` adds a
    lastState.terminated."""
    state: dict[str, Any] = (
        {"waiting": {"reason": waiting, **({"message": message} if message else {})}}
        if waiting
        else {"running": {"startedAt": iso(T0)}}
    )
    out: dict[str, Any] = {"name": name, "ready": ready, "restartCount": restarts, "state": state}
    if exit_code is not None:
        terminated: dict[str, Any] = {"exitCode": exit_code}
        if exit_reason:
            terminated["reason"] = exit_reason
        if exit_message:
            terminated["message"] = exit_message
        out["lastState"] = {"terminated": terminated}
    return out


def pod(
    name: str = "model-llama-abc12",
    *,
    node: str | None = "g5-48xlarge-0",
    containers: list[dict[str, Any]] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    deleting: bool = False,
    ready: bool = False,
) -> dict[str, Any]:
    """A Pod as read back; ``node`` None means not scheduled; ``deleting`` sets a deletionTimestamp."""
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if deleting:
        metadata["deletionTimestamp"] = iso(T0)
    spec: dict[str, Any] = {"containers": [{"name": "engine"}]}
    if node:
        spec["nodeName"] = node
    pod_conditions = conditions if conditions is not None else [condition("Ready", "True" if ready else "False")]
    status: dict[str, Any] = {"phase": "Running" if node else "Pending", "conditions": pod_conditions}
    if containers is not None:
        status["containerStatuses"] = containers
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec, "status": status}


def unschedulable_pod(
    *,
    since: datetime = T0,
    message: str = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
    reason: str = "Unschedulable",
    deleting: bool = False,
) -> dict[str, Any]:
    """A Pending pod the scheduler could not place since ``since``."""
    return pod(
        "model-llama-pending",
        node=None,
        conditions=[condition("PodScheduled", "False", reason, message, since)],
        deleting=deleting,
    )
