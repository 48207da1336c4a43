"""Whether and why the pods of a workload cannot be scheduled (pure): what the nodes of the requested
device type can hold (:class:`NodeFit`, :func:`never_fits`), and the scheduler's FailedScheduling
message taken apart (:class:`SchedulerReasons`, :func:`not_capacity`: a cause that waiting for capacity
does not fix). :mod:`dockyard_operator.assess` turns these into a job's verdict."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dockyard_core.devices import DEVICE_TYPES

TRANSIENT_TAINTS = (
    "node.kubernetes.io/not-ready",
    "node.kubernetes.io/unreachable",
    "node.kubernetes.io/unschedulable",
    "node.kubernetes.io/memory-pressure",
    "node.kubernetes.io/disk-pressure",
    "node.kubernetes.io/pid-pressure",
    "node.kubernetes.io/network-unavailable",
    "node.cloudprovider.kubernetes.io/uninitialized",
    "ToBeDeletedByClusterAutoscaler",
)
"""Taints a node has for a while (starting, draining, under pressure): waiting may help."""
MISSING_CLAIM = re.compile(r'persistentvolumeclaim "([^"]+)" not found')
"""A pod's claim that does not exist (in the scheduler's message, or a mount's failure)."""
_ITEM = re.compile(r"^(\d+) (.*)$")
_TAINT = re.compile(r"untolerated taint(?:\(s\))? \{([^:}]+)")


@dataclass(frozen=True)
class NodeFit:
    """What the nodes of the requested device type can hold, from the node index."""

    device_type: str
    nodes: int
    """Nodes of that type in the cluster (any state)."""
    largest: Mapping[str, float]
    """Per resource, the largest allocatable amount of any one such node."""


def parse_quantity(value: str | int | float) -> float:
    """A Kubernetes quantity (``500m``, ``16Gi``, ``4``) as a float in base units."""
    text = str(value).strip()
    suffixes = {
        "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60,
        "n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    }  # fmt: skip
    for suffix in sorted(suffixes, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * suffixes[suffix]
    return float(text)


def _shown(resource: str, amount: float) -> str:
    if resource == "memory":
        return f"{amount / 2**30:g}Gi"
    if resource == "cpu" and amount != int(amount):
        return f"{amount * 1000:g}m"
    return f"{amount:g}"


def never_fits(requests: Mapping[str, str], fit: NodeFit) -> str | None:
    """Why no node of the device type can ever hold one pod (even empty), or None when one can.

    With no node of the type at all the answer is None: a cluster autoscaler may still add one, so
    the unschedulable deadline decides.
    """
    if fit.nodes == 0:
        return None
    short = [
        f"{name} {value} (largest allocatable {_shown(name, fit.largest.get(name, 0))})"
        for name, value in requests.items()
        if parse_quantity(value) > fit.largest.get(name, 0)
    ]
    if not short:
        return None
    return f"no {fit.device_type} node can ever hold a replica: it requests " + ", ".join(short)


def unschedulable(pods: Sequence[Mapping[str, Any]]) -> tuple[datetime | None, str] | None:
    for pod in pods:
        if pod.get("spec", {}).get("nodeName"):
            continue
        for cond in pod.get("status", {}).get("conditions") or []:
            if cond.get("type") == "PodScheduled" and cond.get("status") == "False":
                if cond.get("reason") != "Unschedulable":
                    continue
                since = cond.get("lastTransitionTime")
                when = datetime.fromisoformat(since.replace("Z", "+00:00")) if since else None
                return when, cond.get("message") or "the scheduler found no node for the pod"
    return None


@dataclass(frozen=True)
class SchedulerReasons:
    """The scheduler's FailedScheduling message, taken apart: ``0/12 nodes are available: 2 Insufficient
    nvidia.com/gpu, 10 node(s) didn't match Pod's node affinity/selector. preemption: ...``."""

    total: int | None
    per_node: dict[str, int]
    """Reason -> number of nodes it excluded."""
    pod_level: list[str]
    """Reasons without a node count (e.g. ``persistentvolumeclaim "x" not found``)."""

    @classmethod
    def parse(cls, message: str) -> SchedulerReasons:
        head = message.split(" preemption:", 1)[0].strip().rstrip(".")
        total = None
        found = re.match(r"^0/(\d+) nodes are available:?\s*", head)
        if found:
            total = int(found.group(1))
            head = head[found.end() :]
        per_node: dict[str, int] = {}
        pod_level: list[str] = []
        for item in (i.strip().rstrip(".") for i in head.split(", ")):
            if not item:
                continue
            counted = _ITEM.match(item)
            if counted:
                per_node[counted.group(2)] = per_node.get(counted.group(2), 0) + int(counted.group(1))
            else:
                pod_level.append(item)
        return cls(total, per_node, pod_level)

    def count(self, predicate: Any) -> int:
        return sum(n for reason, n in self.per_node.items() if predicate(reason))


def _selector_mismatch(reason: str) -> bool:
    return "didn't match Pod's node affinity/selector" in reason or "didn't match Pod's node affinity" in reason


def _permanent_taint(reason: str) -> str | None:
    taint = _TAINT.search(reason)
    if taint is None:
        return None
    key = taint.group(1).strip()
    return None if key in TRANSIENT_TAINTS else key


def not_capacity(message: str, fit: NodeFit, *, node_autoscaling: bool) -> tuple[str, str] | None:
    """(reason, message) when the scheduler's message shows a cause that waiting for free capacity does
    not fix, naming it: a missing claim, no node matching the node selector (unless nodes can be added),
    every node of the device type tainted against the pod. None when capacity (or something transient:
    unbound claims, cordoned or not-ready nodes) keeps the pod pending."""
    if claim := MISSING_CLAIM.search(message):
        return (
            "MissingVolumeClaim",
            f'the pod mounts the PersistentVolumeClaim "{claim.group(1)}", which does not exist in its namespace',
        )
    reasons = SchedulerReasons.parse(message)
    if reasons.total is None:
        return None
    mismatched = reasons.count(_selector_mismatch)
    candidates = reasons.total - mismatched
    if candidates <= 0:
        if node_autoscaling:
            return None
        if fit.device_type in DEVICE_TYPES and fit.nodes == 0:
            return (
                "NoMatchingNode",
                f"no node matches the pod's node selector (node.kubernetes.io/instance-type={fit.device_type}): "
                f"the cluster has no {fit.device_type} node pool",
            )
        return (
            "NoMatchingNode",
            "no node matches the pod's node selector or affinity; the scheduler said: "
            + message.split(" preemption:", 1)[0],
        )
    taints = {key: n for reason, n in reasons.per_node.items() if (key := _permanent_taint(reason))}
    if taints and sum(taints.values()) >= candidates:
        shown = ", ".join(sorted(taints))
        return (
            "UntoleratedTaint",
            f"every {fit.device_type} node has a taint the pod does not tolerate ({shown}); the scheduler said: "
            f"{message.split(' preemption:', 1)[0]}",
        )
    return None


def capacity_short(message: str) -> list[str]:
    """The resources the scheduler found short (``Insufficient nvidia.com/gpu`` -> ``nvidia.com/gpu``)."""
    return sorted({m.group(1).rstrip(".") for m in re.finditer(r"Insufficient ([\w./-]+)", message)})
