"""Pure builders of what the test bed puts into its cluster: the real node's GPU identity, the kwok
GPU pools of the other device types, CoreDNS, and the device catalog override for 2 cores.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dockyard_core.devices import DEVICE_TYPES, GPU_RESOURCE, INSTANCE_TYPE_LABEL
from dockyard_localcluster.nodes import gpu_node, pool_nodes
from dockyard_localcluster.testbed.config import CLUSTER_DOMAIN, DNS_SERVICE_IP

REAL_DEVICE_TYPE = "g5.xlarge"
"""The device type the real node stands for: a g5.xlarge request lands on it, not on kwok."""
REAL_NODE_LABEL = "dockyard.dev/testbed-node"
"""``real`` on the test bed's one real node (not the kwok pools' label: their re-sizing would delete it)."""
REAL_NODE_GPUS = 2
"""``nvidia.com/gpu`` the real node advertises: two g5.xlarge model pods at once (a deploy beside a
serving one, as in tests/incluster/test_spec_in_cluster.py), each asking 1 GPU, 500m CPU and 2 GiB."""

DEVICE_CATALOG_OVERRIDE: list[dict[str, Any]] = [
    # every field, as the chart's values schema asks (the hardware figures but vcpu and memory are g5.xlarge's)
    {"name": REAL_DEVICE_TYPE, "vcpu": 1, "memory_gib": 4, "gpus": 1, "gpu_model": "A10G", "gpu_memory_gb": 24}
]
"""The device catalog entry Dockyard needs in the test bed (the chart's ``deviceCatalog``, in the
test bed's ``helm-values.yaml``, which the in-cluster release passes; the operator's
DOCKYARD_DEVICE_CATALOG). The built-in
g5.xlarge (4 vCPU, 16 GiB) makes a model pod request 3500m CPU and 13,926 MiB, which a 2-core node
never fits; 1 vCPU / 4 GiB makes it 500m CPU and 2,048 MiB (builders.model.pod_resources), leaving room
beside it for CoreDNS, the operator, the facade and a tool pod."""

COREDNS_PORT = 1053
"""CoreDNS listens above 1024 (no NET_BIND_SERVICE needed, whatever user the image runs as); the
Service maps 53 to it."""

COREDNS_LABELS = {"k8s-app": "kube-dns"}


def real_node_labels() -> dict[str, str]:
    """The labels of a g5.xlarge GPU node (instance type, NVIDIA's feature-discovery labels), as the
    kwok pools carry them, plus the test bed's own marker."""
    labels = gpu_node(REAL_DEVICE_TYPE, 0)["metadata"]["labels"]
    keep = {k: v for k, v in labels.items() if k == INSTANCE_TYPE_LABEL or k.startswith("nvidia.com/")}
    return {**keep, REAL_NODE_LABEL: "real"}


def real_node_metadata_patch() -> dict[str, Any]:
    """A merge patch for the real node's labels. No GPU taint: the real node is the one place real
    pods run (CoreDNS, Dockyard, tools), so it stays untainted; GPU pods still carry the toleration."""
    return {"metadata": {"labels": real_node_labels()}}


def gpu_capacity_patch(gpus: int = REAL_NODE_GPUS) -> list[dict[str, Any]]:
    """A JSON patch of the node's *status* that advertises ``nvidia.com/gpu`` as an extended resource
    (Kubernetes' "Advertise Extended Resources for a Node"). The kubelet copies capacity into
    allocatable; it zeroes extended resources when it re-registers, so ``up()`` re-applies this."""
    path = "/status/capacity/" + GPU_RESOURCE.replace("~", "~0").replace("/", "~1")
    return [{"op": "add", "path": path, "value": str(gpus)}]


def kwok_pools(nodes_per_type: int) -> dict[str, int]:
    """Every device type but the real node's, ``nodes_per_type`` kwok nodes each."""
    return {t: (0 if t == REAL_DEVICE_TYPE else nodes_per_type) for t in DEVICE_TYPES}


def kwok_nodes(pools: Mapping[str, int]) -> list[dict[str, Any]]:
    """The fake GPU nodes (no general-purpose kwok nodes: a pod there would only pretend to run)."""
    return pool_nodes(pools, cpu_nodes=0)


COREFILE = f"""\
.:{COREDNS_PORT} {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 30
    }}
    cache 30
    reload
    loadbalance
}}
"""
"""Cluster names only: there is no upstream (nothing outside the namespace is reachable)."""


def coredns_objects(image: str, node_name: str) -> list[dict[str, Any]]:
    """CoreDNS as a Deployment + the ``kube-dns`` Service at DNS_SERVICE_IP, with its RBAC."""
    ns = "kube-system"
    meta = {"name": "coredns", "namespace": ns, "labels": dict(COREDNS_LABELS)}
    container = {
        "name": "coredns",
        "image": image,
        "imagePullPolicy": "Never",
        "args": ["-conf", "/etc/coredns/Corefile"],
        "ports": [
            {"name": "dns", "containerPort": COREDNS_PORT, "protocol": "UDP"},
            {"name": "dns-tcp", "containerPort": COREDNS_PORT, "protocol": "TCP"},
        ],
        "resources": {"requests": {"cpu": "50m", "memory": "32Mi"}, "limits": {"memory": "128Mi"}},
        "volumeMounts": [{"name": "config", "mountPath": "/etc/coredns", "readOnly": True}],
        "readinessProbe": {"httpGet": {"path": "/ready", "port": 8181}, "periodSeconds": 2},
        "livenessProbe": {"httpGet": {"path": "/health", "port": 8080}, "periodSeconds": 10, "failureThreshold": 5},
    }
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "coredns", "namespace": ns}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": ["list", "watch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "system:coredns"},
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": ns}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns", "namespace": ns},
            "data": {"Corefile": COREFILE},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": meta,
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": dict(COREDNS_LABELS)},
                "template": {
                    "metadata": {"labels": dict(COREDNS_LABELS)},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "dnsPolicy": "Default",
                        "priorityClassName": "system-cluster-critical",
                        "nodeSelector": {"kubernetes.io/hostname": node_name},
                        "containers": [container],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "namespace": ns, "labels": dict(COREDNS_LABELS)},
            "spec": {
                "clusterIP": DNS_SERVICE_IP,
                "selector": dict(COREDNS_LABELS),
                "ports": [
                    {"name": "dns", "port": 53, "targetPort": COREDNS_PORT, "protocol": "UDP"},
                    {"name": "dns-tcp", "port": 53, "targetPort": COREDNS_PORT, "protocol": "TCP"},
                ],
            },
        },
    ]


def helm_values() -> dict[str, Any]:
    """What a Helm install of Dockyard needs in the test bed: the device catalog that fits the node."""
    return {"deviceCatalog": [dict(entry) for entry in DEVICE_CATALOG_OVERRIDE]}
