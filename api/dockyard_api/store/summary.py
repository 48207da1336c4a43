"""The usage summary on Environments' status (what ``kubectl describe environment`` shows).

Every ``usage_summary_seconds`` (default 60) each facade replica asks the database which environments
had usage since its last pass and merge-patches ``status.usage`` of those (today's counters and the
last 30 days, and per app version: calls, errors, tokens and the last day with a call, from
``dockyard_usage_versions``). Cost: one indexed query per pass plus one status PATCH per environment that was used;
an idle environment costs nothing. Several replicas write the same figures (read from the shared
database), so the result does not depend on which one wrote last. A deleted environment is skipped (its
statistics stay in the database and the usage endpoint keeps answering for it).
"""

from __future__ import annotations

import asyncio
import functools
import logging
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import Connection, func, select

from dockyard_api.store.records import UsageReport
from dockyard_api.store.schema import usage_versions
from dockyard_api.store.store import ConversationStore
from dockyard_core.errors import DockyardError, NotFoundError
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.repository import Repository
from dockyard_core.resources.v1alpha1.environment import Environment

log = logging.getLogger("dockyard.store.summary")


VERSIONS_SHOWN = 20


def versions(conn: Connection, namespace: str, environment: str, since: date, until: date) -> list[dict[str, Any]]:
    """Per app version over [since, until]: calls, errors, tokens and the last day with a call, the most
    recently used first (at most VERSIONS_SHOWN)."""
    c = usage_versions.c
    query = (
        select(
            c.version,
            func.sum(c.requests).label("requests"),
            func.sum(c.errors).label("errors"),
            func.sum(c.tokens_in).label("tokens_in"),
            func.sum(c.tokens_out).label("tokens_out"),
            func.max(c.day).label("last_day"),
        )
        .where(c.namespace == namespace, c.environment == environment, c.day >= since, c.day <= until)
        .group_by(c.version)
        .order_by(func.max(c.day).desc(), c.version.desc())
        .limit(VERSIONS_SHOWN)
    )
    return [
        {
            "version": r.version,
            "requests": int(r.requests or 0),
            "errors": int(r.errors or 0),
            "tokensIn": int(r.tokens_in or 0),
            "tokensOut": int(r.tokens_out or 0),
            "lastDay": (
                r.last_day if isinstance(r.last_day, date) else date.fromisoformat(str(r.last_day))
            ).isoformat(),
        }
        for r in conn.execute(query)
    ]


def summary(report: UsageReport, now: datetime, by_version: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``status.usage`` (UsageSummary) from a 30-day report ending today (and its figures per version)."""
    today = report.days.get(report.until)
    return {
        "versions": by_version or [],
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
        since_day = now.date() - timedelta(days=29)
        report = await store.usage(namespace=namespace, environment=environment, since=since_day, until=now.date())
        by_version = await store.run(functools.partial(versions, namespace=namespace, environment=environment,
                                                       since=since_day, until=now.date()))  # fmt: skip
        usage = summary(report, now, by_version)
        try:
            await environments.merge(namespace, environment, {"status": {"usage": usage}}, sub="status")
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
