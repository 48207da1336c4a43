"""A watch-fed, read-only cache of one custom-resource kind across all namespaces (an informer).

The facade reads Models on the hot path of every model deploy. Instead of one GET per call, it lists
Models once and follows a watch; a deploy then costs one API call (the create or patch of the
ModelDeployment). The cache is only ever trusted for a POSITIVE answer: callers read the API server
when an object is missing from the cache or the cache shows a state that would refuse the request,
so a lagging watch can delay nothing and refuse nothing. The operator checks the Model again anyway.

When the facade may not list the kind cluster-wide (RBAC), the cache stays unsynced and every lookup
goes to the API server.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from typing import Any

from dockyard_api.kubehttp import AsyncKube, KubeError

log = logging.getLogger(__name__)

Key = tuple[str, str]
"""(namespace, name)."""


class ObjectCache:
    """Objects of one ``dockyard.dev`` kind by (namespace, name), kept current by list + watch."""

    def __init__(self, kube: AsyncKube, plural: str, *, watch_timeout_seconds: int = 300) -> None:
        self.kube = kube
        self.plural = plural
        self.watch_timeout_seconds = watch_timeout_seconds
        self._items: dict[Key, dict[str, Any]] = {}
        self._synced = False
        self._task: asyncio.Task[None] | None = None

    @property
    def synced(self) -> bool:
        return self._synced

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The cached object, or None (not cached, or the cache is not synced)."""
        return self._items.get((namespace, name)) if self._synced else None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"cache-{self.plural}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _run(self) -> None:
        delay = 0.5
        while True:
            try:
                version = await self._list()
                delay = 0.5
                await self._follow(version)
            except asyncio.CancelledError:
                raise
            except (KubeError, ValueError) as exc:  # ValueError: a garbled event
                self._synced = False
                if isinstance(exc, KubeError) and exc.status == 403:
                    log.warning("cannot list %s cluster-wide (%s): every lookup reads the API server", self.plural, exc)
                    return
                if isinstance(exc, KubeError) and exc.status == 410:
                    continue  # the watch's version expired: list again at once
                log.info("watch of %s failed: %s; listing again in %.1fs", self.plural, exc, delay)
                await asyncio.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 30.0)

    async def _list(self) -> str:
        listing = await self.kube.request("GET", AsyncKube.all_namespaces_path(self.plural))
        self._items = {_key(obj): _slim(obj) for obj in listing.get("items", [])}
        self._synced = True
        return str(listing.get("metadata", {}).get("resourceVersion", ""))

    async def _follow(self, version: str) -> None:
        params = {"resourceVersion": version, "timeoutSeconds": str(self.watch_timeout_seconds)}
        while True:
            async for event in self.kube.watch(AsyncKube.all_namespaces_path(self.plural), params):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":  # typically 410 Gone: the version is too old; list again
                    raise KubeError(int(obj.get("code", 500)), str(obj.get("reason", "")), str(obj.get("message")))
                if kind in ("ADDED", "MODIFIED"):
                    self._items[_key(obj)] = _slim(obj)
                elif kind == "DELETED":
                    self._items.pop(_key(obj), None)
                params["resourceVersion"] = str(obj.get("metadata", {}).get("resourceVersion", version))
            # the server closed the watch after timeoutSeconds: resume from the last version seen


def _key(obj: dict[str, Any]) -> Key:
    meta = obj["metadata"]
    return meta.get("namespace", ""), meta["name"]


def _slim(obj: dict[str, Any]) -> dict[str, Any]:
    meta = {k: v for k, v in obj.get("metadata", {}).items() if k != "managedFields"}
    return {**obj, "metadata": meta}
