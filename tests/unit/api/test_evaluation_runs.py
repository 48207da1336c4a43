"""Evaluation runs in the conversation store (SQLite), the diff between two runs, and the judge's verdict
(docs/promotion.md)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from dockyard_api.management.evaluations.service import diff, run_view
from dockyard_api.runtime.evaluation import RUBRIC_SCHEMA, parse_rubric, rubric_request
from dockyard_api.store import ConversationStore, EvaluationRuns
from dockyard_core.errors import NotFoundError


def _result(case: str, passed: bool) -> dict[str, Any]:
    return {"case": case, "category": "keyFlow", "passed": passed, "reasons": [] if passed else ["x"]}


def test_runs_are_kept_with_their_results_listed_and_diffed(tmp_path: Path) -> None:
    async def main() -> None:
        store = ConversationStore(f"sqlite:///{tmp_path / 'dockyard.db'}")
        await store.start()
        runs = EvaluationRuns(store)
        try:
            common: dict[str, Any] = {"namespace": "ns", "environment": "bot-draft", "app": "bot", "by": "alice"}
            await runs.create(run_id="a1", version="draft", shadow=False, total=2, bound_seconds=600, **common)
            first = await runs.get("ns", "bot-draft", "a1")
            assert (first.phase, first.done, first.results) == ("running", 0, [])
            await runs.progress("a1", [_result("one", True)])
            assert (await runs.get("ns", "bot-draft", "a1")).done == 1
            await runs.finish("a1", "failed", [_result("one", True), _result("two", False)])
            await asyncio.sleep(0.01)
            await runs.create(run_id="b2", version="1.1.0", shadow=True, total=2, bound_seconds=600, **common)
            await runs.finish("b2", "passed", [_result("two", True), _result("three", True)])
            second = await runs.get("ns", "bot-draft", "b2")
            previous = await runs.previous(second)
            assert previous is not None
            assert previous.id == "a1"
            assert [(d.case, d.change) for d in diff(previous, second)] == [
                ("two", "fixed"),
                ("three", "new"),
                ("one", "removed"),
            ]
            view = run_view(second, previous)
            assert (view.pass_rate, view.previous_run, view.shadow) == (1.0, "a1", True)
            assert [r.id for r in await runs.list("ns", "bot-draft")] == ["b2", "a1"]
            assert await runs.list("ns", "other") == []
            with pytest.raises(NotFoundError):
                await runs.get("ns", "other", "a1")  # another environment's run is not found
            # a run whose replica stopped reads interrupted after its deadline
            await runs.create(run_id="c3", version="draft", shadow=False, total=1, bound_seconds=-1, **common)
            assert (await runs.get("ns", "bot-draft", "c3")).phase == "interrupted"
        finally:
            await store.close()

    asyncio.run(main())


def test_the_judge_answers_a_constrained_verdict() -> None:
    body = rubric_request({"model": "grader", "max_tokens": 5, "stop": ["x"], "temperature": 0}, "polite", "hi", "yo")
    assert body["response_format"] == {"type": "json_object", "schema": RUBRIC_SCHEMA}
    assert (body["max_tokens"], "stop" in body, body["temperature"]) == (200, False, 0)
    assert body["messages"][0]["content"].endswith("Rubric: polite")
    assert parse_rubric('{"verdict": "pass", "reason": "fine"}') == (True, "fine")
    assert parse_rubric('{"verdict": "fail", "reason": "rude"}') == (False, "rude")
    assert parse_rubric("not json") == (False, "the judge's answer is not a verdict")
    assert parse_rubric('{"verdict": "maybe"}') == (False, "the judge's answer is not a verdict")
