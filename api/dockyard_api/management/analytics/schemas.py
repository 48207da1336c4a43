"""The analytics answer (docs/apps-environments.md, "Analytics")."""

from __future__ import annotations

from pydantic import Field

from dockyard_api.management.schemas import View


class LatencyView(View):
    """Nearest-rank percentiles of the answered turns' latency, in milliseconds."""

    p50: int
    p90: int
    p99: int


class FiguresView(View):
    turns: int
    """Answered turns (stored)."""
    errors: int
    """Calls that failed (nothing stored)."""
    users: int
    """Distinct user ids (metadata.user_id, or the signed-in end user); sessions without one are not counted."""
    sessions: int
    tokens_in: int
    tokens_out: int
    latency_ms: LatencyView | None
    """Null when no answered turn has a recorded latency."""
    tools: dict[str, int]
    """Tool calls by tool name."""


class DayView(FiguresView):
    day: str
    """The UTC day (YYYY-MM-DD)."""


class VersionAnalyticsView(View):
    version: str
    totals: FiguresView
    days: list[DayView]
    """Every day of the period, days without turns as zeros (oldest first)."""


class AnalyticsView(View):
    namespace: str
    environment: str
    since: str = Field(alias="from")
    until: str = Field(alias="to")
    versions: list[VersionAnalyticsView]
    """The versions with turns or errors in the period, the newest turn first."""
    truncated: bool
    """True when the period held more turns than are read at once (the newest 200,000 are counted)."""
