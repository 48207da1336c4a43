"""The SQLite writer thread (:class:`dockyard_api.store.database.WriterThread`): calls run one at a time, in order, in
one thread, each answered on the event loop that handed it; failures reach the caller; a call whose caller was
cancelled before it began is not run; shutdown runs what was handed in, then calls are refused."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from dockyard_api.store.database import WriterThread, _answer


def on_a_loop(test: Callable[[], Coroutine[Any, Any, None]]) -> Callable[[], None]:
    @functools.wraps(test)
    def run() -> None:
        asyncio.run(test())

    return run


@on_a_loop
async def test_calls_run_in_order_in_one_thread_and_answer_their_callers() -> None:
    writer = WriterThread("dockyard-sqlite-test")
    ran: list[tuple[int, str]] = []

    def call(i: int) -> int:
        ran.append((i, threading.current_thread().name))
        return i * i

    answers = await asyncio.gather(*(writer.submit(call, i) for i in range(200)))
    writer.shutdown()
    assert answers == [i * i for i in range(200)]
    assert [i for i, _ in ran] == list(range(200))
    assert {name for _, name in ran} == {"dockyard-sqlite-test"}


@on_a_loop
async def test_a_failure_reaches_its_caller_and_the_thread_goes_on() -> None:
    writer = WriterThread("w")

    def fail() -> None:
        raise ValueError("no such table")

    with pytest.raises(ValueError, match="no such table"):
        await writer.submit(fail)
    assert await writer.submit(lambda: "next") == "next"
    writer.shutdown()


@on_a_loop
async def test_a_call_cancelled_before_it_began_is_not_run() -> None:
    writer = WriterThread("w")
    release = threading.Event()
    ran: list[str] = []

    def first_call() -> None:
        release.wait(5)
        ran.append("first")

    first = writer.submit(first_call)
    second = writer.submit(lambda: ran.append("second"))
    second.cancel()
    release.set()
    await first
    await writer.submit(lambda: ran.append("third"))
    writer.shutdown()
    assert ran == ["first", "third"]


@on_a_loop
async def test_shutdown_runs_what_was_handed_in() -> None:
    writer = WriterThread("w")
    ran: list[int] = []
    for i in range(20):
        writer.submit(ran.append, i)
    writer.shutdown()
    assert ran == list(range(20))
    with pytest.raises(RuntimeError, match="after shutdown"):  # as a shut-down executor refuses it
        writer.submit(ran.append, 20)
    writer.shutdown()  # a second time: nothing to do
    assert ran == list(range(20))


def test_an_answer_to_a_closed_loop_is_dropped() -> None:
    loop = asyncio.new_event_loop()
    answer = loop.create_future()
    loop.close()
    _answer(loop, answer, 1, None)  # no error: nobody waits any more
    assert not answer.done()
