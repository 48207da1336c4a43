"""dockyard_core.evaluations: a suite's compile problems, a case judged against its expectations, a run's
summary, and the promotion gate (docs/promotion.md)."""

from __future__ import annotations

from datetime import UTC, datetime

from dockyard_core import evaluations as ev
from dockyard_core.evaluations import Outcome, judge


def test_compile_problems_name_the_field() -> None:
    suite = {
        "judgeModel": "grader",
        "cases": [
            {"name": "a", "message": "hi", "expect": {"matches": ["ok", "(unclosed"]}},
            {"name": "b", "message": "hi", "expect": {"jsonSchema": {"type": "nonsense"}}},
            {"name": "a", "message": "again"},
        ],
    }
    problems = ev.compile_problems(suite, {"tiny": "tiny-chat"})
    fields = [p.field for p in problems]
    assert fields == [
        "spec.evaluations.cases[0].expect.matches[1]",
        "spec.evaluations.cases[1].expect.jsonSchema",
        "spec.evaluations.cases[2].name",
        "spec.evaluations.judgeModel",
    ]
    assert "grader" in problems[-1].message
    assert (
        ev.compile_problems({"cases": [{"name": "a", "message": "x"}], "judgeModel": "tiny-chat"}, {"t": "tiny-chat"})
        == []
    )


def test_judge_each_expectation() -> None:
    good = Outcome(response='{"total": 3} refund', agent="support", tools_used=("orders",), latency_ms=40)
    expect = {
        "toolsUsed": ["orders"],
        "contains": ["REFUND"],
        "notContains": ["sorry"],
        "matches": [r"\d"],
        "maxLatencyMs": 100,
    }
    assert judge(expect, good).passed
    bad = Outcome(response="Sorry, no.", agent="support", latency_ms=400)
    reasons = judge(expect, bad).reasons
    assert reasons == (
        "tool orders was not used (used: none)",
        "the answer does not contain 'REFUND'",
        "the answer contains 'sorry' (expect.notContains)",
        "the answer does not match '\\\\d'",
        "it took 400 ms (expect.maxLatencyMs: 100)",
    )
    # a JSON Schema miss names the path and keyword, never the answer's value
    schema = {"type": "object", "required": ["total"], "properties": {"total": {"type": "integer"}}}
    missed = judge({"jsonSchema": schema}, Outcome(response='{"total": "secret-value"}'))
    assert missed.reasons == ("the answer does not fit the JSON Schema at /total (type)",)
    assert "secret" not in missed.reasons[0]
    assert judge({"jsonSchema": schema}, Outcome(response="not json")).reasons[0].startswith("the answer is not a JSON")


def test_errors_blocks_and_rubrics() -> None:
    failed = Outcome(error="model_unavailable: down")
    assert judge({}, failed).reasons == ("the turn failed: model_unavailable: down",)
    assert judge({"noError": False}, failed).passed
    assert not judge({"noError": False}, Outcome(response="fine")).passed
    assert not judge({"blocked": True}, Outcome(response="ok")).passed
    assert judge({"blocked": True}, Outcome(response="blocked", blocked=True)).passed
    assert not judge({"rubric": "polite"}, Outcome(response="x", rubric=(False, "rude"))).passed
    assert judge({"rubric": "polite"}, Outcome(response="x", rubric=(True, "fine"))).passed


def _results() -> list[dict[str, object]]:
    return [
        {"case": "a", "category": "keyFlow", "passed": True, "reasons": [], "agent": "s", "toolsUsed": ["t"]},
        {"case": "b", "category": "edgeCase", "passed": False, "reasons": ["x missing"], "agent": "s"},
        {"case": "c", "category": "errorHandling", "passed": True, "error": "e: boom", "agent": ""},
    ]


def test_summary_and_newest_per_environment() -> None:
    at = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)
    entry = ev.summary(
        run="r1", environment="bot-staging", shadow=True, version="1.0.0", finished_at=at, by="u", results=_results()
    )
    assert entry["total"] == 3
    assert entry["passed"] == 2
    assert entry["errors"] == 1
    assert entry["passRate"] == 0.6667
    assert entry["agentsReached"] == ["s"]
    assert entry["toolsReached"] == ["t"]
    assert entry["failures"] == [{"case": "b", "category": "edgeCase", "reason": "x missing"}]
    assert [c["category"] for c in entry["categories"]] == ["keyFlow", "edgeCase", "errorHandling"]
    older = {**entry, "run": "r0", "finishedAt": "2026-11-26T07:00:00Z"}
    other = {**entry, "run": "rx", "environment": "bot-prod"}
    kept = ev.with_summary([older, other], entry)
    assert [k["run"] for k in kept] == ["r1", "rx"]
    assert ev.latest(kept, "bot-prod")["run"] == "rx"  # type: ignore[index]


def test_gate() -> None:
    at = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)
    run = ev.summary(
        run="r1", environment="bot-prod", shadow=True, version="1.1.0", finished_at=at, by="u", results=_results()
    )
    gate = {"requireEvaluation": {"minPassRate": 0.9}}
    assert "has no evaluation run in bot-prod" in str(
        ev.gate_problem(promotion=gate, environment="bot-prod", version="1.1.0", summaries=[])
    )
    refused = ev.gate_problem(promotion=gate, environment="bot-prod", version="1.1.0", summaries=[run])
    assert refused is not None
    assert "case b (edgeCase): x missing" in refused
    assert "2/3" in refused
    assert (
        ev.gate_problem(
            promotion={"requireEvaluation": {"minPassRate": 0.5}},
            environment="bot-prod",
            version="1.1.0",
            summaries=[run],
        )
        is None
    )
    staged = {**run, "environment": "bot-staging", "passRate": 1.0, "passed": 3, "failures": []}
    after = {"after": "staging"}
    history = [{"version": "1.1.0", "healthy": True}]
    assert "does not exist" in str(
        ev.gate_problem(promotion=after, environment="bot-prod", version="1.1.0", summaries=[staged], before=None)
    )
    assert "not been deployed to bot-staging" in str(
        ev.gate_problem(
            promotion=after,
            environment="bot-prod",
            version="1.1.0",
            summaries=[staged],
            before=("bot-staging", [{"version": "1.0.0", "healthy": True}]),
        )
    )
    assert (
        ev.gate_problem(
            promotion=after,
            environment="bot-prod",
            version="1.1.0",
            summaries=[staged],
            before=("bot-staging", history),
        )
        is None
    )
