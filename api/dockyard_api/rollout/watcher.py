"""The SLO watcher (docs/promotion.md, "Automatic rollback").

It runs in the facade, in the ONE replica that holds the Lease ``dockyard-slo-watcher`` (:mod:`.lease`); every
``interval`` seconds it reads, for each Environment with ``spec.slo`` (from the runtime's informer), the
turns of the watched version over the window from the conversation store (every replica writes its turns'
outcomes there, :mod:`dockyard_api.store.outcomes`), so the figures are those of all replicas. On a breach it
moves new sessions back to the previous working version, in the Kubernetes API (a guarded merge patch of the
Environment, as the facade's service account):

- a canary: ``spec.canary`` removed, annotations canary-request ``RolledBack <id>`` and the reason and
  figures; the operator ends the canary's history entry (RolledBack, the reason, the figures);
- a fresh deploy: ``spec.appVersion`` set to the previous working version with deploy-request
  ``AutoRollback <id>``; the operator records an AutoRollback history entry with the reason and figures.

Either way a Warning Event names the breach, the metric ``dockyard_automatic_rollbacks_total`` counts it and
``status.slo`` (what the console shows) records it. Sessions that started on the version keep it (they are
pinned); only new sessions go back. ``status.slo`` (the figures per version) is written at most every
``status_seconds`` per environment while something is watched, once when nothing is, and at once on a change
of what is watched or a breach.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from dockyard_api import rollout_metrics
from dockyard_api.events import record_event
from dockyard_api.rollout import slo as slos
from dockyard_api.rollout.lease import Lease
from dockyard_api.store import outcomes
from dockyard_api.store.database import Database
from dockyard_core.errors import ConflictError, DockyardError
from dockyard_core.kubeclient import AsyncKube, KubeError
from dockyard_core.repository import Objects
from dockyard_core.resources.v1alpha1 import DEPLOY_REQUEST_ANNOTATION
from dockyard_core.resources.v1alpha1.canary import (
    CANARY_REQUEST_ANNOTATION,
    ROLLOUT_FIGURES_ANNOTATION,
    ROLLOUT_REASON_ANNOTATION,
)

log = logging.getLogger("dockyard.rollout")


class Environments(Protocol):
    """Where the Environments come from: the runtime's informer (:class:`~dockyard_api.cache.Informer`)."""

    def snapshot(self) -> list[dict[str, Any]] | None: ...


LEASE_NAME = "dockyard-slo-watcher"


def _stamp(when: datetime) -> str:
    return when.isoformat(timespec="seconds").replace("+00:00", "Z")


