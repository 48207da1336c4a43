"""Usage statistics of a deployed app's environment (calls, errors, rate-limited calls, model tokens) per
UTC day and per API key, from the conversation database. The statistics outlive the environment
(docs/conversation-store.md, 'Usage statistics'), so a deleted environment still answers.

Authorisation: the caller (a Kubernetes user) needs ``get`` on ``environments`` in the namespace,
checked with a SubjectAccessReview (the environment itself may be gone). The service reads no
Kubernetes object: ``UsageService(store, auth, user)``, built per request like the other management
services (:mod:`dockyard_api.management.base`).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import UTC, date, datetime, timedelta

from dockyard_api.auth import Authenticator
from dockyard_api.management.schemas import UsageCountersView, UsageDayView, UsageKeyView, UsageReportView
from dockyard_api.store import ConversationStore
from dockyard_api.store.records import UsageReport
from dockyard_core.errors import InvalidError
from dockyard_core.kubeclient import User

MAX_DAYS = 366
DEFAULT_DAYS = 30
"""The period shown when none is asked for: the 30 UTC days ending ``to``."""


def usage_view(report: UsageReport) -> UsageReportView:
    return UsageReportView(
        namespace=report.namespace,
        environment=report.environment,
        since=report.since.isoformat(),
        until=report.until.isoformat(),
        totals=UsageCountersView(**asdict(report.totals)),
        days=[UsageDayView(day=d.isoformat(), **asdict(c)) for d, c in sorted(report.days.items())],
        keys=[UsageKeyView(key_id=k, **asdict(c)) for k, c in sorted(report.keys.items())],
    )


class UsageService:
    """Usage statistics, for one caller."""

    def __init__(self, store: ConversationStore, auth: Authenticator, user: User) -> None:
        self.store = store
        self.auth = auth
        self.user = user

    async def environment_usage(
        self, namespace: str, environment: str, since: date | None = None, until: date | None = None
    ) -> UsageReportView:
        """Usage over [since, until] (UTC days; default: the 30 days ending today), at most MAX_DAYS days."""
        await self.auth.require(self.user, verb="get", namespace=namespace, resource="environments")
        until = until or datetime.now(UTC).date()
        if since is None:
            if until < date.min + timedelta(days=DEFAULT_DAYS - 1):
                raise InvalidError("to is too early", [{"field": "query.to", "message": "before year 1 plus 29 days"}])
            since = until - timedelta(days=DEFAULT_DAYS - 1)
        if since > until:
            raise InvalidError("from must not be after to", [{"field": "query.from", "message": "after to"}])
        if (until - since).days >= MAX_DAYS:
            raise InvalidError(
                f"at most {MAX_DAYS} days at once", [{"field": "query.from", "message": "range too long"}]
            )
        report = await self.store.usage(namespace=namespace, environment=environment, since=since, until=until)
        return usage_view(report)
