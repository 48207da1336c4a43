"""Pure builders for the fake GPU node pools of the local control plane.

Every node is labelled like an EKS GPU node (``node.kubernetes.io/instance-type``, NVIDIA's GPU
feature-discovery labels), carries the device catalog's vCPU, memory and ``nvidia.com/gpu``
capacity, and the usual ``nvidia.com/gpu=present:NoSchedule`` taint. kwok manages them (annotation
``kwok.x-k8s.io/node=fake``), so the real kube-scheduler places pods on them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dockyard_core.devices import (
    DEVICE_TYPES,
    GPU_RESOURCE,
    GPU_TAINT_EFFECT,
    GPU_TAINT_KEY,
    GPU_TAINT_VALUE,
    INSTANCE_TYPE_LABEL,
    from_environment,
)

POOL_LABEL = "dockyard.dev/node-pool"
"""Marks the nodes this package created, so that re-sizing a pool can find and remove extras."""

PODS_PER_NODE = 110


def node_name(device_type: str, index: int) -> str:
    """``gpu-g5-12xlarge-0``: a DNS-1123 name derived from the device type."""
    return f"gpu-{device_type.replace('.', '-')}-{index}"


def _fake_node(
    name: str, instance_type: str, pool: str, resources: dict[str, str], labels: dict[str, str], taints: list[Any]
) -> dict[str, Any]:
    """A node kwok manages, with ``resources`` as capacity and allocatable."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                POOL_LABEL: pool,
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                INSTANCE_TYPE_LABEL: instance_type,
                **labels,
            },
        },
        "spec": {"taints": taints} if taints else {},
        "status": {"allocatable": dict(resources), "capacity": dict(resources)},
    }


def gpu_node(device_type: str, index: int) -> dict[str, Any]:
    """One fake GPU node of ``device_type`` (a key of the device catalog, as DOCKYARD_DEVICE_CATALOG names
    it when the node is made)."""
    device = from_environment()[device_type]
    resources = {
        "cpu": str(device.vcpu),
        "memory": f"{device.memory_gib}Gi",
        "pods": str(PODS_PER_NODE),
        GPU_RESOURCE: str(device.gpus),
    }
    labels = {
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": device.gpu_product_label,
        "nvidia.com/gpu.count": str(device.gpus),
        "nvidia.com/gpu.memory": str(device.gpu_memory_gb * 1024),
    }
    taints = [{"key": GPU_TAINT_KEY, "value": GPU_TAINT_VALUE, "effect": GPU_TAINT_EFFECT}]
    return _fake_node(node_name(device_type, index), device_type, device_type, resources, labels, taints)


CPU_INSTANCE_TYPE = "m6i.2xlarge"
"""The general-purpose pool (8 vCPU, 32 GiB, no GPU, no taint) for Dockyard itself and tools."""


def cpu_node(index: int) -> dict[str, Any]:
    """One fake general-purpose node: where the operator, the facade and tools run."""
    name = f"cpu-{CPU_INSTANCE_TYPE.replace('.', '-')}-{index}"
    resources = {"cpu": "8", "memory": "32Gi", "pods": str(PODS_PER_NODE)}
    return _fake_node(name, CPU_INSTANCE_TYPE, "cpu", resources, {}, [])


def parse_pools(text: str, default_size: int) -> dict[str, int]:
    """Pool sizes from ``"g5.xlarge=4,g5.48xlarge=1"``; unnamed device types get ``default_size``.

    Raises ``ValueError`` naming the bad entry (unknown device type, non-integer or negative size).
    """
    if default_size < 0:
        raise ValueError(f"default pool size must be >= 0, got {default_size}")
    pools = dict.fromkeys(DEVICE_TYPES, default_size)
    for raw in filter(None, (part.strip() for part in text.split(","))):
        device_type, sep, size_text = raw.partition("=")
        device_type = device_type.strip()
        if not sep or device_type not in DEVICE_TYPES:
            raise ValueError(
                f"bad pool entry {raw!r}: expected <deviceType>=<count> with deviceType one of "
                f"{', '.join(DEVICE_TYPES)}"
            )
        try:
            size = int(size_text)
        except ValueError:
            raise ValueError(f"bad pool entry {raw!r}: count must be an integer") from None
        if size < 0:
            raise ValueError(f"bad pool entry {raw!r}: count must be >= 0")
        pools[device_type] = size
    return pools


def pool_nodes(pools: Mapping[str, int], cpu_nodes: int = 0) -> list[dict[str, Any]]:
    """All nodes of all GPU pools, in catalog order, then the general-purpose pool."""
    gpu = [gpu_node(t, i) for t in DEVICE_TYPES for i in range(pools.get(t, 0))]
    return gpu + [cpu_node(i) for i in range(cpu_nodes)]
