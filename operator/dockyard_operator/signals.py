"""What of a workload's Deployment or Pod can change what the operator concludes (pure).

A rollout's Deployment and Pods send a dozen watch events (the Deployment created, its controller's
status updates, each Pod created, scheduled, started, Ready), most of which change nothing the reconcile
decides: a job rolling out as it should stays ``RollingOut`` until a Pod turns Ready and the Deployment
reports it. :func:`deployment_signal` and :func:`pod_signal` keep only what can change a verdict, the
status the operator writes, or what it must re-apply; :class:`dockyard_operator.workloads.Workloads`
queues the owner's reconcile when a signal changes, so the reconciles of a rollout do not grow with
the events of its progress, or with the time a model takes to load.

A Pod counts when it is Ready or not, deleted, failed or succeeded, waiting on a node without starting
(unless its FailedMount Events are watched: only they tell a volume that cannot be mounted; unwatched, the
reconcile then looks every observe interval),
refused by the scheduler (its reason and message), and for each container or init container that is
not simply starting or running: its waiting reason, a termination that is not a clean exit of an init
container, restarts. A Deployment counts by its generation and annotations (drift, a new template), its
desired and ready and available replicas, its Available condition and a progress deadline exceeded; of
its annotations only Dockyard's own (``dockyard.dev/``: the template and applied hashes drift is read from),
not the ``deployment.kubernetes.io/revision`` its controller adds to every new Deployment a moment after
its creation.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Any

from dockyard_operator.assess import on_node_not_started

OWN_ANNOTATIONS = "dockyard.dev/"
"""The prefix of the annotations the operator writes and reads on its Deployments."""

STARTING_REASONS = frozenset({"ContainerCreating", "PodInitializing"})
"""Waiting reasons of a container that is simply starting."""


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return next((c for c in status.get("conditions") or [] if c.get("type") == kind), {})


def _container(entry: Mapping[str, Any], init: bool) -> tuple[Any, ...] | None:
    """A container's state when it can change a verdict (None: starting, running or, for an init
    container, done)."""
    state = entry.get("state") or {}
    waiting = (state.get("waiting") or {}).get("reason")
    terminated = state.get("terminated") or {}
    restarts = entry.get("restartCount", 0) or 0
    clean_exit = init and terminated.get("exitCode") == 0
    if not restarts and (waiting is None or waiting in STARTING_REASONS) and (not terminated or clean_exit):
        return None
    return (entry.get("name"), init, waiting, terminated.get("reason"), terminated.get("exitCode"), restarts)


def pod_signal(pod: Mapping[str, Any], *, starting: bool = True) -> Hashable:
    """``starting``: whether a Pod waiting on its node without starting counts (False while the operator
    watches FailedMount Events, which then tell it: :class:`dockyard_operator.workloads.FailedMounts`)."""
    meta, status = pod.get("metadata") or {}, pod.get("status") or {}
    phase = status.get("phase", "Pending")
    scheduled = _condition(status, "PodScheduled")
    refused = (scheduled.get("reason"), scheduled.get("message")) if scheduled.get("status") == "False" else None
    containers = tuple(
        found
        for key, init in (("initContainerStatuses", True), ("containerStatuses", False))
        for entry in status.get(key) or []
        if (found := _container(entry, init)) is not None
    )
    return (
        bool(meta.get("deletionTimestamp")),
        tuple(sorted((meta.get("annotations") or {}).items())),
        _condition(status, "Ready").get("status") == "True",
        phase if phase in ("Failed", "Succeeded") else None,
        starting and on_node_not_started(pod),
        refused,
        containers,
    )


def deployment_signal(deployment: Mapping[str, Any]) -> Hashable:
    meta, spec, status = deployment.get("metadata") or {}, deployment.get("spec") or {}, deployment.get("status") or {}
    progressing = _condition(status, "Progressing").get("reason")
    own = sorted((k, v) for k, v in (meta.get("annotations") or {}).items() if k.startswith(OWN_ANNOTATIONS))
    return (
        meta.get("generation"),
        bool(meta.get("deletionTimestamp")),
        tuple(own),
        spec.get("replicas"),
        status.get("readyReplicas", 0) or 0,
        status.get("availableReplicas", 0) or 0,
        _condition(status, "Available").get("status") == "True",
        progressing == "ProgressDeadlineExceeded",
    )
