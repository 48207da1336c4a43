"""Watch-fed, read-only caches (informers) of Kubernetes objects, kept current by list + watch.

The facade reads Models on the hot path of every model deploy, and the app runtime reads the objects a
turn needs (environments, app versions, tools, model pods). Instead of one GET per call, an informer
lists the objects once and follows a watch. It is only ever trusted for a POSITIVE answer: callers read
the API server when an object is missing from it or it shows a state that would refuse the request, so
a lagging watch can delay nothing and refuse nothing.

When the facade may not list the kind cluster-wide (RBAC), the informer stays unsynced and every lookup
goes to the API server. The list + watch itself is :class:`dockyard_core.informer.ListWatch`.
"""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel

from dockyard_core import kubepaths
from dockyard_core.informer import ListWatch
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.repository import Objects

M = TypeVar("M", bound=BaseModel)

Key = tuple[str, str]
"""(namespace, name)."""


class Informer(ListWatch):
    """The objects of one kind (``plural``: ``models``, ``pods``, ...) in every namespace, by (namespace,
    name), kept current by list + watch; what the cache cannot answer is read through core's
    :class:`~dockyard_core.repository.Objects` (plain dicts: the turn's hot path validates nothing).

    ``index_label``: also index the objects by (namespace, value of that label), e.g. the pods of a
    ModelDeployment by ``dockyard.dev/model-deployment``.
    """

    def __init__(
        self,
        kube: AsyncKube,
        plural: str,
        *,
        label_selector: str | None = None,
        index_label: str | None = None,
        watch_timeout_seconds: int = 300,
    ) -> None:
        super().__init__(
            kube,
            kubepaths.collection(plural, None),
            label_selector=label_selector,
            watch_timeout_seconds=watch_timeout_seconds,
        )
        self.objects = Objects(kube, plural, plural)
        self.index_label = index_label
        self._items: dict[Key, dict[str, Any]] = {}
        self._index: dict[Key, dict[str, dict[str, Any]]] = {}
        self._typed: dict[Key, tuple[dict[str, Any], BaseModel]] = {}

    def cached(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self._items.get((namespace, name)) if self.synced else None

    def cached_as(self, namespace: str, name: str, model: type[M]) -> M | None:
        """The cached object as a resource model, validated once per version of the object (the watch hands
        over a new dict for every change): the deploy call's Model costs a lookup, not a validation."""
        obj = self.cached(namespace, name)
        if obj is None:
            return None
        key = (namespace, name)
        hit = self._typed.get(key)
        if hit is not None and hit[0] is obj and isinstance(hit[1], model):
            return hit[1]
        value = model.model_validate(obj)
        self._typed[key] = (obj, value)
        return value

    async def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The object: from the cache when it holds it, else from the API server; None when it does not exist."""
        hit = self.cached(namespace, name)
        if hit is not None:
            return hit
        return await self.objects.find(namespace, name)

    def snapshot(self) -> list[dict[str, Any]] | None:
        """Every cached object (None while the cache is not synced)."""
        return list(self._items.values()) if self.synced else None

    async def in_namespace(self, namespace: str) -> list[dict[str, Any]]:
        """The objects of ``namespace`` (from the API server while the cache is not synced)."""
        if self.synced:
            return [obj for (ns, _), obj in self._items.items() if ns == namespace]
        return await self.objects.select(namespace)

    async def indexed(self, namespace: str, value: str) -> list[dict[str, Any]]:
        """The objects whose ``index_label`` is ``value`` (from the API server while the cache is not synced)."""
        assert self.index_label is not None
        if self.synced:
            return list(self._index.get((namespace, value), {}).values())
        return await self.objects.select(namespace, labels={self.index_label: value})

    # --- what the list + watch says ----------------------------------------------------------------

    def replace(self, items: list[dict[str, Any]]) -> None:
        """Hold exactly ``items`` (a fresh list), synced."""
        self._items, self._index, self._typed = {}, {}, {}
        for obj in items:
            self.put(obj)
        self.mark_synced()

    def put(self, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        meta.pop("managedFields", None)
        key = (meta.get("namespace", ""), meta["name"])
        self.drop(self._items.get(key))
        self._items[key] = obj
        if self.index_label:
            value = (meta.get("labels") or {}).get(self.index_label)
            if value is not None:
                self._index.setdefault((key[0], value), {})[key[1]] = obj

    def drop(self, obj: dict[str, Any] | None) -> None:
        if obj is None:
            return
        meta = obj.get("metadata") or {}
        key = (meta.get("namespace", ""), meta["name"])
        self._items.pop(key, None)
        self._typed.pop(key, None)
        if self.index_label:
            value = (meta.get("labels") or {}).get(self.index_label)
            if value is None:
                return
            group = self._index.get((key[0], str(value)))
            if group is not None:
                group.pop(key[1], None)
                if not group:
                    self._index.pop((key[0], str(value)), None)
