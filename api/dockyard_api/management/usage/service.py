"""What the conversation database records of a deployed app's environment: its usage statistics (calls,
errors, rate-limited calls, model tokens) per UTC day and per API key, and the interventions of its
guardrails and PII protection (docs/guardrails.md), newest first. Both outlive the environment
(docs/conversation-store.md), so a deleted environment still answers.

Authorisation: the caller (a Kubernetes user) needs ``get`` on ``environments`` in the namespace,
checked with a SubjectAccessReview (the environment itself may be gone). The service reads no
Kubernetes object: ``UsageService(store, auth, user)``, built per request like the other management
services (:mod:`dockyard_api.management.base`).
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import date

from dockyard_api.auth import Authenticator
from dockyard_api.management.period import utc_days
from dockyard_api.management.usage.schemas import (
    InterventionList,
    InterventionView,
    UsageCountersView,
    UsageDayView,
    UsageKeyView,
    UsageReportView,
    UsageVersionView,
)
from dockyard_api.store import ConversationStore, outcomes
from dockyard_api.store.interventions import LIST_LIMIT
from dockyard_api.store.records import StoredIntervention, UsageReport
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


def intervention_view(found: StoredIntervention) -> InterventionView:
    return InterventionView(
        at=found.at,
        app=found.app,
        version=found.version,
        session_id=found.session_id,
        message_id=found.message_id,
        policy=found.policy,
        stage=found.stage,
        action=found.action,
        reason=found.reason,
        tool=found.tool,
    )


class UsageService:
    """Usage statistics and interventions, for one caller."""

    def __init__(self, store: ConversationStore, auth: Authenticator, user: User) -> None:
        self.store = store
        self.auth = auth
        self.user = user

    async def environment_usage(
        self, namespace: str, environment: str, since: date | None = None, until: date | None = None
    ) -> UsageReportView:
        """Usage over [since, until] (UTC days; default: the 30 days ending today), at most MAX_DAYS days."""
        await self.auth.require(self.user, verb="get", namespace=namespace, resource="environments")
        since, until = utc_days(since, until, default_days=DEFAULT_DAYS, max_days=MAX_DAYS)
        report = await self.store.usage(namespace=namespace, environment=environment, since=since, until=until)
        view = usage_view(report)
        found = await self.store.run(lambda conn: outcomes.usage(conn, namespace, environment, since, until))
        view.versions = [UsageVersionView(version=v, **asdict(c)) for v, c in sorted(found.items())]
        return view

    async def interventions(self, namespace: str, environment: str, limit: int = 50) -> InterventionList:
        """The environment's ``limit`` newest interventions (1 to LIST_LIMIT), newest first."""
        await self.auth.require(self.user, verb="get", namespace=namespace, resource="environments")
        if not 1 <= limit <= LIST_LIMIT:
            raise InvalidError(
                f"limit must be 1 to {LIST_LIMIT}", [{"field": "query.limit", "message": f"1 to {LIST_LIMIT}"}]
            )
        found = await self.store.list_interventions(namespace, environment, limit=limit)
        return InterventionList(
            namespace=namespace, environment=environment, items=[intervention_view(i) for i in found]
        )
