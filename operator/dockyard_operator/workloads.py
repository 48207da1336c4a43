"""The operator's views of its workloads: the Deployments and Pods it made for ModelDeployments and
ToolDeployments, by owner, kept current by list + watch (:class:`dockyard_core.informer.ListWatch`).

These are most of the watch events the operator receives (about four per Pod and four per Deployment in
every rollout, against two of the ModelDeployment itself). They are followed outside kopf: kopf's
processing of each event (per-object memories, loggers, cause detection, handler invocation) cost
about a quarter of the operator's CPU while 200 ModelDeployments rolled out, for handlers that only
kept a slim copy and queued the owner. Here each event is one slim copy and one trigger of the owner's
work queue.

Only the workloads' objects are listed and watched (:data:`WORKLOAD_SELECTOR`): the API server filters,
so the operator never receives the other Deployments and Pods of the cluster. A reconcile waits until
both have taken in their first list (:meth:`WorkloadViews.wait_synced`), so a restarted operator does
not apply what already exists because it has not seen it yet.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Iterator, Mapping
from typing import Any

from dockyard_core.informer import ListWatch
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.kubepaths import collection
from dockyard_operator.builders.common import COMPONENT_LABEL, MANAGED_BY
from dockyard_operator.signals import deployment_signal, pod_signal

Key = tuple[str, str, str]
"""(namespace, component, owner name): how workload Deployments and Pods are found."""

WORKLOAD_SELECTOR = f"app.kubernetes.io/managed-by={MANAGED_BY},{COMPONENT_LABEL}"
"""The Deployments and Pods the operator watches: those it made (managed by it, with a component)."""

INSTANCE_LABEL = "app.kubernetes.io/instance"
DEPLOYMENT_STATUS = ("observedGeneration", "replicas", "updatedReplicas", "readyReplicas", "availableReplicas",
                     "conditions")  # fmt: skip
POD_STATUS = ("phase", "conditions", "initContainerStatuses", "containerStatuses", "podIP")


def key_of(obj: Mapping[str, Any]) -> Key:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (meta.get("namespace") or "", labels.get(COMPONENT_LABEL, ""), labels.get(INSTANCE_LABEL, ""))


def slim(obj: Mapping[str, Any], status_keys: tuple[str, ...]) -> dict[str, Any]:
    """What the reconciles read of a Deployment or Pod (its managed fields and most of its spec are not kept)."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    return {
        "metadata": {k: meta.get(k) for k in ("name", "generation", "annotations", "deletionTimestamp")},
        "spec": {k: spec[k] for k in ("nodeName", "replicas") if k in spec},
        "status": {k: status[k] for k in status_keys if k in status},
    }


def _as_created(obj: Mapping[str, Any]) -> dict[str, Any]:
    """``obj`` as it was created: its metadata and spec, not yet scheduled, no status."""
    spec = {k: v for k, v in (obj.get("spec") or {}).items() if k != "nodeName"}
    return {"metadata": obj.get("metadata") or {}, "spec": spec}


class Workloads(ListWatch, Mapping[Key, tuple[dict[str, Any], ...]]):
    """One kind of workload object (Deployments or Pods) by :data:`Key`, as slim copies; a change of its
    ``signal`` (:mod:`dockyard_operator.signals`: what can change a verdict), a new list, an object removed
    or moved calls ``changed`` with the key (and the old key, when an object's labels moved it)."""

    def __init__(
        self,
        kube: AsyncKube,
        path: str,
        status_keys: tuple[str, ...],
        changed: Callable[[Key], None],
        signal: Callable[[Mapping[str, Any]], Hashable],
    ) -> None:
        super().__init__(kube, path, label_selector=WORKLOAD_SELECTOR, required=True)
        self.status_keys = status_keys
        self.changed = changed
        self.signal = signal
        self._by_key: dict[Key, dict[str, dict[str, Any]]] = {}
        self._key_of: dict[str, Key] = {}
        """uid -> key."""

    # --- Mapping: the objects of an owner ---------------------------------------------------------

    def __getitem__(self, key: Key) -> tuple[dict[str, Any], ...]:
        return tuple(self._by_key[key].values())

    def __iter__(self) -> Iterator[Key]:
        return iter(self._by_key)

    def __len__(self) -> int:
        return len(self._by_key)

    # --- what the list + watch says ----------------------------------------------------------------

    def replace(self, items: list[dict[str, Any]]) -> None:
        before = set(self._by_key)
        self._by_key, self._key_of = {}, {}
        for obj in items:
            self._store(obj)
        for key in before | set(self._by_key):
            self.changed(key)

    def put(self, obj: dict[str, Any]) -> None:
        uid = (obj.get("metadata") or {}).get("uid", "")
        former = self._key_of.get(uid)
        before = self._by_key.get(former, {}).get(uid) if former is not None else None
        moved = self._store(obj)
        if moved is not None:
            self.changed(moved)
        # a new object counts against itself as created, before any status: the Deployment the reconcile
        # just applied, or a Pod just created with nothing to tell, is no news
        if moved is not None or self.signal(before or _as_created(obj)) != self.signal(obj):
            self.changed(key_of(obj))

    def drop(self, obj: dict[str, Any]) -> None:
        uid = (obj.get("metadata") or {}).get("uid", "")
        key = self._key_of.pop(uid, None)
        if key is not None:
            self._remove(key, uid)
            self.changed(key)

    def owner_of(self, uid: str) -> Key | None:
        """The key of the object with this uid (None: not one of the workloads' objects)."""
        return self._key_of.get(uid)

    def _store(self, obj: dict[str, Any]) -> Key | None:
        """Keep the object's slim copy; returns its former key when its labels moved it."""
        uid = (obj.get("metadata") or {}).get("uid", "")
        key = key_of(obj)
        former = self._key_of.get(uid)
        if former is not None and former != key:
            self._remove(former, uid)
        self._key_of[uid] = key
        self._by_key.setdefault(key, {})[uid] = slim(obj, self.status_keys)
        return former if former is not None and former != key else None

    def _remove(self, key: Key, uid: str) -> None:
        group = self._by_key.get(key)
        if group is not None:
            group.pop(uid, None)
            if not group:
                del self._by_key[key]


