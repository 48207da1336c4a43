"""Evaluation suites (docs/promotion.md), pure: what makes a suite impossible to run (the version webhook's
check, each problem naming its field), how one case's outcome is judged against its expectations, the
summary of a run (what ``status.evaluations`` of the version keeps: no chat text), and the promotion gate
an Environment's ``spec.promotion`` sets (the Environment webhook's check).

A case's failure reasons are written from its expectations (the text it should contain, the tool it should
have used, the JSON Schema path it missed), never from the answer, so a summary in etcd holds no chat text;
the answers themselves are kept with the per-case results in the conversation store.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jsonschema

from dockyard_core.modelrefs import resolve_model
from dockyard_core.problems import Problem
from dockyard_core.resources.v1alpha1.evaluations import CATEGORIES, FAILURES_LIMIT, SUMMARIES_LIMIT

REASON_LIMIT = 512


def compile_problems(suite: Mapping[str, Any] | None, models: Mapping[str, str] | None = None) -> list[Problem]:
    """What makes ``spec.evaluations`` impossible to run, each with its field: a regular expression that does
    not compile, a JSON Schema that is not one, duplicate case names, and (with ``models``: ModelDeployment
    object name -> display name) a judge model that is not a ModelDeployment of the namespace."""
    problems: list[Problem] = []
    if not suite:
        return problems
    names: set[str] = set()
    for i, case in enumerate(suite.get("cases") or ()):
        where = f"spec.evaluations.cases[{i}]"
        name = str(case.get("name") or "")
        if name in names:
            problems.append(Problem(f"{where}.name", f"case names must be unique: {name}"))
        names.add(name)
        expect = case.get("expect") or {}
        for j, pattern in enumerate(expect.get("matches") or ()):
            try:
                re.compile(str(pattern))
            except re.error as exc:
                problems.append(Problem(f"{where}.expect.matches[{j}]", f"not a regular expression: {exc}"))
        if expect.get("jsonSchema") is not None:
            try:
                jsonschema.Draft202012Validator.check_schema(expect["jsonSchema"])
            except jsonschema.exceptions.SchemaError as exc:
                problems.append(Problem(f"{where}.expect.jsonSchema", f"not a JSON Schema: {exc.message}"))
    judge = suite.get("judgeModel")
    if judge and models is not None:
        resolved = resolve_model(str(judge), models)
        if resolved.problem:
            problems.append(Problem("spec.evaluations.judgeModel", f"the judge model: {resolved.problem}"))
    return problems


@dataclass(frozen=True)
class Outcome:
    """What one case's turn did."""

    response: str = ""
    agent: str = ""
    tools_used: tuple[str, ...] = ()
    error: str = ""
    """The error code and message when the turn failed (empty: it answered)."""
    blocked: bool = False
    latency_ms: int = 0
    rubric: tuple[bool, str] | None = None
    """The judge's verdict (passed, its reason) when the case has a rubric and the turn answered."""


@dataclass(frozen=True)
class Judged:
    passed: bool
    reasons: tuple[str, ...] = ()


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _schema_miss(schema: Mapping[str, Any], response: str) -> str | None:
    try:
        document = json.loads(response)
    except ValueError:
        return "the answer is not a JSON document (expect.jsonSchema)"
    error = jsonschema.exceptions.best_match(jsonschema.Draft202012Validator(schema).iter_errors(document))
    if error is None:
        return None
    path = "/" + "/".join(str(p) for p in error.absolute_path)
    return f"the answer does not fit the JSON Schema at {path} ({error.validator})"


