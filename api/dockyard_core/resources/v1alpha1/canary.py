"""An Environment's canary and SLOs (docs/promotion.md): the parts of its spec and status that split new
sessions between the active version and a canary, and the service levels watched during a canary and after
a deploy (a breach moves new sessions back to the previous working version on its own)."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from dockyard_core.resources.base import DockyardModel
from dockyard_core.resources.v1alpha1.common import SemVer
from dockyard_core.resources.v1alpha1.evaluations import Expectations

CanaryOutcome = Literal["Promoted", "Aborted", "RolledBack", "Reweighted"]
CanaryPhase = Literal["Running", "Promoted", "Aborted", "RolledBack"]

CANARY_REQUEST_ANNOTATION = "dockyard.dev/canary-request"
"""What was asked of the canary and a unique id: ``Start|Weight|Promote|Abort|RolledBack <id>``."""
ROLLOUT_REASON_ANNOTATION = "dockyard.dev/rollout-reason"
"""Why the watcher rolled back (the breached SLO and its figures, as text), for the history entry."""
ROLLOUT_FIGURES_ANNOTATION = "dockyard.dev/rollout-figures"
"""The figures behind an automatic rollback (JSON of :class:`SloFigures`), for the history entry."""


class CanarySpec(DockyardModel):
    """A canary: a share of NEW sessions starts on another version; every session stays on the version it
    started on (the split is made per session inside the runtime, not per pod)."""

    app_version: SemVer
    """The version the canary's sessions start on (the AppVersion of appRef with this spec.version)."""
    weight: Annotated[int, Field(ge=0, le=100)]
    """Percent of new sessions that start on the canary (a session id's hash decides, the same on every
    facade replica); 0 keeps it deployed with no new sessions."""


class SloSpec(DockyardModel):
    """Service levels the facade watches during a canary (the canary's sessions) and for ``watchSeconds``
    after a deploy (the new active version's). A breach over ``windowSeconds`` moves new sessions back to
    the previous working version: the canary ends (RolledBack), or, after a deploy, the previous working
    version is deployed again (an AutoRollback history entry)."""

    max_error_rate: Annotated[float, Field(ge=0, le=1)] = 0.05
    """Highest share of turns that end in an error (1: not watched)."""
    max_p95_latency_seconds: Annotated[float, Field(gt=0, le=3600)] | None = None
    """Highest 95th percentile of a turn's duration; absent: not watched."""
    min_evaluation_pass_rate: Annotated[float, Field(ge=0, le=1)] | None = None
    """Lowest share of sampled live turns that pass the evaluation (scored after the answer, off the
    request path); absent: not watched."""
    evaluation_sample_rate: Annotated[float, Field(ge=0, le=1)] = 0.1
    """Share of live turns scored (chosen by their message id's hash)."""
    expect: Expectations | None = None
    """What a sampled live turn's answer must show, in the words of an evaluation case's expectations
    (docs/promotion.md; a rubric is not judged live); absent: that it answered without an error."""
    window_seconds: Annotated[int, Field(ge=5, le=86_400)] = 60
    """The figures are those of the turns of the last windowSeconds."""
    min_turns: Annotated[int, Field(ge=1, le=100_000)] = 10
    """No verdict on fewer turns (or, for the pass rate, fewer scored turns) in the window."""
    watch_seconds: Annotated[int, Field(ge=0, le=7 * 86_400)] = 600
    """How long after a deploy the new active version is watched (0: only canaries)."""


class SloFigures(DockyardModel):
    """One version's figures over the watch window."""

    version: Annotated[str, Field(max_length=32)] = ""
    """The version they are of."""
    turns: Annotated[int, Field(ge=0)] = 0
    """Turns finished in the window."""
    errors: Annotated[int, Field(ge=0)] = 0
    """Of which ended in an error."""
    error_rate: float | None = None
    """errors / turns (absent with no turn)."""
    p95_latency_seconds: float | None = None
    """95th percentile of the turns' durations."""
    scored: Annotated[int, Field(ge=0)] = 0
    """Sampled turns scored by the evaluation."""
    evaluation_pass_rate: float | None = None
    """Share of the scored turns that passed."""
    window_seconds: Annotated[int, Field(ge=0)] = 0
    """The window they cover."""


class CanaryStatus(DockyardModel):
    """The canary as the operator last saw it (what ``kubectl get env`` prints in its Canary column)."""

    version: Annotated[str, Field(max_length=32)]
    """The canary's version."""
    weight: Annotated[int, Field(ge=0, le=100)]
    """Percent of new sessions it gets (0 once it ended)."""
    phase: CanaryPhase
    """Running, or how it ended."""
    since: datetime
    """When it started, or ended."""
    summary: Annotated[str, Field(max_length=128)]
    """One line: "1.1.0 20%", "RolledBack 1.1.0", "Promoted 1.1.0"."""
    reason: Annotated[str, Field(max_length=1024)] = ""
    """Why it ended (an automatic rollback: the breached SLO and its figures)."""


class SloStatus(DockyardModel):
    """What the SLO watcher last measured (written by the facade replica that holds the watcher's Lease)."""

    watching: Annotated[str, Field(max_length=256)] = ""
    """What is watched: "canary 1.1.0", "deploy 1.1.0 until <time>", or "" (nothing)."""
    checked_at: datetime
    """When the figures were computed."""
    figures: Annotated[list[SloFigures], Field(max_length=4)] = Field(default_factory=list)
    """Per version: the active one and the canary's (or the newly deployed one's)."""
    last_breach: Annotated[str, Field(max_length=1024)] = ""
    """The last breach that moved new sessions back, with its figures."""