FAILED_MOUNT_FIELDS = "involvedObject.kind=Pod,reason=FailedMount"
"""The Events of a Pod whose volumes the kubelet cannot mount (a Secret or ConfigMap missing, a claim not
bound): the only sign of why a scheduled Pod never starts, since its status just says Pending."""


class FailedMounts(ListWatch):
    """The kubelet's FailedMount Events of the workloads' Pods, by Pod uid: one cluster-wide watch the API
    server filters (:data:`FAILED_MOUNT_FIELDS`; it sends nothing while every volume mounts). A new or
    repeated one queues the Pod's owner, so a Pod that sits on its node without starting needs no periodic
    look at its Events. Not required: without the right to list Events it gives up (``synced`` stays
    False) and the reconciles fall back to looking every observe interval."""

    def __init__(self, kube: AsyncKube, pods: Workloads, changed: Callable[[Key], None]) -> None:
        super().__init__(kube, collection("events", None), field_selector=FAILED_MOUNT_FIELDS)
        self.pods = pods
        self.changed = changed
        self._by_pod: dict[str, dict[str, dict[str, Any]]] = {}
        """Pod uid -> Event uid -> the Event."""

    def events_of(self, namespace: str, names: set[str]) -> list[dict[str, Any]]:
        """The Events of the Pods named in ``namespace``."""
        return [
            e
            for group in self._by_pod.values()
            for e in group.values()
            if (e.get("involvedObject") or {}).get("namespace") == namespace
            and (e.get("involvedObject") or {}).get("name") in names
        ]

    def replace(self, items: list[dict[str, Any]]) -> None:
        self._by_pod = {}
        for obj in items:
            self.put(obj)

    def put(self, obj: dict[str, Any]) -> None:
        pod = (obj.get("involvedObject") or {}).get("uid", "")
        self._by_pod.setdefault(pod, {})[(obj.get("metadata") or {}).get("uid", "")] = obj
        if (owner := self.pods.owner_of(pod)) is not None:
            self.changed(owner)

    def drop(self, obj: dict[str, Any]) -> None:
        pod = (obj.get("involvedObject") or {}).get("uid", "")
        group = self._by_pod.get(pod, {})
        group.pop((obj.get("metadata") or {}).get("uid", ""), None)
        if not group:
            self._by_pod.pop(pod, None)


class WorkloadViews:
    """The Deployments and Pods of the workloads, and their Pods' FailedMount Events; ``changed`` hears of
    every change by owner key.

    While the FailedMount Events are watched (``mounts.synced``), a Pod scheduled on a node is no news by
    itself (its Events will be, if its volumes fail to mount); otherwise it is, and the reconcile looks at
    its Events every observe interval until it starts (:func:`dockyard_operator.signals.pod_signal`)."""

    def __init__(self, kube: AsyncKube, changed: Callable[[Key, str], None]) -> None:
        """``changed(key, cause)``: cause is ``deployment``, ``pod`` or ``event``."""
        self.deployments = Workloads(
            kube,
            collection("deployments", None),
            DEPLOYMENT_STATUS,
            lambda key: changed(key, "deployment"),
            deployment_signal,
        )
        self.pods = Workloads(
            kube,
            collection("pods", None),
            POD_STATUS,
            lambda key: changed(key, "pod"),
            lambda pod: pod_signal(pod, starting=not self.mounts.synced),
        )
        self.mounts = FailedMounts(kube, self.pods, lambda key: changed(key, "event"))

    def start(self) -> None:
        self.deployments.start()
        self.pods.start()
        self.mounts.start()

    async def stop(self) -> None:
        await asyncio.gather(self.deployments.stop(), self.pods.stop(), self.mounts.stop())

    @property
    def synced(self) -> bool:
        return self.deployments.synced and self.pods.synced

    async def wait_synced(self) -> None:
        await asyncio.gather(self.deployments.wait_synced(), self.pods.wait_synced())