def judge(expect: Mapping[str, Any], outcome: Outcome) -> Judged:
    """Whether ``outcome`` meets ``expect`` (a case's ``expect``, camelCase), and every reason it does not."""
    reasons: list[str] = []
    no_error = expect.get("noError", True)
    if outcome.error:
        if no_error:
            return Judged(False, (_short(f"the turn failed: {outcome.error}", 300),))
        return Judged(True)
    if not no_error:
        return Judged(False, ("the turn answered, but the case expects an error (expect.noError: false)",))
    blocked = expect.get("blocked")
    if blocked is True and not outcome.blocked:
        reasons.append("the guardrails did not block the turn (expect.blocked: true)")
    if blocked is False and outcome.blocked:
        reasons.append("the guardrails blocked the turn (expect.blocked: false)")
    used = set(outcome.tools_used)
    for tool in expect.get("toolsUsed") or ():
        if tool not in used and not any(u.endswith("/" + tool) for u in used):
            shown = ", ".join(sorted(used)) or "none"
            reasons.append(f"tool {tool} was not used (used: {_short(shown)})")
    text = outcome.response.casefold()
    for phrase in expect.get("contains") or ():
        if str(phrase).casefold() not in text:
            reasons.append(f"the answer does not contain {_short(str(phrase))!r}")
    for phrase in expect.get("notContains") or ():
        if str(phrase).casefold() in text:
            reasons.append(f"the answer contains {_short(str(phrase))!r} (expect.notContains)")
    for pattern in expect.get("matches") or ():
        if re.search(str(pattern), outcome.response) is None:
            reasons.append(f"the answer does not match {_short(str(pattern))!r}")
    if expect.get("jsonSchema") is not None:
        miss = _schema_miss(expect["jsonSchema"], outcome.response)
        if miss:
            reasons.append(miss)
    bound = expect.get("maxLatencyMs")
    if bound is not None and outcome.latency_ms > int(bound):
        reasons.append(f"it took {outcome.latency_ms} ms (expect.maxLatencyMs: {bound})")
    if expect.get("rubric"):
        if outcome.rubric is None:
            reasons.append("the rubric was not judged")
        elif not outcome.rubric[0]:
            reasons.append("the judge found the rubric not met: " + _short(outcome.rubric[1], 200))
    return Judged(not reasons, tuple(_short(r, REASON_LIMIT) for r in reasons))


@dataclass(frozen=True)
class CaseResult:
    """One case of a run: what its turn did and how it was judged."""

    case: str
    category: str
    outcome: Outcome
    judged: Judged

    def as_json(self) -> dict[str, Any]:
        o = self.outcome
        return {
            "case": self.case,
            "category": self.category,
            "passed": self.judged.passed,
            "reasons": list(self.judged.reasons),
            "response": o.response,
            "agent": o.agent,
            "toolsUsed": list(o.tools_used),
            "error": o.error,
            "blocked": o.blocked,
            "latencyMs": o.latency_ms,
            "rubric": None if o.rubric is None else {"passed": o.rubric[0], "reason": o.rubric[1]},
        }


@dataclass
class Tally:
    total: int = 0
    passed: int = 0
    errors: int = 0
    categories: dict[str, list[int]] = field(default_factory=dict)
    agents: set[str] = field(default_factory=set)
    tools: set[str] = field(default_factory=set)
    failures: list[dict[str, str]] = field(default_factory=list)

    @property
    def pass_rate(self) -> float:
        return round(self.passed / self.total, 4) if self.total else 0.0


def tally(results: Iterable[Mapping[str, Any]]) -> Tally:
    """Counts of a run's per-case results (their JSON, :meth:`CaseResult.as_json`)."""
    t = Tally()
    for r in results:
        t.total += 1
        counts = t.categories.setdefault(str(r["category"]), [0, 0])
        counts[0] += 1
        if r.get("error"):
            t.errors += 1
        else:
            if r.get("agent"):
                t.agents.add(str(r["agent"]))
            t.tools.update(str(x) for x in r.get("toolsUsed") or ())
        if r["passed"]:
            t.passed += 1
            counts[1] += 1
        elif len(t.failures) < FAILURES_LIMIT:
            reason = "; ".join(r.get("reasons") or ()) or "failed"
            t.failures.append(
                {"case": str(r["case"]), "category": str(r["category"]), "reason": _short(reason, REASON_LIMIT)}
            )
    return t