class SloWatcher:
    def __init__(
        self,
        kube: AsyncKube,
        store: Database,
        environments: Environments,
        lease: Lease,
        *,
        interval: float = 2.0,
        status_seconds: float = 10.0,
    ) -> None:
        self.kube = kube
        self.store = store
        self.environments = environments
        self.lease = lease
        self.interval = interval
        self.status_seconds = status_seconds
        self.objects = Objects(kube, "environments", "Environment")
        self._written: dict[tuple[str, str], tuple[float, str]] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._forever())

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _forever(self) -> None:
        while True:
            try:
                if await self.lease.hold():
                    await self.check_all()
            except (DockyardError, KubeError, OSError) as exc:
                log.warning("SLO watcher: %s", getattr(exc, "message", exc))
            except Exception:
                log.exception("SLO watcher pass failed")
            await asyncio.sleep(self.interval)

    async def check_all(self) -> int:
        """One pass over the environments with spec.slo; how many rolled back."""
        envs = self.environments.snapshot()
        if envs is None or not self.store.ready:
            return 0
        rolled = 0
        for env in envs:
            spec = env.get("spec") or {}
            if "slo" not in spec or (env.get("metadata") or {}).get("deletionTimestamp"):
                continue
            try:
                rolled += await self.check(env)
            except (DockyardError, KubeError) as exc:
                log.warning("SLO watcher, environment %s: %s", env["metadata"].get("name"), exc)
        return rolled

    async def check(self, env: Mapping[str, Any]) -> bool:
        """Watch one environment: its figures, and a rollback on a breach (whether it rolled back)."""
        meta, spec = env["metadata"], env.get("spec") or {}
        namespace, name = meta["namespace"], meta["name"]
        slo = slos.slo_of(spec)
        if slo is None:
            return False
        now = datetime.now(UTC)
        watch = slos.watch_of(env, slo, now)
        since = now - timedelta(seconds=slo.window_seconds)
        if watch is not None:
            since = max(since, watch.since)
        found = await self.store.run(lambda conn: outcomes.window(conn, namespace, name, since))
        active = str(spec.get("appVersion") or "draft")
        versions = [active] + ([watch.version] if watch is not None and watch.version != active else [])
        figures = [slos.figures(v, found.get(v), slo.window_seconds) for v in versions]
        canary = spec.get("canary") or {}
        if canary.get("appVersion"):
            rollout_metrics.CANARY_WEIGHT.labels(namespace, name, str(canary["appVersion"])).set(
                int(canary.get("weight") or 0)
            )
        breach = None
        if watch is not None:
            breach = slos.breach(slo, next(f for f in figures if f["version"] == watch.version))
        if breach is None or watch is None:
            await self._status(env, watch.describe() if watch else "", figures, now, None)
            return False
        await self._roll_back(env, watch, breach)
        await self._status(env, f"{watch.describe()} (rolled back)", figures, now, f"{_stamp(now)} {breach.reason}")
        return True

    async def _roll_back(self, env: Mapping[str, Any], watch: slos.Watch, breach: slos.Breach) -> None:
        meta = env["metadata"]
        namespace, name = meta["namespace"], meta["name"]
        reason = f"{breach.reason}: new sessions go back to version {watch.back_to}"
        notes = {ROLLOUT_REASON_ANNOTATION: reason[:1024], ROLLOUT_FIGURES_ANNOTATION: json.dumps(breach.figures)}
        if watch.what == "canary":
            notes[CANARY_REQUEST_ANNOTATION] = f"RolledBack {uuid.uuid4().hex}"
            patch: dict[str, Any] = {"metadata": {"annotations": notes}, "spec": {"canary": None}}
            event, what = "CanaryRolledBack", f"canary {watch.version} rolled back"
        else:
            notes[DEPLOY_REQUEST_ANNOTATION] = f"AutoRollback {uuid.uuid4().hex}"
            patch = {"metadata": {"annotations": notes}, "spec": {"appVersion": watch.back_to}}
            event, what = "AutomaticRollback", f"version {watch.version} rolled back to {watch.back_to}"
        patched = await self._guarded(env, patch)
        rollout_metrics.rollback(namespace, name, watch.version, watch.what, breach.slo)
        rollout_metrics.SLO_BREACHES.labels(namespace, name, watch.version, breach.slo).set(1)
        log.warning("environment %s/%s: %s (%s)", namespace, name, what, reason)
        await record_event(self.kube, patched, reason=event, message=f"{what}: {reason}", type_="Warning")

    async def _guarded(self, env: Mapping[str, Any], patch: dict[str, Any]) -> dict[str, Any]:
        """The patch, only while the spec is what the verdict was made on: a person's change since wins (the
        next pass looks again); a status write since (the operator's, this watcher's) does not matter."""
        meta, spec = env["metadata"], env.get("spec") or {}
        version = meta.get("resourceVersion")
        for attempt in range(3):
            try:
                return await self.objects.merge(meta["namespace"], meta["name"], patch, resource_version=version)
            except ConflictError:
                now = await self.objects.get(meta["namespace"], meta["name"])
                if attempt == 2 or now.get("spec") != spec:
                    raise
                version = now["metadata"].get("resourceVersion")
        raise AssertionError("unreachable")

    async def _status(
        self, env: Mapping[str, Any], watching: str, figures: list[dict[str, Any]], now: datetime, breach: str | None
    ) -> None:
        meta = env["metadata"]
        key = (meta["namespace"], meta["name"])
        last = self._written.get(key)
        recent = last is not None and (not watching or time.monotonic() - last[0] < self.status_seconds)
        if breach is None and last is not None and last[1] == watching and recent:
            return  # nothing watched: written once, not every pass (each write wakes the operator)
        status: dict[str, Any] = {"watching": watching, "checkedAt": _stamp(now), "figures": figures}
        if breach is not None:
            status["lastBreach"] = breach[:1024]
        try:
            await self.objects.merge(key[0], key[1], {"status": {"slo": status}}, sub="status")
        except DockyardError as exc:
            log.warning("status.slo of %s/%s not written: %s", key[0], key[1], exc.message)
            return
        self._written[key] = (time.monotonic(), watching)
