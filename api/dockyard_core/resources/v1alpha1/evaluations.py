"""Evaluation suites of an app (``spec.evaluations`` of an App's draft and of an AppVersion, immutable with
the version) and the summaries of their runs (``status.evaluations``), docs/promotion.md.

A suite is a list of cases: a message (after an optional short conversation) and what the answer must
show: the tools used, text it contains or matches, a JSON Schema it fits, no error, a latency bound, and
optionally a rubric a model the owner names judges. The schema's rules (CEL) refuse what can be seen without
compiling; a regular expression, a JSON Schema and the judge model are checked by the version webhook
(:func:`dockyard_core.evaluations.compile_problems`). Run summaries hold no chat text: counts, the case
names and why each failed (in the words of its expectation), the agents and tools the run reached.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from dockyard_core.resources.base import DockyardModel, ListMap, ListSet
from dockyard_core.resources.cel import Rule
from dockyard_core.resources.v1alpha1.common import DnsLabel, ObjectName

CaseCategory = Literal["keyFlow", "edgeCase", "errorHandling"]
CATEGORIES: tuple[CaseCategory, ...] = ("keyFlow", "edgeCase", "errorHandling")
CASES_LIMIT = 500
SUMMARIES_LIMIT = 32
FAILURES_LIMIT = 20

Phrase = Annotated[str, Field(min_length=1, max_length=512)]
Pattern = Annotated[str, Field(min_length=1, max_length=1024)]
ToolName = Annotated[str, Field(min_length=1, max_length=192)]


class EvaluationMessage(DockyardModel):
    """One earlier message of a case's conversation."""

    role: Literal["user", "assistant"]
    """Who said it."""
    content: Annotated[str, Field(min_length=1, max_length=8192)]
    """What was said."""


class Expectations(DockyardModel):
    """What a case's answer must show; every expectation set must hold for the case to pass."""

    tools_used: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=192)]], Field(max_length=16), ListSet()
    ] | (None) = None
    """Tools the turn must have called (an HTTP tool's name, or <server>/<tool>)."""
    contains: Annotated[list[Phrase], Field(max_length=16)] | None = None
    """Texts the answer must contain (ignoring case)."""
    not_contains: Annotated[list[Phrase], Field(max_length=16)] | None = None
    """Texts the answer must not contain (ignoring case)."""
    matches: Annotated[list[Pattern], Field(max_length=8)] | None = None
    """Regular expressions (Python syntax) the answer must each match somewhere."""
    json_schema: dict[str, Any] | None = None
    """A JSON Schema (draft 2020-12) the answer must be a JSON document of."""
    no_error: bool = True
    """The turn must answer (no error). false: the case passes when the turn fails (an error-handling case
    that expects a refusal), and the other expectations are not checked."""
    blocked: bool | None = None
    """true: the guardrails must block the turn; false: they must not (unset: either)."""
    max_latency_ms: Annotated[int, Field(ge=1, le=600_000)] | None = None
    """The turn must answer within this many milliseconds."""
    rubric: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    """What a good answer does, judged by the suite's judgeModel (a pass or fail verdict with a reason)."""


class EvaluationCase(DockyardModel):
    """One case: a message (after an optional conversation) and its expectations."""

    name: DnsLabel
    """The case's name, unique in the suite (results and diffs name it)."""
    category: CaseCategory = "keyFlow"
    """Which checklist item the case counts for: keyFlow (Key flows tested), edgeCase (Edge cases tested),
    errorHandling (Error handling tested)."""
    conversation: Annotated[list[EvaluationMessage], Field(max_length=16)] = Field(default_factory=list)
    """Earlier messages the agent reads as the session's history, oldest first."""
    message: Annotated[str, Field(min_length=1, max_length=16384)]
    """The user's message the turn answers."""
    expect: Expectations = Field(default_factory=Expectations)
    """What the answer must show."""


def _judge_named(suite: EvaluationSuite) -> bool:
    return suite.judge_model is not None or not any(c.expect.rubric for c in suite.cases)


