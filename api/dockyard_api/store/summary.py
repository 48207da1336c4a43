"""The usage summary on Environments' status (what ``kubectl describe environment`` shows).

Every ``usage_summary_seconds`` (default 60) each facade replica asks the database which environments
had usage since its last pass and merge-patches ``status.usage`` of those (today's counters and the
last 30 days). Cost: one indexed query per pass plus one status PATCH per environment that was used;
an idle environment costs nothing. Several replicas write the same figures (read from the shared
database), so the result does not depend on which one wrote last. A deleted environment is skipped (its
statistics stay in the database and the usage endpoint keeps answering for it).
"""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

from dockyard_api.store.records import UsageReport
from dockyard_api.store.store import ConversationStore
from dockyard_core.errors import DockyardError, NotFoundError
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.repository import Repository
from dockyard_core.resources.v1alpha1.environment import Environment

log = logging.getLogger("dockyard.store.summary")


def summary(report: UsageReport, now: datetime) -> dict[str, Any]:
    """``status.usage`` (UsageSummary) from a 30-day report ending today."""
    today = report.days.get(report.until)
    return {
        "day": report.until.isoformat(),
        "today": (
            today.view() if today else {"requests": 0, "errors": 0, "rateLimited": 0, "tokensIn": 0, "tokensOut": 0}
        ),
        "last30Days": report.totals.view(),
        "updatedAt": now.isoformat(timespec="seconds").replace("+00:00", "Z"),
    }


async def write_summaries(store: ConversationStore, kube: AsyncKube, since: datetime) -> int:
    """One pass: the summaries of environments used after ``since``; how many were written."""
    now = datetime.now(UTC)
    environments = Repository(kube, Environment).objects  # the answers are not read: no model to validate
    written = 0
    for namespace, environment in await store.environments_used_since(since):
        report = await store.usage(
            namespace=namespace, environment=environment, since=now.date() - timedelta(days=29), until=now.date()
        )
        try:
            await environments.merge(namespace, environment, {"status": {"usage": summary(report, now)}}, sub="status")
            written += 1
        except NotFoundError:  # the environment is gone; its statistics stay in the database
            pass
    return written


async def summarise_forever(store: ConversationStore, kube: AsyncKube, interval: float) -> None:
    since = datetime.now(UTC) - timedelta(days=1)  # at start: every environment used in the last day
    while True:
        await asyncio.sleep(interval)
        started = datetime.now(UTC)
        try:
            await write_summaries(store, kube, since - timedelta(seconds=5))  # margin: replicas' clocks
            since = started
        except (DockyardError, OSError) as exc:
            log.warning("usage summary not written: %s", getattr(exc, "message", exc))
