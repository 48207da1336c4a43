"""The one context of the operator's reconciles: :class:`Context` (built once at start-up from the settings
read once, in ``handlers/lifecycle.py``), :class:`Views` of kopf's indexes, :class:`KindStates` (what each
reconcile keeps between its runs, registered by its type: the context knows no kind's types), and
:func:`snapshot`, the parts of a custom resource the reconciles read."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, TypeVar, cast

from dockyard_core.devices import Device
from dockyard_operator.kube import KubeApi
from dockyard_operator.locks import KeyedLocks
from dockyard_operator.runtimes import RuntimeCatalog
from dockyard_operator.scheduling import NodeFit
from dockyard_operator.settings import OperatorSettings
from dockyard_operator.workloads import Key as Key
from dockyard_operator.workloads import WorkloadViews

T = TypeVar("T")
API_CONCURRENCY = 32
"""Concurrent API calls (threads, and connections in the client's pool)."""

Body = Mapping[str, Any]
"""A custom resource as kopf hands it over, or its indexed snapshot."""


class KindState(Protocol):
    """What one kind's reconcile keeps between its runs (caches per object uid): a class made without
    arguments, one instance per :class:`Context` (:meth:`Context.state`)."""

    def forget(self, uid: str) -> None:
        """Drop what is kept of a deleted object."""


S = TypeVar("S", bound=KindState)


class KindStates:
    """The :class:`KindState` of each kind, keyed by its type and made on first use."""

    def __init__(self) -> None:
        self._states: dict[type[KindState], KindState] = {}

    def of(self, kind: type[S]) -> S:
        state = self._states.get(kind)
        if state is None:
            state = self._states[kind] = kind()
        return cast(S, state)

    def forget(self, uid: str) -> None:
        for state in self._states.values():
            state.forget(uid)


@dataclass
class Context:
    """What every reconcile needs: settings, the API client, the catalogs, kopf's indexes (``views``, set
    by the first handler call: kopf hands its indexes to handlers only), the threads blocking work runs in
    (a tool endpoint's reachability probe), per-object locks, and each kind's state (:meth:`state`)."""

    settings: OperatorSettings
    kube: KubeApi
    """The one wrapper of the one API client (every call the reconciles, the import job, the autoscaler
    and the webhooks make)."""
    catalog: RuntimeCatalog
    devices: Mapping[str, Device]
    """The device catalog, read once from the settings (``device_catalog``)."""
    views: Views | None = None
    indexes: Mapping[str, Any] = field(default_factory=dict)
    """All of kopf's indexes by name (captured with ``views``), for what runs outside a kopf handler: the
    Environments' reconcile after a ModelDeployment watch event."""
    workloads: WorkloadViews | None = None
    """The workloads' Deployments and Pods (list + watch, started with the ModelDeployments' watch by the
    first kopf handler call, once kopf's indexes are filled)."""
    executor: ThreadPoolExecutor = field(
        default_factory=lambda: ThreadPoolExecutor(API_CONCURRENCY, thread_name_prefix="kube")
    )
    locks: KeyedLocks = field(default_factory=KeyedLocks)
    """Per object uid, for the reconciles that kopf runs outside a work queue (Environments); each goes
    with its last holder."""
    states: KindStates = field(default_factory=KindStates)
    """What each kind's reconcile keeps between its runs (caches per object uid), by its type."""

    def lock(self, uid: str) -> contextlib.AbstractAsyncContextManager[None]:
        return self.locks.hold(uid)

    def state(self, kind: type[S]) -> S:
        """The state ``kind``'s reconcile keeps (one instance per context, made on first use)."""
        return self.states.of(kind)

    def forget(self, uid: str) -> None:
        """Drop what every kind's state keeps of a deleted object."""
        self.states.forget(uid)

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
