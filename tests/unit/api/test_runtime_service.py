"""A whole turn of the runtime with the REAL conversation store (a SQLite file) and the scripted model
server: environment and app lookup, session pinning and history, the whole-turn deadline, failed turns
that keep nothing, usage, the event stream with keep-alive pings. The objects a turn reads come from the
runtime's informers, filled here as a watch would fill them (no API server is contacted)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from dockyard_api import metrics
from dockyard_api.auth import EnvironmentCaller
from dockyard_api.runtime.service import Admission, AppRuntime, RuntimeSettings
from dockyard_api.store import ConversationStore
from dockyard_core.errors import DockyardError, KubeUnavailableError, NotFoundError
from dockyard_core.kubeclient import AsyncKube
from tests.support.conversations import stored_messages
from tests.support.scripted_model import Reply, ScriptedModel, scripted_model

NS = "team"


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedModel]:
    with scripted_model() as running:
        yield running


@pytest.fixture
def model(server: ScriptedModel) -> ScriptedModel:
    server.reset()
    return server


def objects(model_url: str) -> dict[str, list[dict[str, Any]]]:
    def meta(name: str, rv: str = "1") -> dict[str, Any]:
        return {"name": name, "namespace": NS, "resourceVersion": rv}

    agent = {"name": "helper", "version": "1", "model": "tiny"}
    return {
        "environments": [
            {"metadata": meta("bot-draft"), "spec": {"appRef": "bot"}},
            {"metadata": meta("bot-prod"), "spec": {"appRef": "bot", "appVersion": "1.0.0"}},
        ],
        "apps": [{"metadata": meta("bot"), "spec": {"agents": [{**agent, "instructions": "draft"}]}}],
        "appversions": [
            {"metadata": meta("bot-1.0.0"), "spec": {"agents": [{**agent, "instructions": "one"}]}},
            {"metadata": meta("bot-2.0.0"), "spec": {"agents": [{**agent, "instructions": "two"}]}},
        ],
        "modeldeployments": [
            {
                "metadata": meta("tiny"),
                "spec": {"name": "tiny", "hyperParameters": {"temperature": 0.5, "maxTokens": 9, "topP": 1, "topK": 5}},
                "status": {"endpoint": model_url},
            }
        ],
        "tools": [],
        "tooldeployments": [],
    }


Scenario = Callable[[AppRuntime, ConversationStore], Awaitable[None]]


@asynccontextmanager
async def runtime(
    kubeconfig: str, db: Path, model_url: str, **settings: Any
) -> AsyncIterator[tuple[AppRuntime, ConversationStore]]:
    kube = AsyncKube(kubeconfig)
    found = AppRuntime(kube, RuntimeSettings(**settings))
    for plural, items in objects(model_url).items():
        found.informers[plural].replace(items)
    store = ConversationStore(f"sqlite+aiosqlite:///{db}")
    await store.start()
    try:
        yield found, store
    finally:
        await found.aclose()
        await store.close()
        await kube.aclose()


def caller(environment: str = "bot-draft", end_user: str | None = None) -> EnvironmentCaller:
    return EnvironmentCaller(NS, environment, "bot", "key000000001", end_user)


async def turn(
    rt: AppRuntime,
    store: ConversationStore,
    message: str,
    *,
    session: str | None = None,
    user: str | None = None,
    who: EnvironmentCaller | None = None,
) -> dict[str, Any]:
    prepared = await rt.prepare(store, who or caller(), "bot", message=message, session_id=session, user_id=user)
    return await rt.complete(store, prepared)


def test_a_turn_is_answered_stored_and_counted(
    unreachable_kubeconfig: str, tmp_path: Path, model: ScriptedModel
) -> None:
    async def go() -> None:
        async with runtime(unreachable_kubeconfig, tmp_path / "db", model.url) as (rt, store):
            model.script(Reply(text="first answer", usage=(10, 3)), Reply(text="second answer", usage=(20, 4)))
            first = await turn(rt, store, "hello", user="ann")
            assert first["response"] == "first answer"
            assert (first["agent"], first["tools_used"], first["tokens"]) == ("helper", [], {"input": 10, "output": 3})
            assert first["session_id"].startswith("ses_")
            assert first["message_id"]
            second = await turn(rt, store, "again", session=first["session_id"], user="ann")
            assert second["session_id"] == first["session_id"]
            messages = model.bodies()[1]["messages"]
            assert messages == [
                {"role": "system", "content": "draft"},
                {"role": "user", "content": "hello"},
                {"role": "assistant", "content": "first answer"},
                {"role": "user", "content": "again"},
            ]
            # a widget token's user owns the session, whatever metadata.user_id says
            with pytest.raises(NotFoundError, match="another user"):
                await turn(rt, store, "x", session=first["session_id"], user="ann", who=caller(end_user="eve"))
            with pytest.raises(NotFoundError, match="not deployed in environment"):
                await rt.prepare(store, caller(), "other", message="x", session_id=None, user_id=None)
            today = datetime.now(UTC).date()
            totals = (await store.usage(namespace=NS, environment="bot-draft", since=today, until=today)).totals
            assert (totals.requests, totals.errors, totals.tokens_in, totals.tokens_out) == (2, 0, 30, 7)

    labels = {"environment_namespace": NS, "environment": "bot-draft"}
    before_ok = sample("dockyard_api_executes_total", {**labels, "outcome": "ok"})
    before_in = sample("dockyard_api_tokens_total", {**labels, "direction": "in"})
    asyncio.run(go())
    # the same turns in the facade's Prometheus metrics (/metrics)
    assert sample("dockyard_api_executes_total", {**labels, "outcome": "ok"}) - before_ok == 2
    assert sample("dockyard_api_tokens_total", {**labels, "direction": "in"}) - before_in == 30


def sample(name: str, labels: dict[str, str]) -> float:
    return metrics.REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_session_stays_on_its_version(unreachable_kubeconfig: str, tmp_path: Path, model: ScriptedModel) -> None:
    async def go() -> None:
        async with runtime(unreachable_kubeconfig, tmp_path / "db", model.url) as (rt, store):
            prod = caller("bot-prod")
            await turn(rt, store, "hi", session="s1", who=prod)
            rt.informers["environments"].replace(
                [{"metadata": {"name": "bot-prod", "namespace": NS}, "spec": {"appRef": "bot", "appVersion": "2.0.0"}}]
            )
            await turn(rt, store, "hi", session="s2", who=prod)
            await turn(rt, store, "still?", session="s1", who=prod)
            assert [b["messages"][0]["content"] for b in model.bodies()] == ["one", "two", "one"]
            # version 1.0.0 is not in the cache any more: it is read from the API server, which is away here
            rt.informers["appversions"].replace(objects(model.url)["appversions"][1:])
            with pytest.raises(KubeUnavailableError) as caught:
                await turn(rt, store, "and now?", session="s1", who=prod)
            assert caught.value.status_code == 503  # unreachable: temporary, retry (docs/reliability.md)
            model.script(Reply(text="ok"))
            await turn(rt, store, "a new session", who=prod)  # s1 was released; new sessions run 2.0.0

    asyncio.run(go())


def test_the_turn_deadline_is_a_504_and_a_failed_turn_keeps_nothing(
    unreachable_kubeconfig: str, tmp_path: Path, model: ScriptedModel
) -> None:
    async def go() -> None:
        async with runtime(unreachable_kubeconfig, tmp_path / "db", model.url, turn_timeout_seconds=0.5) as (rt, store):
            model.script(Reply(text="late", delay=3))
            started = asyncio.get_running_loop().time()
            with pytest.raises(DockyardError, match=r"deadline of 0\.5s") as caught:
                await turn(rt, store, "slow?", session="s")
            assert caught.value.status_code == 504
            assert asyncio.get_running_loop().time() - started < 1.5
            model.script(Reply(status=502))
            with pytest.raises(DockyardError, match="HTTP 502"):
                await turn(rt, store, "broken?", session="s")
            model.script(Reply(text="fine"))
            answer = await turn(rt, store, "now?", session="s")  # the session was released each time
            assert answer["response"] == "fine"
            assert [m["role"] for m in model.bodies()[-1]["messages"]] == ["system", "user"]  # nothing kept
            stored = await stored_messages(store, namespace=NS, environment="bot-draft", session_id="s")
            assert [(m.role, m.content) for m in stored] == [("user", "now?"), ("assistant", "fine")]
            today = datetime.now(UTC).date()
            totals = (await store.usage(namespace=NS, environment="bot-draft", since=today, until=today)).totals
            assert (totals.requests, totals.errors) == (3, 2)

    asyncio.run(go())


def test_the_event_stream_pings_while_the_model_thinks_and_ends_with_done_or_error(
    unreachable_kubeconfig: str, tmp_path: Path, model: ScriptedModel
) -> None:
    async def go() -> None:
        async with runtime(unreachable_kubeconfig, tmp_path / "db", model.url) as (rt, store):
            model.script(Reply(text="slow and steady", delay=0.5, pieces=3, usage=(5, 3)))
            prepared = await rt.prepare(store, caller(), "bot", message="hi", session_id=None, user_id=None)
            events = [e async for e in rt.events(store, prepared, ping_seconds=0.1)]
            names = [name for name, _ in events]
            assert names[0] == "agent"
            assert names.count("ping") >= 2
            assert "".join(d["text"] for n, d in events if n == "delta") == "slow and steady"
            assert names[-1] == "done"
            assert events[-1][1]["tokens"] == {"input": 5, "output": 3}
            model.script(Reply(raw=b"garbage"))
            prepared = await rt.prepare(store, caller(), "bot", message="hi", session_id=None, user_id=None)
            events = [e async for e in rt.events(store, prepared, ping_seconds=5)]
            name, data = events[-1]
            assert name == "error"
            assert data["status"] == 502
            assert data["error"]["code"] == "model_bad_response"

    asyncio.run(go())


def test_admission_lets_a_few_turns_prepare_at_once_in_arrival_order() -> None:
    """Admission(2): of six turns arriving together, two prepare at once and the others enter in the order they
    came, each as one leaves; the gate serves one event loop after another (a semaphore belongs to a loop)."""
    admission = Admission(2, hold_seconds=60)

    async def burst() -> tuple[list[int], int]:
        entered: list[int] = []
        inside, most = 0, 0
        release = [asyncio.Event() for _ in range(6)]

        async def one(i: int) -> None:
            nonlocal inside, most
            async with admission():
                entered.append(i)
                inside += 1
                most = max(most, inside)
                await release[i].wait()
                inside -= 1

        tasks = [asyncio.create_task(one(i)) for i in range(6)]
        await asyncio.sleep(0.01)
        assert entered == [0, 1]  # the others wait
        for i in (1, 0, 3, 2, 5, 4):  # leaving out of order: the next in line still enters next
            release[i].set()
            await asyncio.sleep(0.01)
        await asyncio.gather(*tasks)
        return entered, most

    for _ in range(2):  # two loops, one after the other
        entered, most = asyncio.run(burst())
        assert entered == [0, 1, 2, 3, 4, 5]
        assert most == 2


def test_a_burst_of_turns_prepares_a_few_at_a_time_and_asks_the_model_all_at_once(
    unreachable_kubeconfig: str, tmp_path: Path, model: ScriptedModel
) -> None:
    """Eight turns at once with turns_preparing=2: the store starts at most two turns at once, the model is asked
    by all eight together (its calls are not held back: eight answers of 0.3 s take well under 8 x 0.3 s), and
    every turn is answered and stored."""

    async def go() -> None:
        async with runtime(unreachable_kubeconfig, tmp_path / "db", model.url, turns_preparing=2) as (rt, store):
            rt.admission.hold_seconds = 60  # the bound under test, whatever the machine's speed
            model.script(*[Reply(text=f"answer {i}", delay=0.3) for i in range(8)])
            starting, most = 0, 0
            start_turn = store.start_turn

            async def counted(**kw: Any) -> Any:
                nonlocal starting, most
                starting += 1
                most = max(most, starting)
                try:
                    await asyncio.sleep(0.01)  # a slower store: the other turns would pile in here
                    return await start_turn(**kw)
                finally:
                    starting -= 1

            store.start_turn = counted  # type: ignore[method-assign]
            began = asyncio.get_running_loop().time()
            answers = await asyncio.gather(*(turn(rt, store, f"question {i}") for i in range(8)))
            took = asyncio.get_running_loop().time() - began
            assert most == 2
            assert sorted(a["response"] for a in answers) == sorted(f"answer {i}" for i in range(8))
            assert took < 4 * 0.3, took
            today = datetime.now(UTC).date()
            totals = (await store.usage(namespace=NS, environment="bot-draft", since=today, until=today)).totals
            assert totals.requests == 8

    asyncio.run(go())


def test_a_stalled_preparation_holds_its_place_for_a_moment_only() -> None:
    """Two preparations that hang (a store that does not answer) keep their places for hold_seconds: the turns
    behind them go on after that, all of them within a few holds, not after the stalled ones' timeouts."""
    admission = Admission(2, hold_seconds=0.05)

    async def go() -> list[float]:
        began = asyncio.get_running_loop().time()
        entered: list[float] = []
        stalled = asyncio.Event()

        async def one(i: int) -> None:
            async with admission():
                entered.append(asyncio.get_running_loop().time() - began)
                if i < 2:
                    await stalled.wait()

        tasks = [asyncio.create_task(one(i)) for i in range(6)]
        await asyncio.sleep(0.5)
        stalled.set()
        await asyncio.gather(*tasks)
        return entered

    entered = asyncio.run(go())
    assert len(entered) == 6
    assert max(entered) < 0.4, entered  # not after the stalled two (0.5 s)
