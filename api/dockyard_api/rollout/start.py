"""The facade's part of canaries and automatic rollback, started with it: the turn outcome recorder (every
replica) and the SLO watcher (it acts in the replica holding the Lease)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dockyard_api.rollout.lease import Lease
from dockyard_api.rollout.watcher import LEASE_NAME, SloWatcher
from dockyard_api.runtime.canary import Answer, Figures
from dockyard_api.runtime.service import AppRuntime
from dockyard_api.settings import ApiSettings
from dockyard_api.store.outcomes import OutcomeRecorder
from dockyard_api.store.store import ConversationStore
from dockyard_core import evaluations
from dockyard_core.kubeclient import AsyncKube

POD_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


def lease_namespace(settings: ApiSettings) -> str:
    if settings.slo_lease_namespace:
        return settings.slo_lease_namespace
    try:
        return POD_NAMESPACE.read_text().strip() or "default"
    except OSError:
        return "default"


class _Idle:
    async def aclose(self) -> None:
        return None


def rollout(
    settings: ApiSettings, kube: AsyncKube, store: ConversationStore, runtime: AppRuntime
) -> tuple[OutcomeRecorder, SloWatcher | _Idle]:
    recorder = OutcomeRecorder(store, flush_seconds=settings.turn_outcomes_flush_seconds)
    recorder.start()
    runtime.figures = Figures(recorder, live_judge)
    if settings.slo_watch_seconds <= 0:
        return recorder, _Idle()
    lease = Lease(kube, lease_namespace(settings), LEASE_NAME, store.instance_id)
    watcher = SloWatcher(kube, store, runtime.informers["environments"], lease, interval=settings.slo_watch_seconds)
    watcher.start()
    return recorder, watcher


def live_judge(expect: Mapping[str, Any], answer: Answer) -> bool:
    """The live evaluation: the evaluation engine's expectations (:func:`dockyard_core.evaluations.judge`)."""
    outcome = evaluations.Outcome(
        response=answer.response,
        agent=answer.agent,
        tools_used=answer.tools_used,
        error=answer.error,
        blocked=answer.blocked,
        latency_ms=answer.latency_ms,
    )
    return evaluations.judge(expect, outcome).passed
