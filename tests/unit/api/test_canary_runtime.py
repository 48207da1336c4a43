"""Canary by session and the SLO watcher's verdicts (docs/promotion.md): the split, the store's pinning of a
new session by the split and of every later turn to the version it started on, the turn outcomes per
version (batched), the live evaluation's sampling, and what the watcher watches and when it breaches."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from dockyard_api.rollout import slo as slos
from dockyard_api.runtime.canary import Canary, Figures, LiveEvaluation, on_canary, read_canary, read_live_evaluation
from dockyard_api.store import ConversationStore
from dockyard_api.store.outcomes import Outcome, OutcomeRecorder, window
from dockyard_api.store.outcomes import usage as version_usage
from dockyard_core.resources.v1alpha1.canary import SloSpec

WHERE = {"namespace": "team", "environment": "bot-prod"}


def test_the_split_follows_the_weight_and_is_the_same_for_an_id() -> None:
    for weight in (0, 1, 10, 25, 50, 90, 100):
        on = sum(on_canary(f"ses_{i:08x}", weight) for i in range(20_000))
        assert abs(on / 20_000 * 100 - weight) <= 1.0, (weight, on)
    assert [on_canary("ses_a", 30) for _ in range(3)] == [on_canary("ses_a", 30)] * 3
    choose = Canary("1.1.0", 100).chooser("1.0.0")
    assert choose("x") == "1.1.0"
    assert Canary("1.1.0", 0).chooser("1.0.0")("x") == "1.0.0"
    assert read_canary({"canary": {"appVersion": "1.1.0", "weight": 20}}) == Canary("1.1.0", 20)
    assert read_canary({}) is None
    live = read_live_evaluation({"slo": {"minEvaluationPassRate": 0.9, "expect": {"contains": ["x"], "rubric": "r"}}})
    assert live == LiveEvaluation(0.1, {"contains": ["x"]})  # no judge model live: the rubric is dropped
    assert read_live_evaluation({"slo": {"maxErrorRate": 0.1}}) is None


def _store(tmp_path: Path) -> ConversationStore:
    return ConversationStore(f"sqlite:///{tmp_path / 'db' / 'dockyard.db'}")


def test_a_new_session_is_pinned_by_the_split_and_keeps_its_version(tmp_path: Path) -> None:
    async def main() -> None:
        store = _store(tmp_path)
        await store.start()
        try:
            canary = Canary("1.1.0", 50).chooser("1.0.0")
            ids = [f"s-{i}" for i in range(40)]
            first = {}
            for sid in ids:
                t = await store.start_turn(**WHERE, app="bot", session_id=sid, user_id=None, version="1.0.0",
                                           key_id="k", version_for=canary)  # fmt: skip
                assert t.version == canary(sid)
                first[sid] = t.version
                await store.finish_turn(t, user_message="hi", reply="hello", agent="a", tools_used=[], tokens_in=1,
                                        tokens_out=1)  # fmt: skip
            assert set(first.values()) == {"1.0.0", "1.1.0"}
            everything = Canary("2.0.0", 100).chooser("1.0.0")  # the split changes: old sessions keep theirs
            for sid in ids:
                t = await store.start_turn(**WHERE, app="bot", session_id=sid, user_id=None, version="1.0.0",
                                           key_id="k", version_for=everything)  # fmt: skip
                assert t.version == first[sid]
                await store.abort_turn(t, error="x")
            fresh = await store.start_turn(**WHERE, app="bot", session_id=None, user_id=None, version="1.0.0",
                                           key_id="k", version_for=everything)  # fmt: skip
            assert fresh.version == "2.0.0"
        finally:
            await store.close()

    asyncio.run(main())


def test_outcomes_are_written_in_batches_and_read_per_version(tmp_path: Path) -> None:
    async def main() -> None:
        store = _store(tmp_path)
        await store.start()
        recorder = OutcomeRecorder(store, flush_seconds=60)
        figures = Figures(recorder)
        try:
            now = datetime.now(UTC)
            for i in range(10):
                figures.turn(**WHERE, version="1.0.0", seconds=0.1 * (i + 1), outcome="ok", tokens=(3, 2))
            for _ in range(4):
                figures.turn(**WHERE, version="1.1.0", seconds=2.0, outcome="tool_error", tokens=(1, 0),
                             live=LiveEvaluation(1.0, {}), message_id="m")  # fmt: skip
            figures.turn(**WHERE, version="1.1.0", seconds=0.5, outcome="cancelled", tokens=(0, 0))
            assert await store.run(lambda c: window(c, "team", "bot-prod", now - timedelta(seconds=5))) == {}
            assert await recorder.flush() == 19  # 15 turns and 4 verdicts, scored in the flush
            found = await store.run(lambda c: window(c, "team", "bot-prod", now - timedelta(seconds=5)))
            assert len(found["1.0.0"].seconds) == 10
            assert found["1.0.0"].errors == 0
            assert len(found["1.1.0"].seconds) == 5
            assert found["1.1.0"].errors == 4
            assert (found["1.1.0"].scored, found["1.1.0"].passed) == (4, 0)
            fig = slos.figures("1.0.0", found["1.0.0"], 60)
            assert fig["p95LatencySeconds"] == 1.0
            assert fig["errorRate"] == 0.0
            used = await store.run(lambda c: version_usage(c, "team", "bot-prod", now.date(), now.date()))
            assert (used["1.0.0"].requests, used["1.0.0"].tokens_in, used["1.0.0"].tokens_out) == (10, 30, 20)
            assert (used["1.1.0"].requests, used["1.1.0"].errors) == (5, 5)
        finally:
            await recorder.aclose()
            await store.close()

    asyncio.run(main())


def _env(history: list[dict[str, Any]], *, canary: dict[str, Any] | None = None, status_canary: Any = None,
         version: str = "1.1.0") -> dict[str, Any]:  # fmt: skip
    spec: dict[str, Any] = {"appRef": "bot", "appVersion": version, "slo": {}}
    if canary:
        spec["canary"] = canary
    status: dict[str, Any] = {"history": history}
    if status_canary:
        status["canary"] = status_canary
    return {"metadata": {"namespace": "team", "name": "bot-prod"}, "spec": spec, "status": status}


def test_what_is_watched() -> None:
    now = datetime(2026, 11, 26, 8, 0, tzinfo=UTC)
    slo = SloSpec(watch_seconds=600)
    started = "2026-11-26T07:59:00Z"
    env = _env([], canary={"appVersion": "1.2.0", "weight": 10},
               status_canary={"version": "1.2.0", "phase": "Running", "since": started})  # fmt: skip
    watch = slos.watch_of(env, slo, now)
    assert watch is not None
    assert (watch.what, watch.version, watch.back_to) == ("canary", "1.2.0", "1.1.0")
    assert watch.since == now - timedelta(minutes=1)
    assert slos.watch_of(_env([], canary={"appVersion": "1.2.0", "weight": 0}), slo, now) is None
    history = [
        {"version": "1.1.0", "status": "Active", "action": "Deploy", "deployedAt": "2026-11-26T07:55:00Z"},
        {"version": "1.0.0", "status": "Previous", "action": "Deploy", "healthy": True,
         "deployedAt": "2026-11-25T07:55:00Z"},
    ]  # fmt: skip
    watch = slos.watch_of(_env(history), slo, now)
    assert watch is not None
    assert (watch.what, watch.back_to) == ("deploy", "1.0.0")
    assert slos.watch_of(_env(history), SloSpec(watch_seconds=60), now) is None  # the watch is over
    auto = [{**history[0], "action": "AutoRollback"}, history[1]]
    assert slos.watch_of(_env(auto), slo, now) is None  # a rollback is not watched again
    never = [history[0], {**history[1], "healthy": False}]
    assert slos.watch_of(_env(never), slo, now) is None  # nowhere to go back to


def test_breaches() -> None:
    slo = SloSpec(max_error_rate=0.1, max_p95_latency_seconds=2, min_evaluation_pass_rate=0.8, min_turns=5)
    ok = {"version": "1.1.0", "turns": 20, "errors": 1, "errorRate": 0.05, "p95LatencySeconds": 1.0}
    assert slos.breach(slo, ok) is None
    few = {**ok, "turns": 4, "errorRate": 1.0}
    assert slos.breach(slo, few) is None  # not enough turns for a verdict
    found = slos.breach(slo, {**ok, "errors": 4, "errorRate": 0.2})
    assert found is not None
    assert found.slo == "errorRate"
    assert "20.0%" in found.reason
    assert "10.0%" in found.reason
    found = slos.breach(slo, {**ok, "p95LatencySeconds": 3.5})
    assert found is not None
    assert found.slo == "p95Latency"
    assert "3.500s" in found.reason
    found = slos.breach(slo, {**ok, "scored": 5, "evaluationPassRate": 0.6})
    assert found is not None
    assert found.slo == "evaluationPassRate"
    assert slos.breach(SloSpec(max_error_rate=1), {**ok, "errorRate": 1.0}) is None
    assert slos.p95([float(i) for i in range(1, 101)]) == 95.0
    assert Outcome("a", "b", "1", datetime.now(UTC), 0.1, "ok").counted