def summary(
    *,
    run: str,
    environment: str,
    shadow: bool,
    version: str,
    finished_at: datetime,
    by: str,
    results: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The ``status.evaluations`` entry of a finished run (camelCase JSON; no chat text)."""
    t = tally(results)
    return {
        "run": run,
        "environment": environment,
        "shadow": shadow,
        "appVersion": version,
        "finishedAt": finished_at.isoformat().replace("+00:00", "Z"),
        "by": by[:253],
        "total": t.total,
        "passed": t.passed,
        "errors": t.errors,
        "passRate": t.pass_rate,
        "categories": [
            {"category": c, "total": t.categories[c][0], "passed": t.categories[c][1]}
            for c in CATEGORIES
            if c in t.categories
        ],
        "agentsReached": sorted(t.agents)[:64],
        "toolsReached": sorted(t.tools)[:128],
        "failures": t.failures,
    }


def with_summary(current: Sequence[Mapping[str, Any]], entry: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``status.evaluations`` after ``entry``: the newest run per environment, newest first, bounded."""
    kept = [dict(e) for e in current if e.get("environment") != entry["environment"]]
    return [dict(entry), *kept][:SUMMARIES_LIMIT]


def latest(summaries: Sequence[Mapping[str, Any]], environment: str) -> Mapping[str, Any] | None:
    """The newest summary of a run in ``environment``."""
    found = [s for s in summaries if s.get("environment") == environment]
    return max(found, key=lambda s: str(s.get("finishedAt") or ""), default=None)


def describe_failures(entry: Mapping[str, Any], limit: int = 3) -> str:
    """The first failed cases of a run and why: ``case refund-flow (keyFlow): the answer does not ...``."""
    shown = [
        f"case {f['case']} ({f.get('category', 'keyFlow')}): {f.get('reason', '')}" for f in entry.get("failures") or []
    ]
    more = len(shown) - limit
    return "; ".join(shown[:limit]) + (f"; and {more} more" if more > 0 else "")


def _rate(entry: Mapping[str, Any]) -> str:
    return f"{entry.get('passed', 0)}/{entry.get('total', 0)} cases passed ({float(entry.get('passRate') or 0):.0%})"


def gate_problem(
    *,
    promotion: Mapping[str, Any] | None,
    environment: str,
    version: str,
    summaries: Sequence[Mapping[str, Any]],
    before: tuple[str, Sequence[Mapping[str, Any]]] | None = None,
) -> str | None:
    """Why ``version`` may not be deployed to ``environment`` under its ``spec.promotion`` (None: it may).
    ``summaries``: the version's ``status.evaluations``; ``before``: the object name of the environment
    ``promotion.after`` names and its ``status.history`` (None when it does not exist)."""
    if not promotion:
        return None
    required = promotion.get("requireEvaluation")
    threshold = float((required or {}).get("minPassRate", 1.0)) if required is not None else 1.0
    how = "POST .../environments/{env}/evaluations {version} (a shadow run), then deploy again"
    if required is not None:
        run = latest(summaries, environment)
        if run is None:
            return (
                f"spec.promotion.requireEvaluation: version {version} has no evaluation run in {environment}; "
                f"run its suite there first ({how.replace('{env}', environment)})"
            )
        if float(run.get("passRate") or 0) < threshold:
            return (
                f"spec.promotion.requireEvaluation: version {version} did not pass its suite in {environment} "
                f"(run {run['run']}: {_rate(run)}, below minPassRate {threshold:g}): {describe_failures(run)}"
            )
    after = promotion.get("after")
    if after:
        if before is None:
            return f"spec.promotion.after: environment {after} does not exist"
        name, history = before
        if not any(h.get("version") == version and h.get("healthy") is True for h in history):
            return (
                f"spec.promotion.after: version {version} has not been deployed to {name} yet (the promotion path "
                f"goes through {name} first)"
            )
        run = latest(summaries, name)
        if run is None:
            return f"spec.promotion.after: version {version} has no evaluation run in {name}; run its suite there"
        if float(run.get("passRate") or 0) < threshold:
            return (
                f"spec.promotion.after: version {version} did not pass its suite in {name} (run {run['run']}: "
                f"{_rate(run)}, below {threshold:g}): {describe_failures(run)}"
            )
    return None
