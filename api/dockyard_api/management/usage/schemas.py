"""Answers of the intervention list (docs/apps-environments.md, "Guardrail interventions"). The usage
report's views are in :mod:`dockyard_api.management.schemas` with the other management answers."""

from __future__ import annotations

from datetime import datetime

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
