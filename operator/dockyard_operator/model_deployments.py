"""The operator's watch of ModelDeployments: one cluster-wide list + watch
(:class:`dockyard_core.informer.ListWatch`), each object handed to ``changed`` (the handlers' listeners:
the work queue, the autoscalers, the Environments whose agents call the model).

They are followed outside kopf, as the workloads' Deployments and Pods are
(:mod:`dockyard_operator.workloads`): kopf's processing of each of their watch events (per-object memory,
loggers, cause detection, two handlers' invocation) was about a fifth of the operator's CPU while 200
ModelDeployments rolled out, for handlers that only queued the object and looked whether its health had
changed. Here each event is one call of ``changed``.

Level-based like the rest: every object of a list (the first after a start, and each after a lost watch)
is handed over as kopf's initial listing handed it over, and one that a new list no longer holds (deleted
while the watch was down) as deleted, so nothing is kept for an object that is gone. The watch is started
only once kopf's indexes are filled (``handlers/deployments.py``): the reconciles it queues read them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from dockyard_core.informer import ListWatch
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.kubepaths import collection
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION

ObjectKey = tuple[str, str]
"""(namespace, name)."""

Changed = Callable[[dict[str, Any], bool], None]
"""``changed(body, deleted)``: a ModelDeployment was listed, added or modified (``deleted`` False), or is
gone (True: its last known body)."""

API_VERSION = f"{GROUP}/{VERSION}"


def _key(obj: Mapping[str, Any]) -> ObjectKey:
    meta = obj.get("metadata") or {}
    return meta.get("namespace") or "", meta.get("name") or ""


def _uid(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("uid", ""))


class ModelDeployments(ListWatch):
    """Every ModelDeployment of the namespaces the operator serves (``watched``: kopf's namespace patterns,
    all when none are given), kept by (namespace, name) so that a new list can tell which are gone.

    ``required``: the operator cannot work without them, so a refused list is retried like any failure
    and the objects are kept while it lists again."""

    def __init__(self, kube: AsyncKube, changed: Changed, watched: Callable[[str], bool] | None = None) -> None:
        super().__init__(kube, collection("modeldeployments", None), required=True)
        self.changed = changed
        self.watched = watched
        self._bodies: dict[ObjectKey, dict[str, Any]] = {}

    def __len__(self) -> int:
        return len(self._bodies)

    def _serves(self, obj: dict[str, Any]) -> bool:
        # a list's items may come without apiVersion and kind: the reconciles, tracing and Events read them
        obj.setdefault("apiVersion", API_VERSION)
        obj.setdefault("kind", "ModelDeployment")
        return self.watched is None or self.watched(_key(obj)[0])

    def replace(self, items: list[dict[str, Any]]) -> None:
        fresh = {_key(obj): obj for obj in items if self._serves(obj)}
        before, self._bodies = self._bodies, fresh
        for key, old in before.items():  # gone while the watch was down (or replaced by a namesake)
            if (new := fresh.get(key)) is None or _uid(new) != _uid(old):
                self.changed(old, True)
        for obj in fresh.values():
            self.changed(obj, False)

    def put(self, obj: dict[str, Any]) -> None:
        if self._serves(obj):
            self._bodies[_key(obj)] = obj
            self.changed(obj, False)

    def drop(self, obj: dict[str, Any]) -> None:
        if self._serves(obj):
            self._bodies.pop(_key(obj), None)
            self.changed(obj, True)
