"""The conversation store keeps what guardrails and the PII protection did to a turn
(:class:`dockyard_core.interventions.Intervention`) in the transaction that stores or aborts the turn, and
lists an environment's newest ones; never the values a policy matched. On its embedded default, a SQLite
file; the same against a real PostgreSQL server is in tests/tools/test_store_postgres.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import TypeVar

import pytest
from sqlalchemy import text

from dockyard_api.store import ConversationStore, Turn
from dockyard_api.store.interventions import LIST_LIMIT
from dockyard_api.store.schema import interventions
from dockyard_core.errors import ConflictError, DatabaseUnavailableError
from dockyard_core.interventions import REASON_LIMIT, Intervention
from tests.support.conversations import stored_messages

T = TypeVar("T")
WHERE = {"namespace": "shop", "environment": "bot-production"}
BLOCKED = Intervention("no-competitors", "input", "block", "denied term #2")
REDACTED = Intervention("pii", "output", "redact", "EMAIL_ADDRESS x1")
TOOL = Intervention("no-secrets", "toolResults", "record", "pattern #1", tool="lookup")


def with_store(tmp_path: Path, body: Callable[[ConversationStore], Awaitable[None]], **kw: float) -> None:
    async def main() -> None:
        store = ConversationStore(f"sqlite:///{tmp_path / 'db' / 'dockyard.db'}", **kw)
        await store.start()
        assert store.ready
        try:
            await body(store)
        finally:
            await store.close()

    asyncio.run(main())


async def turn(store: ConversationStore, session_id: str = "session-1", environment: str = "bot-production") -> Turn:
    return await store.start_turn(namespace="shop", environment=environment, app="bot", session_id=session_id,
                                  user_id="user-1", version="1.0.0", key_id="key1")  # fmt: skip


async def finish(store: ConversationStore, t: Turn, found: list[Intervention]) -> str:
    return await store.finish_turn(t, user_message="q", reply="a", agent="helper", tools_used=[], tokens_in=1,
                                   tokens_out=1, usage=True, interventions=found)  # fmt: skip


def test_a_finished_turns_interventions_are_kept_with_its_reply_and_listed_newest_first(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        assert await store.list_interventions(**WHERE) == []
        before = datetime.now(UTC)
        first = await finish(store, await turn(store), [BLOCKED])
        second = await finish(store, await turn(store, "session-2"), [REDACTED, TOOL])
        await finish(store, await turn(store, "session-3"), [])  # a turn nothing acted on adds nothing
        listed = await store.list_interventions(**WHERE)
        # newest first: the later turn's, and within a turn the later check's (a turn's are in the order they acted)
        assert [(i.policy, i.stage, i.action, i.reason, i.tool, i.session_id, i.message_id) for i in listed] == [
            ("no-secrets", "toolResults", "record", "pattern #1", "lookup", "session-2", second),
            ("pii", "output", "redact", "EMAIL_ADDRESS x1", "", "session-2", second),
            ("no-competitors", "input", "block", "denied term #2", "", "session-1", first),
        ]
        assert all((i.app, i.version) == ("bot", "1.0.0") and i.at >= before for i in listed)
        assert listed[0].at >= listed[2].at
        assert listed[2].view() == {
            "at": listed[2].at.isoformat().replace("+00:00", "Z"),
            "app": "bot",
            "version": "1.0.0",
            "sessionId": "session-1",
            "messageId": first,
            "policy": "no-competitors",
            "stage": "input",
            "action": "block",
            "reason": "denied term #2",
        }
        assert listed[0].view()["tool"] == "lookup"
        assert [i.policy for i in await store.list_interventions(**WHERE, limit=1)] == [listed[0].policy]
        # another environment's turns are not listed here, nor this one's there
        await finish(store, await turn(store, environment="bot-staging"), [BLOCKED])
        assert len(await store.list_interventions(**WHERE)) == 3
        assert len(await store.list_interventions("shop", "bot-staging")) == 1
        assert await store.list_interventions("other", "bot-production") == []

    with_store(tmp_path, body)


def test_an_aborted_turns_interventions_are_kept_without_a_message(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        t = await turn(store)
        await store.abort_turn(t, error="tool failed", usage=(3, 0), interventions=[TOOL])
        [kept] = await store.list_interventions(**WHERE)
        assert (kept.policy, kept.tool, kept.message_id, kept.session_id) == ("no-secrets", "lookup", None, "session-1")
        assert await stored_messages(store, **WHERE, session_id="session-1") == []
        # without usage (a turn aborted before it counted) too
        await store.abort_turn(await turn(store), error="x", interventions=[BLOCKED])
        assert [i.policy for i in await store.list_interventions(**WHERE)] == ["no-competitors", "no-secrets"]

    with_store(tmp_path, body)


def test_interventions_are_written_in_the_turns_transaction(tmp_path: Path) -> None:
    async def body(store: ConversationStore) -> None:
        # a turn that lost its session stores neither its messages nor its interventions
        lost = await turn(store)
        await asyncio.sleep(0.3)
        await finish(store, await turn(store), [])
        with pytest.raises(ConflictError, match="lost the session"):
            await finish(store, lost, [BLOCKED])
        assert await store.list_interventions(**WHERE) == []
        # interventions that cannot be written (their table gone) keep the turn from being stored or counted
        await store.run(lambda c: c.execute(text("ALTER TABLE dockyard_interventions RENAME TO gone")))
        failing = await turn(store, "session-2")
        with pytest.raises(DatabaseUnavailableError, match="dockyard_interventions"):
            await finish(store, failing, [BLOCKED])
        assert await stored_messages(store, **WHERE, session_id="session-2") == []
        today = datetime.now(UTC).date()
        assert (await store.usage(**WHERE, since=today, until=today)).totals.requests == 1  # the first turn only
        # the session stays held by the failed turn until the runtime aborts it (as it does on any failure)
        await store.abort_turn(failing, error="database")
        await finish(store, await turn(store, "session-2"), [])
        assert len(await stored_messages(store, **WHERE, session_id="session-2")) == 2

    with_store(tmp_path, body, busy_wait_seconds=0, turn_lease_seconds=0.2)


def test_only_what_the_intervention_says_is_kept_bounded(tmp_path: Path) -> None:
    assert {c.name for c in interventions.columns} == {
        "pk", "namespace", "environment", "app", "version", "session_id", "message_id", "policy", "stage", "action",
        "tool", "reason", "at",
    }  # fmt: skip  # no column for a text the policy looked at

    async def body(store: ConversationStore) -> None:
        long = Intervention("p" * 80, "output", "record", "r" * (REASON_LIMIT + 100))
        await finish(store, await turn(store), [long])
        [kept] = await store.list_interventions(**WHERE)
        assert (len(kept.policy), len(kept.reason)) == (63, REASON_LIMIT)
        many = [Intervention(f"p{i}", "input", "record", "r") for i in range(LIST_LIMIT + 5)]
        await finish(store, await turn(store), many)
        assert len(await store.list_interventions(**WHERE, limit=10_000)) == LIST_LIMIT
        assert len(await store.list_interventions(**WHERE, limit=0)) == 1

    with_store(tmp_path, body)
