"""The interventions endpoint of the management API (GET .../environments/{env}/interventions): what the
store kept of a turn's guardrail and PII interventions, newest first, to a caller allowed to get the
namespace's environments (a SubjectAccessReview; the real one is in tests/browser/test_guardrails_widget.py),
never the values; bad limits 422 naming query.limit; 503 without the database."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

from dockyard_api.store import ConversationStore
from dockyard_core.interventions import Intervention
from tests.support.usage_api import FakeAuth, sqlite_store, usage_client

URL = "/api/v1/namespaces/shop/environments/bot-prod/interventions"


@pytest.fixture
def store(tmp_path: Path) -> Iterator[ConversationStore]:
    yield from sqlite_store(tmp_path)


async def turn_with(store: ConversationStore, session: str, found: list[Intervention], *, ok: bool = True) -> str:
    t = await store.start_turn(namespace="shop", environment="bot-prod", app="bot", session_id=session,
                               user_id=None, version="1.2.0", key_id="k1")  # fmt: skip
    if not ok:
        await store.abort_turn(t, error="failed", interventions=found)
        return ""
    return await store.finish_turn(t, user_message="my mail is <EMAIL_ADDRESS_1a2b3c>", reply="Sorry",
                                   agent="helper", tools_used=[], tokens_in=1, tokens_out=1,
                                   interventions=found)  # fmt: skip


def test_the_newest_interventions_are_listed_to_a_viewer(store: ConversationStore) -> None:
    async def record() -> str:
        await turn_with(store, "s1", [Intervention("no-competitors", "input", "block", "denied term #1")])
        await turn_with(
            store, "s2", [Intervention("secrets", "toolResults", "redact", "pattern #2", "lookup")], ok=False
        )
        return await turn_with(store, "s3", [Intervention("pii", "input", "redact", "EMAIL_ADDRESS x1")])

    newest = asyncio.run(record())
    auth = FakeAuth()
    client = usage_client(store, auth)
    answer = client.get(URL)
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert (body["namespace"], body["environment"]) == ("shop", "bot-prod")
    assert [(i["policy"], i["stage"], i["action"], i["sessionId"]) for i in body["items"]] == [
        ("pii", "input", "redact", "s3"),
        ("secrets", "toolResults", "redact", "s2"),
        ("no-competitors", "input", "block", "s1"),
    ]
    first = body["items"][0]
    assert set(first) == {"at", "app", "version", "sessionId", "messageId", "policy", "stage", "action", "reason",
                          "tool"}  # fmt: skip
    assert (first["app"], first["version"], first["messageId"], first["reason"]) == (
        "bot", "1.2.0", newest, "EMAIL_ADDRESS x1",
    )  # fmt: skip
    assert first["at"].endswith("Z") or "+00:00" in first["at"]
    assert (body["items"][1]["tool"], body["items"][1]["messageId"]) == ("lookup", None)
    assert auth.asked == [{"verb": "get", "namespace": "shop", "resource": "environments"}]
    assert [i["sessionId"] for i in client.get(URL, params={"limit": 1}).json()["items"]] == ["s3"]
    assert client.get("/api/v1/namespaces/shop/environments/other/interventions").json()["items"] == []

    for bad in ("0", "501", "many"):
        refused = client.get(URL, params={"limit": bad})
        assert refused.status_code == 422, refused.text
        error = refused.json()["error"]
        assert error["code"] in ("invalid", "invalid_request")  # out of range (the service) / not a number
        assert [d["field"] for d in error["details"]] == ["query.limit"], error

    auth.allowed = False
    forbidden = client.get(URL)
    assert forbidden.status_code == 403
    assert "cannot get environments" in forbidden.json()["error"]["message"]


def test_without_the_database_the_list_is_503(store: ConversationStore) -> None:
    asyncio.run(store.close())
    store._ready = False
    answer = usage_client(store, FakeAuth()).get(URL)
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "database_unavailable"
