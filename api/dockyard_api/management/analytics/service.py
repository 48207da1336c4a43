"""Analytics of an environment per app version and UTC day: turns, errors, users, sessions, tokens, latency
percentiles and tool calls (:mod:`dockyard_api.store.analytics`). Like the usage statistics they outlive the
environment.

Authorisation: ``get`` on ``environments`` in the namespace (a SubjectAccessReview; the environment may be
gone). ``AnalyticsService(store, auth, user)``, built per request like the other management services.
"""

from __future__ import annotations

import functools
import re
from datetime import date, timedelta

from dockyard_api.auth import Authenticator
from dockyard_api.management.analytics.schemas import (
    AnalyticsView,
    DayView,
    FiguresView,
    LatencyView,
    VersionAnalyticsView,
)
from dockyard_api.management.period import utc_days
from dockyard_api.store import ConversationStore
from dockyard_api.store import analytics as stored
from dockyard_core.errors import InvalidError
from dockyard_core.kubeclient import User
from dockyard_core.resources.v1alpha1.common import SEMVER_PATTERN

SEMVER = re.compile(SEMVER_PATTERN)

MAX_DAYS = 92
DEFAULT_DAYS = 14
"""The period shown when none is asked for: the 14 UTC days ending ``to``."""


def figures(bucket: stored.Bucket) -> FiguresView:
    latency = bucket.percentiles()
    shown = FiguresView(
        turns=bucket.turns,
        errors=bucket.errors,
        users=len(bucket.users),
        sessions=len(bucket.sessions),
        tokens_in=bucket.tokens_in,
        tokens_out=bucket.tokens_out,
        latency_ms=LatencyView(**latency) if latency else None,
        tools=dict(bucket.tools.most_common()),
    )
    return shown


def day_view(bucket: stored.Bucket, day: date) -> DayView:
    return DayView(day=day.isoformat(), **figures(bucket).model_dump())


def analytics_view(found: stored.Analytics) -> AnalyticsView:
    days = [found.since + timedelta(days=i) for i in range((found.until - found.since).days + 1)]
    versions = []
    for v in found.versions.values():
        versions.append(
            VersionAnalyticsView(
                version=v.version,
                totals=figures(v.totals),
                days=[day_view(v.days.get(d) or stored.Bucket(), d) for d in days],
            )
        )
    newest = {
        v.version: max((d for d, b in v.days.items() if b.turns), default=date.min) for v in found.versions.values()
    }
    versions.sort(key=lambda v: (newest[v.version], v.version), reverse=True)
    return AnalyticsView(
        namespace=found.namespace,
        environment=found.environment,
        since=found.since.isoformat(),
        until=found.until.isoformat(),
        versions=versions,
        truncated=found.truncated,
    )


class AnalyticsService:
    def __init__(self, store: ConversationStore, auth: Authenticator, user: User) -> None:
        self.store = store
        self.auth = auth
        self.user = user

    async def environment_analytics(
        self,
        namespace: str,
        environment: str,
        since: date | None = None,
        until: date | None = None,
        version: str | None = None,
    ) -> AnalyticsView:
        """Over [since, until] (UTC days; default: the 14 days ending today), at most MAX_DAYS days; of one
        ``version`` (a semantic version or ``draft``) or of all."""
        await self.auth.require(self.user, verb="get", namespace=namespace, resource="environments")
        since, until = utc_days(since, until, default_days=DEFAULT_DAYS, max_days=MAX_DAYS)
        if version is not None and version != "draft" and not SEMVER.match(version):
            raise InvalidError(
                "version must be a semantic version (1.2.0) or draft",
                [{"field": "query.version", "message": "not a version"}],
            )
        read = functools.partial(stored.read, namespace=namespace, environment=environment, since=since,
                                 until=until, version=version)  # fmt: skip
        return analytics_view(await self.store.read_only(read))  # SQLite: never holds up the turns