class EvaluationSuite(DockyardModel):
    """The app's evaluation suite: its cases and, for rubrics, the model that judges them."""

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "has(self.judgeModel) || !has(self.cases) || !self.cases.exists(c, has(c.expect) && has(c.expect.rubric))",
            "a case with a rubric needs a judge: set judgeModel (a ModelDeployment's name or display name)",
            check=_judge_named,
            field_path=".judgeModel",
            reason="FieldValueRequired",
        ),
    )

    judge_model: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    """The ModelDeployment (in this namespace) that judges rubrics, by object name or display name."""
    concurrency: Annotated[int, Field(ge=1, le=16)] = 4
    """How many cases run at once."""
    cases: Annotated[list[EvaluationCase], Field(min_length=1, max_length=CASES_LIMIT), ListMap("name")]
    """The cases, run in this order (``concurrency`` at a time)."""


class CategoryCount(DockyardModel):
    """How the cases of one category went."""

    category: CaseCategory
    """keyFlow, edgeCase or errorHandling."""
    total: Annotated[int, Field(ge=0)] = 0
    """Cases of the category run."""
    passed: Annotated[int, Field(ge=0)] = 0
    """Cases of the category that passed."""


class CaseFailure(DockyardModel):
    """A case that failed, and why (the expectation it missed; never the answer's text)."""

    case: DnsLabel
    """The case's name."""
    category: CaseCategory = "keyFlow"
    """The case's category."""
    reason: Annotated[str, Field(max_length=512)] = ""
    """Why it failed: each expectation it missed, or the turn's error."""


class EvaluationSummary(DockyardModel):
    """A finished run of the version's suite (the newest per environment), written by the facade: what the
    checklist's Testing items and the environments' promotion gates read. Per-case results and answers are
    in the conversation store (GET .../evaluations/{run})."""

    run: Annotated[str, Field(min_length=1, max_length=64)]
    """The run's id."""
    environment: ObjectName
    """The Environment (object name) whose configuration the run used."""
    shadow: bool = False
    """Whether the version ran in a shadow of the environment (it was not the environment's active version)."""
    app_version: Annotated[str, Field(min_length=1, max_length=32)]
    """The version run (draft for the App's draft)."""
    finished_at: datetime
    """When the run ended."""
    by: Annotated[str, Field(max_length=253)] = ""
    """Who started it (the Kubernetes user)."""
    total: Annotated[int, Field(ge=0)] = 0
    """Cases run."""
    passed: Annotated[int, Field(ge=0)] = 0
    """Cases that passed."""
    errors: Annotated[int, Field(ge=0)] = 0
    """Cases whose turn failed with an error (counted in total, not in passed unless expected)."""
    pass_rate: Annotated[float, Field(ge=0, le=1)] = 0
    """passed / total."""
    categories: Annotated[list[CategoryCount], Field(max_length=3), ListMap("category")] = Field(default_factory=list)
    """The counts per case category (what the Testing items read)."""
    agents_reached: Annotated[list[str], Field(max_length=64), ListSet()] = Field(default_factory=list)
    """Agents that answered a case without an error."""
    tools_reached: Annotated[list[str], Field(max_length=128), ListSet()] = Field(default_factory=list)
    """Tools called in a case that answered."""
    failures: Annotated[list[CaseFailure], Field(max_length=FAILURES_LIMIT)] = Field(default_factory=list)
    """The failed cases (the first FAILURES_LIMIT), each with why."""


EvaluationSummaries = Annotated[list[EvaluationSummary], Field(max_length=SUMMARIES_LIMIT)]


class RequireEvaluation(DockyardModel):
    """A version is deployed here only after a run of its suite in this environment passed."""

    min_pass_rate: Annotated[float, Field(ge=0, le=1)] = 1.0
    """The least share of passed cases (0 to 1; default 1: every case)."""


class Promotion(DockyardModel):
    """What a version must have done before it is deployed to the environment (docs/promotion.md).
    Rollbacks to a previous working version are not gated."""

    require_evaluation: RequireEvaluation | None = None
    """The newest run of the version's suite against this environment (a shadow run while it is not
    deployed here) must pass at minPassRate."""
    after: ObjectName | None = None
    """An environment of the same app (object or display name) the version must have been deployed to and
    passed its suite in first (at minPassRate, or every case without requireEvaluation): e.g. staging for
    production."""
