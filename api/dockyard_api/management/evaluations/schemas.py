"""Bodies and answers of evaluation runs (docs/promotion.md, "Runs")."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import Field

from dockyard_api.management.schemas import Body, View
from dockyard_core.resources.v1alpha1.common import DnsLabel, SemVer


class EvaluationStart(Body):
    """Run a version's evaluation suite against the environment."""

    version: SemVer | None = None
    """The version whose suite runs (its agents answer): absent, the environment's active version; another
    version runs in a shadow of the environment (its configuration, nothing of its sessions or usage)."""
    cases: Annotated[list[DnsLabel], Field(max_length=500)] | None = None
    """Only these cases (by name); absent: every case."""


class CaseDiff(View):
    """How one case changed against the previous run in the environment."""

    case: str
    change: str
    """fixed (failed, now passes), broke (passed, now fails), still-failing, still-passing, new, removed."""


class EvaluationRunView(View):
    """A run: its state and progress, its per-case results and its diff against the previous run."""

    id: str
    environment: str
    app: str
    version: str
    shadow: bool
    state: str
    """running, passed (every case), failed (a case failed), error (it could not run), interrupted."""
    started_by: str
    started_at: datetime
    finished_at: datetime | None = None
    total: int
    done: int
    passed: int
    pass_rate: float
    error: str = ""
    results: list[dict[str, Any]] = Field(default_factory=list)
    """Per case: case, category, passed, reasons, response, agent, toolsUsed, error, blocked, latencyMs, rubric."""
    previous_run: str | None = None
    """The run the diff is against (the newest finished run in this environment before this one)."""
    diff: list[CaseDiff] = Field(default_factory=list)


class EvaluationRunList(View):
    items: list[EvaluationRunView]
