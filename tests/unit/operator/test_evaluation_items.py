"""The checklist items an evaluation run computes (operator/dockyard_operator/evaluation_items.py)."""

from __future__ import annotations

from typing import Any

from dockyard_operator import environments as envs
from dockyard_operator.evaluation_items import evaluation_items, evaluation_run_at

CONTENT: dict[str, Any] = {
    "agents": [{"name": "support", "tools": ["orders"]}, {"name": "billing"}],
    "evaluations": {"cases": [{"name": "a", "message": "hi"}]},
}


def _run(**over: Any) -> dict[str, Any]:
    run = {
        "run": "r1",
        "environment": "bot-prod",
        "finishedAt": "2026-11-26T08:00:00Z",
        "total": 3,
        "passed": 3,
        "errors": 0,
        "categories": [
            {"category": "keyFlow", "total": 1, "passed": 1},
            {"category": "edgeCase", "total": 1, "passed": 1},
            {"category": "errorHandling", "total": 1, "passed": 1},
        ],
        "agentsReached": ["billing", "support"],
        "toolsReached": ["orders"],
        "failures": [],
    }
    return run | over


def test_all_done_from_a_passing_run() -> None:
    items = evaluation_items(CONTENT, [_run()], "bot-prod", "1.0.0")
    assert {k: v[0] for k, v in items.items()} == {
        "Key flows tested": "Done",
        "Edge cases tested": "Done",
        "Error handling tested": "Done",
        "Diagnostics pass": "Done",
        "Agents tested": "Done",
    }
    assert items["Key flows tested"][1] == "run r1: 1/1 keyFlow case(s) passed"


def test_what_is_missing_is_said() -> None:
    run = _run(
        passed=2,
        categories=[{"category": "keyFlow", "total": 2, "passed": 1}],
        agentsReached=["support"],
        toolsReached=[],
        failures=[{"case": "refund", "category": "keyFlow", "reason": "x"}],
    )
    items = evaluation_items(CONTENT, [run], "bot-prod", "1.0.0")
    assert items["Key flows tested"] == ("NotDone", "run r1: 1/2 keyFlow case(s) passed; failed: refund")
    assert items["Edge cases tested"][0] == "NotDone"
    assert "no edgeCase case" in items["Edge cases tested"][1]
    assert items["Diagnostics pass"] == (
        "NotDone",
        "run r1: no case answered by agent(s) billing; no case called tool(s) orders",
    )
    assert "billing" in items["Agents tested"][1]
    # a run in another environment does not count; no suite says so
    other = evaluation_items(CONTENT, [_run(environment="bot-staging")], "bot-prod", "1.0.0")
    assert all(state == "NotDone" and "no evaluation run" in why for state, why in other.values())
    none = evaluation_items({"agents": []}, [], "bot-prod", "1.0.0")
    assert all("no evaluation suite" in why for _, why in none.values())
    assert evaluation_run_at([_run()], "bot-prod") == "r1"
    assert evaluation_run_at([], "bot-prod") == ""


def test_checklist_has_no_manual_testing_items() -> None:
    items = envs.checklist(
        content=CONTENT,
        tool_jobs={},
        key_count=0,
        version_found=True,
        evaluations=[_run()],
        tested=envs.ToolTesting("bot-prod", "1.0.0", [], {}),
    )
    testing = {i.item: i.state for i in items if i.category == "Testing"}
    assert testing == dict.fromkeys(
        ("Diagnostics pass", "Key flows tested", "Edge cases tested", "Error handling tested"), "Done"
    )
    assert next(i for i in items if i.item == "Agents tested").state == "Done"


def test_an_unexpected_error_fails_diagnostics() -> None:
    failure = {"case": "lookup", "category": "keyFlow", "reason": "the turn failed: model_unavailable: down"}
    items = evaluation_items(CONTENT, [_run(passed=2, errors=1, failures=[failure])], "bot-prod", "1.0.0")
    assert items["Diagnostics pass"] == ("NotDone", "run r1: case(s) lookup ended in an unexpected error")
