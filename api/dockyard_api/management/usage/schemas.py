"""Answers of the usage endpoints: the usage report (per day, API key and app version) and the intervention
list (docs/apps-environments.md, "Guardrail interventions")."""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from dockyard_api.management.schemas import View


class InterventionView(View):
    """What one guardrail policy (or the PII protection, policy ``pii``) did to one turn: never the value
    it matched."""

    at: datetime
    app: str
    version: str
    session_id: str
    message_id: str | None
    """The stored reply's id; null when the turn failed and stored nothing."""
    policy: str
    stage: str
    """input, output, toolArguments or toolResults."""
    action: str
    """block, redact or record."""
    reason: str
    tool: str
    """The tool whose arguments or result were checked; empty for input and output."""


class InterventionList(View):
    namespace: str
    environment: str
    items: list[InterventionView]
    """Newest first."""


class UsageCountersView(View):
    requests: int
    errors: int
    rate_limited: int
    tokens_in: int
    tokens_out: int


class UsageDayView(View):
    day: str
    requests: int
    errors: int
    rate_limited: int
    tokens_in: int
    tokens_out: int


class UsageKeyView(View):
    key_id: str
    requests: int
    errors: int
    rate_limited: int
    tokens_in: int
    tokens_out: int


class UsageVersionView(View):
    """One app version's turns over the period (docs/promotion.md): a canary's and the active version's apart."""

    version: str
    requests: int
    errors: int
    tokens_in: int
    tokens_out: int


class UsageReportView(View):
    """An environment's usage over [from, to] (UTC days): totals, the days with usage, and per API key."""

    namespace: str
    environment: str
    since: str = Field(alias="from")
    until: str = Field(alias="to")
    totals: UsageCountersView
    days: list[UsageDayView]
    keys: list[UsageKeyView]
    versions: list[UsageVersionView] = Field(default_factory=list)
    """Per app version (the version each turn's session is pinned to)."""
