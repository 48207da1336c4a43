"""List + watch of Kubernetes objects (what client-go calls a reflector), shared by the facade's caches
(``dockyard_api.cache``) and the operator's views of its workloads (``dockyard_operator.workloads``).

:class:`ListWatch` lists the objects at a path once, then follows a watch from the list's
resourceVersion; when the watch's version has expired (410) it lists again at once, when the connection
fails it lists again after a jittered, growing delay. What it keeps, and how, is the subclass's:
:meth:`ListWatch.replace` with every object of a fresh list, :meth:`ListWatch.put` and
:meth:`ListWatch.drop` with each watch event.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from typing import Any

from dockyard_core.kubeclient import AsyncKube, KubeError

log = logging.getLogger(__name__)


class ListWatch:
    """The objects at ``path`` (a cluster-wide list path, e.g. ``/api/v1/pods``), optionally only those
    of ``label_selector``, kept current by list + watch.

    A failure makes the objects doubtful: the informer is unsynced until the next list, and when the list
    is refused (403) it gives up (a caller that can read each object another way). ``required``: for a
    caller that cannot work without the objects, it keeps the last ones while it lists again, and
    retries a refused list as any other failure."""

    def __init__(
        self,
        kube: AsyncKube,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        watch_timeout_seconds: int = 300,
        required: bool = False,
    ) -> None:
        self.kube = kube
        self.path = path
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.watch_timeout_seconds = watch_timeout_seconds
        self.required = required
        self._synced = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def synced(self) -> bool:
        """True once a list has been taken in (and until a failure makes the objects doubtful)."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        await self._synced.wait()

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"list+watch {self.path}")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    # --- what a subclass keeps ---------------------------------------------------------------------

    def replace(self, items: list[dict[str, Any]]) -> None:
        """Hold exactly ``items`` (a fresh list)."""
        raise NotImplementedError

    def put(self, obj: dict[str, Any]) -> None:
        """An object was added or changed."""
        raise NotImplementedError

    def drop(self, obj: dict[str, Any]) -> None:
        """An object was deleted."""
        raise NotImplementedError

    def mark_synced(self) -> None:
        self._synced.set()

    # --- list + watch ------------------------------------------------------------------------------

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
                if not self.required:
                    self._synced.clear()  # doubtful until the next list (as the facade's cache always had it)
                if isinstance(exc, KubeError) and exc.status == 410:
                    continue  # the watch's version expired: list again, at once
                if not self.required and isinstance(exc, KubeError) and exc.status == 403:
                    log.warning("cannot list %s (%s): every lookup reads the API server", self.path, exc)
                    return
                # a caller that needs the objects waits for them: say so louder when it cannot have them
                level = logging.WARNING if self.required and not self.synced else logging.INFO
                log.log(level, "watch of %s failed: %s; listing again in %.1fs", self.path, exc, delay)
                await asyncio.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 30.0)

    def _params(self) -> dict[str, str]:
        params = {"labelSelector": self.label_selector} if self.label_selector else {}
        if self.field_selector:
            params["fieldSelector"] = self.field_selector
        return params

    async def _list(self) -> str:
        listing = await self.kube.request("GET", self.path, params=self._params() or None)
        self.replace(listing.get("items", []))
        self.mark_synced()
        return str(listing.get("metadata", {}).get("resourceVersion", ""))

    async def _follow(self, version: str) -> None:
        params = {**self._params(), "resourceVersion": version, "timeoutSeconds": str(self.watch_timeout_seconds)}
        while True:
            async for event in self.kube.watch(self.path, params):
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    raise KubeError(int(obj.get("code", 500)), str(obj.get("reason", "")), str(obj.get("message")))
                if kind in ("ADDED", "MODIFIED"):
                    self.put(obj)
                elif kind == "DELETED":
                    self.drop(obj)
                params["resourceVersion"] = str(obj.get("metadata", {}).get("resourceVersion", version))
