"""The one context of the operator's reconciles: :class:`Context` (built once at start-up from the settings
read once, in ``handlers/lifecycle.py``), :class:`Views` of kopf's indexes, and :func:`snapshot`, the
parts of a custom resource the reconciles read."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, TypeVar

from dockyard_core.devices import Device
from dockyard_core.resources.v1alpha1 import ModelDeploymentStatus
from dockyard_operator.assess import NodeFit
from dockyard_operator.kube import KubeApi
from dockyard_operator.locks import KeyedLocks
from dockyard_operator.runtimes import RuntimeCatalog
from dockyard_operator.settings import OperatorSettings
from dockyard_operator.workloads import Key as Key
from dockyard_operator.workloads import WorkloadViews

if TYPE_CHECKING:
    from dockyard_operator.reconcile.modeldeployment import ModelBuild

T = TypeVar("T")
API_CONCURRENCY = 32
"""Concurrent API calls (threads, and connections in the client's pool)."""

Body = Mapping[str, Any]
"""A custom resource as kopf hands it over, or its indexed snapshot."""


@dataclass
class Context:
    """What every reconcile needs: settings, the API client, the catalog, kopf's indexes (``views``, set
    by the first handler call: kopf hands its indexes to handlers only), per-object caches of derived
    values, and the threads blocking work runs in (a tool endpoint's reachability probe)."""

    settings: OperatorSettings
    kube: KubeApi
    """The one wrapper of the one API client (every call the reconciles, the import job, the autoscaler
    and the webhooks make)."""
    catalog: RuntimeCatalog
    devices: Mapping[str, Device]
    """The device catalog, read once from the settings (``device_catalog``)."""
    views: Views | None = None
    workloads: WorkloadViews | None = None
    """The workloads' Deployments and Pods (list + watch, started by the first ModelDeployment or
    ToolDeployment event)."""
    builds: dict[str, ModelBuild] = field(default_factory=dict)
    """Per ModelDeployment uid, its last :class:`ModelBuild`."""
    statuses: dict[str, tuple[str | None, ModelDeploymentStatus]] = field(default_factory=dict)
    """Per ModelDeployment uid, its status as validated for a resourceVersion."""
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(API_CONCURRENCY, thread_name_prefix="kube")
    )
    locks: KeyedLocks = field(default_factory=KeyedLocks)
    """Per object uid, for the reconciles that kopf runs outside a work queue (Environments); each goes
    with its last holder."""
    download_secrets: dict[str, tuple[int, str, float]] = field(default_factory=dict)
    """Per ModelDeployment uid, the expiry and template hash of the download tokens last applied, and when."""
    token_key: bytes | None = None
    deleted_environments: set[str] = field(default_factory=set)
    """UIDs of Environments whose deletion was handled (kept for the operator's lifetime; tiny): a late
    event of a deleted Environment is not reconciled."""
    audit_digests: dict[str, str] = field(default_factory=dict)
    """Per Environment uid, the digest of the audit record last applied."""

    def lock(self, uid: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self.locks.hold(uid)

    def forget(self, uid: str) -> None:
        """Drop the caches of a deleted object."""
        self.builds.pop(uid, None)
        self.statuses.pop(uid, None)
        self.download_secrets.pop(uid, None)
        self.audit_digests.pop(uid, None)

    async def call(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run blocking work (an HTTP probe) in the threads."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, partial(fn, *args, **kwargs))


@dataclass(frozen=True)
class Views:
    """What the reconciles read of the cluster: kopf's indexes (Nodes, Models, Tools) and the workloads'
    Deployments and Pods (:mod:`dockyard_operator.workloads`), live mappings."""

    deployments: Mapping[Key, Any]
    pods: Mapping[Key, Any]
    nodes: Mapping[str, Any]
    models: Mapping[tuple[str, str], Any]
    tools: Mapping[tuple[str, str], Any]

    def one(self, index: Mapping[Any, Any], key: Any) -> dict[str, Any] | None:
        store = index.get(key)
        return next(iter(store), None) if store else None

    def many(self, index: Mapping[Any, Any], key: Any) -> list[dict[str, Any]]:
        store = index.get(key)
        return list(store) if store else []

    def node_fit(self, device_type: str) -> NodeFit:
        nodes = self.many(self.nodes, device_type)
        largest: dict[str, float] = {}
        for node in nodes:
            for resource, amount in node.items():
                largest[resource] = max(largest.get(resource, 0.0), amount)
        return NodeFit(device_type, len(nodes), largest)


def snapshot(body: Body) -> dict[str, Any]:
    """The parts of a custom resource the reconcilers read, as plain dicts."""
    meta = body["metadata"]
    keep = ("name", "namespace", "uid", "generation", "labels", "annotations", "resourceVersion", "creationTimestamp")
    return {
        "apiVersion": body["apiVersion"],
        "kind": body["kind"],
        "metadata": {k: meta[k] for k in keep if k in meta},
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }
