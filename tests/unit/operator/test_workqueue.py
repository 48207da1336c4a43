"""The per-object work queue: coalescing, one reconcile per object at a time, re-runs, retries."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from dockyard_operator import workqueue
from dockyard_operator.workqueue import Body, Outcome, WorkQueue

WINDOW = 0.02


def obj(name: str, version: str = "1", namespace: str = "ns", **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": version}, "status": status}


class Recorder:
    """A reconcile function that records what it saw and can be slowed down or made to fail."""

    def __init__(self, outcome: Callable[[Body], Outcome] = lambda _: Outcome(), delay: float = 0.0) -> None:
        self.seen: list[tuple[str, str]] = []
        self.times: list[float] = []
        self.running = 0
        self.most_at_once = 0
        self.outcome = outcome
        self.delay = delay
        self.fail = 0

    async def __call__(self, body: Body) -> Outcome:
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await asyncio.sleep(self.delay)
            self.seen.append((body["metadata"]["name"], body["metadata"]["resourceVersion"]))
            self.times.append(time.monotonic())
            if self.fail:
                self.fail -= 1
                raise RuntimeError("boom")
            return self.outcome(body)
        finally:
            self.running -= 1


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(test())


async def until(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not reached"
        await asyncio.sleep(0.005)


def gaps(times: list[float]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(times)]


async def settle(queue: WorkQueue, seconds: float = 0.15) -> None:
    await asyncio.sleep(seconds)
    assert not queue._running, "a reconcile is still running"


def test_a_burst_of_triggers_is_one_reconcile_with_the_newest_body() -> None:
    async def scenario() -> None:
        rec = Recorder()
        queue = WorkQueue("Thing", rec, batch_window=WINDOW)
        for version in ("1", "2", "3"):
            queue.observe(obj("a", version))
        queue.trigger(("ns", "a"))
        await settle(queue)
        assert rec.seen == [("a", "3")]
        await queue.close()

    run(scenario)


def test_triggers_during_a_reconcile_cause_exactly_one_more() -> None:
    async def scenario() -> None:
        rec = Recorder(delay=0.05)
        queue = WorkQueue("Thing", rec, batch_window=WINDOW)
        queue.observe(obj("a", "1"))
        await asyncio.sleep(WINDOW + 0.01)  # the first reconcile is running now
        for version in ("2", "3", "4"):
            queue.observe(obj("a", version))
        await settle(queue, 0.3)
        assert rec.seen == [("a", "1"), ("a", "4")]
        assert rec.most_at_once == 1
        await queue.close()

    run(scenario)


def test_objects_are_reconciled_concurrently_but_each_one_serially() -> None:
    async def scenario() -> None:
        rec = Recorder(delay=0.05)
        queue = WorkQueue("Thing", rec, batch_window=WINDOW)
        for name in ("a", "b", "c"):
            queue.observe(obj(name))
        await settle(queue, 0.2)
        assert sorted(rec.seen) == [("a", "1"), ("b", "1"), ("c", "1")]
        assert rec.most_at_once == 3
        await queue.close()

    run(scenario)


def test_at_most_max_concurrent_reconciles_run_and_the_first_come_finish_first() -> None:
    async def scenario() -> None:
        rec = Recorder(delay=0.03)
        queue = WorkQueue("Thing", rec, batch_window=0, max_concurrent=2)
        names = [f"o{i}" for i in range(6)]
        for name in names:
            queue.observe(obj(name))
        await until(lambda: len(rec.seen) == 6)
        assert rec.most_at_once == 2
        assert [name for name, _ in rec.seen] == names  # first come, first served
        await queue.close()

    run(scenario)


def test_triggers_while_waiting_for_a_slot_are_served_by_that_run_with_the_newest_object() -> None:
    async def scenario() -> None:
        rec = Recorder(delay=0.05)
        queue = WorkQueue("Thing", rec, batch_window=0, max_concurrent=1)
        queue.observe(obj("a"))
        queue.observe(obj("b"))  # waits for a's slot
        await asyncio.sleep(0.01)
        queue.observe(obj("b", "2"))  # arrives while b waits
        queue.trigger(("ns", "b"))
        await settle(queue, 0.3)
        assert rec.seen == [("a", "1"), ("b", "2")]
        await queue.close()

    run(scenario)


def test_a_reconcile_runs_again_when_it_asked_to() -> None:
    async def scenario() -> None:
        rec = Recorder(outcome=lambda _: Outcome(requeue_after=0.05))
        queue = WorkQueue("Thing", rec, batch_window=0)
        queue.observe(obj("a"))
        await until(lambda: len(rec.seen) >= 3)
        assert all(gap >= 0.045 for gap in gaps(rec.times))
        await queue.close()

    run(scenario)


def test_an_event_supersedes_the_requested_rerun() -> None:
    async def scenario() -> None:
        rec = Recorder(outcome=lambda _: Outcome(requeue_after=0.3))
        queue = WorkQueue("Thing", rec, batch_window=0)
        queue.observe(obj("a", "1"))
        await until(lambda: len(rec.seen) == 1)
        queue.observe(obj("a", "2"))  # runs now; the re-run is due 0.3 s after this one
        await until(lambda: len(rec.seen) == 3)
        assert rec.seen == [("a", "1"), ("a", "2"), ("a", "2")]
        assert gaps(rec.times)[0] < 0.25  # the event did not wait for the requested re-run
        assert gaps(rec.times)[1] >= 0.29
        await queue.close()

    run(scenario)


def test_a_reconcile_can_ask_for_a_longer_batch_window_for_its_next_run() -> None:
    """A job rolling out as it should (Outcome.batch_window): the triggers of the next second join one run;
    the window ends with the outcome that no longer asks for it."""

    async def scenario() -> None:
        rec = Recorder(
            outcome=lambda body: Outcome(batch_window=0.3 if body["metadata"]["resourceVersion"] < "4" else None)
        )
        queue = WorkQueue("Thing", rec, batch_window=0)
        queue.observe(obj("a", "1"))
        await until(lambda: len(rec.seen) == 1)  # at once: the queue's own window
        queue.observe(obj("a", "2"))
        await asyncio.sleep(0.15)
        queue.observe(obj("a", "3"))  # within the 0.3 s window: joins the same run
        await until(lambda: len(rec.seen) == 2)
        assert rec.seen == [("a", "1"), ("a", "3")]
        assert gaps(rec.times)[0] >= 0.29
        queue.observe(obj("a", "4"))  # the window asked by run 2: one more run, which asks for none
        await until(lambda: len(rec.seen) == 3)
        queue.observe(obj("a", "5"))
        await until(lambda: len(rec.seen) == 4)
        assert gaps(rec.times)[1] >= 0.29  # run 2 asked for the window
        assert gaps(rec.times)[2] < 0.2  # back to the queue's own window
        await queue.close()

    run(scenario)


def test_a_forgotten_object_is_not_reconciled_again() -> None:
    async def scenario() -> None:
        rec = Recorder(outcome=lambda _: Outcome(requeue_after=0.03))
        queue = WorkQueue("Thing", rec, batch_window=0)
        queue.observe(obj("a"))
        await asyncio.sleep(0.01)
        queue.forget(obj("a"))
        queue.trigger(("ns", "a"))  # e.g. a late event of one of its Pods
        await asyncio.sleep(0.1)
        assert rec.seen == [("a", "1")]
        assert queue.body(("ns", "a")) is None
        await queue.close()

    run(scenario)


def test_a_trigger_for_an_object_never_seen_is_ignored() -> None:
    async def scenario() -> None:
        rec = Recorder()
        queue = WorkQueue("Thing", rec, batch_window=0)
        queue.trigger(("ns", "unknown"))  # a Pod event before its owner was listed
        await settle(queue, 0.05)
        assert rec.seen == []
        await queue.close()

    run(scenario)


def test_failures_are_retried_with_a_backoff(monkeypatch: Any) -> None:
    monkeypatch.setattr(workqueue, "BACKOFF_SECONDS", (0.05, 0.1))

    async def scenario() -> None:
        rec = Recorder()
        rec.fail = 2
        queue = WorkQueue("Thing", rec, batch_window=0)
        queue.observe(obj("a"))
        await until(lambda: len(rec.seen) == 3)  # two failures, then success
        first, second = gaps(rec.times)
        assert first >= 0.045
        assert second >= 0.095
        await asyncio.sleep(0.2)
        assert len(rec.seen) == 3  # no retry after the success
        await queue.close()

    run(scenario)


def test_the_written_object_is_used_until_the_watch_delivers_it() -> None:
    def wrote(body: Body) -> Outcome:
        if body["metadata"]["resourceVersion"] == "1":  # label (1 -> 2), then status (2 -> 3)
            return Outcome(written=obj("a", "3", job="IN_PROGRESS"), passed=("1", "2"))
        return Outcome()

    async def scenario() -> None:
        rec = Recorder(outcome=wrote)
        queue = WorkQueue("Thing", rec, batch_window=0)
        queue.observe(obj("a", "1"))
        await settle(queue, 0.02)
        assert queue.body(("ns", "a")) == obj("a", "3", job="IN_PROGRESS")
        queue.observe(obj("a", "2"))  # the watch delivers the label write: still older than ours
        await settle(queue, 0.02)
        assert rec.seen[-1] == ("a", "3")
        reconciles = len(rec.seen)
        queue.observe(obj("a", "3", job="IN_PROGRESS"))  # caught up: the echo of its own write
        await settle(queue, 0.02)
        assert queue.body(("ns", "a")) == obj("a", "3", job="IN_PROGRESS")
        assert len(rec.seen) == reconciles  # not reconciled again for it
        queue.observe(obj("a", "4", job="SUCCESS"))  # someone else's newer change
        await settle(queue, 0.02)
        assert rec.seen[-1] == ("a", "4")
        await queue.close()

    run(scenario)


def test_keys_of_a_namespace() -> None:
    async def scenario() -> None:
        queue = WorkQueue("Thing", Recorder(), batch_window=0)
        queue.observe(obj("a", namespace="x"))
        queue.observe(obj("b", namespace="y"))
        assert queue.keys("x") == [("x", "a")]
        assert sorted(queue.keys()) == [("x", "a"), ("y", "b")]
        await queue.close()

    run(scenario)


def test_the_reconciles_own_write_arriving_before_it_returns_is_no_news() -> None:
    """The watch may deliver the status a reconcile wrote before the reconcile has returned it: that event
    queues no second run; a change by someone else meanwhile does."""

    async def scenario() -> None:
        queue: WorkQueue

        async def reconcile(body: Body) -> Outcome:
            seen.append(body["metadata"]["resourceVersion"])
            version = body["metadata"]["resourceVersion"]
            if version == "1":
                queue.observe(obj("a", "2", phase="Ready"))  # our write's event, before we return
                return Outcome(written=obj("a", "2", phase="Ready"), passed=("1",))
            if version == "3":
                queue.observe(obj("a", "4"))  # someone else's change while we run
                queue.observe(obj("a", "5"))
            return Outcome()

        seen: list[str] = []
        queue = WorkQueue("Thing", reconcile, batch_window=0)
        queue.observe(obj("a", "1"))
        await settle(queue)
        assert seen == ["1"]
        queue.observe(obj("a", "3"))
        await settle(queue)
        assert seen == ["1", "3", "5"]
        await queue.close()

    run(scenario)
