"""No personal data of a turn reaches the logs when its environment redacts before storage
(dockyard_core.logs.pii_scope; docs/guardrails.md, "PII protection"), and no user text reaches the audit
record (dockyard_core.audit: it is made of the Environment's spec, its history and its API keys only)."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

from dockyard_core import audit, logs
from dockyard_core.pii import PiiPolicy, pii_key

KEY = pii_key(b"namespace signing key")
POLICY = PiiPolicy.compile({"entities": ["EMAIL_ADDRESS", "CREDIT_CARD"]})
MESSAGE = "please charge 4111 1111 1111 1111 and mail jane@example.com"


@pytest.fixture
def written() -> Iterator[io.StringIO]:
    """A handler with the filters, in the JSON format, on a logger of its own."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.json_formatter())
    logs.install_filters(handler)
    logger = logging.getLogger("test.pii")
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    logger.propagate = False
    yield out
    logger.removeHandler(handler)


def records(out: io.StringIO) -> list[dict[str, str]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_a_turn_s_records_are_redacted_like_the_stored_conversation(written: io.StringIO) -> None:
    log = logging.getLogger("test.pii")
    stored = POLICY.redact(MESSAGE, key=KEY, session="sess-1").text  # what the conversation store keeps
    with logs.pii_scope(POLICY, key=KEY, session="sess-1"):
        log.debug("turn on session %s aborted: %s", "sess-1", MESSAGE)
        try:  # an exception's text may quote the user's
            json.loads(MESSAGE)
        except ValueError as exc:
            try:
                raise RuntimeError(f"tool arguments are not JSON: {MESSAGE!r}") from exc
            except RuntimeError:
                log.exception("turn failed")
    log.info("after the turn: %s", MESSAGE)
    first, failed, after = records(written)
    assert first["message"] == f"turn on session sess-1 aborted: {stored}"
    assert "jane@example.com" not in json.dumps(failed)
    assert "4111 1111 1111 1111" not in json.dumps(failed)
    assert stored in failed["exc_info"]  # the traceback, with the same placeholders
    assert after["message"] == f"after the turn: {MESSAGE}"  # outside the scope: as written


def test_tasks_started_in_the_scope_are_covered(written: io.StringIO) -> None:
    log = logging.getLogger("test.pii")

    async def turn() -> None:
        with logs.pii_scope(POLICY, key=KEY, session="s"):
            await asyncio.create_task(asyncio.to_thread(log.warning, "tool said %s", MESSAGE))

    asyncio.run(turn())
    (record,) = records(written)
    assert "jane@example.com" not in record["message"]
    assert "<EMAIL_ADDRESS_" in record["message"]


def test_for_the_rest_of_a_task_and_not_in_another(written: io.StringIO) -> None:
    """pii_for_this_task: what the request's task logs after the turn (its error handler) is covered; a
    request served meanwhile in another task is not."""
    log = logging.getLogger("test.pii")

    async def request(policy: PiiPolicy | None, started: asyncio.Event, logged: asyncio.Event) -> None:
        logs.pii_for_this_task(policy, key=KEY, session="s")
        started.set()
        await logged.wait()
        log.error("request failed: %s", MESSAGE)

    async def two_requests() -> None:
        started, other_started, logged = asyncio.Event(), asyncio.Event(), asyncio.Event()
        first = asyncio.create_task(request(POLICY, started, logged))
        await started.wait()
        second = asyncio.create_task(request(None, other_started, logged))
        await other_started.wait()
        logged.set()
        await asyncio.gather(first, second)
        log.info("the server: %s", MESSAGE)

    asyncio.run(two_requests())
    messages = [r["message"] for r in records(written)]
    assert messages[0] == "request failed: " + POLICY.redact(MESSAGE, key=KEY, session="s").text
    assert messages[1:] == [f"request failed: {MESSAGE}", f"the server: {MESSAGE}"]


@pytest.mark.parametrize(
    "policy", [None, PiiPolicy.compile({"redact": {"storage": False, "model": True}})], ids=["none", "no-storage"]
)
def test_without_storage_redaction_records_are_as_written(written: io.StringIO, policy: PiiPolicy | None) -> None:
    with logs.pii_scope(policy, key=KEY, session="s"):
        logging.getLogger("test.pii").info("%s", MESSAGE)
    assert records(written)[0]["message"] == MESSAGE


def test_the_audit_record_holds_no_user_text() -> None:
    """The audit record is made of the Environment's spec, its history and its API keys: the facade writes
    only counters into the Environment (status.usage), and a condition's message is not copied."""
    env = {
        "metadata": {"name": "shop-prod", "namespace": "team", "uid": "0123456789ab", "creationTimestamp": "t"},
        "spec": {"appRef": "shop", "pii": {"entities": ["EMAIL_ADDRESS"]}},
        "status": {
            "history": [{"version": "1.0.0", "status": "Active", "deployedBy": "alice"}],
            "usage": {"today": {"requests": 3}},
            "conditions": [{"type": "Ready", "message": MESSAGE}],
        },
    }
    keys = [{"id": "abc", "name": "ci", "lastUsedAt": None}]
    record = audit.audit_record(env, keys)
    assert set(record["data"]) == {"environment.json", "history.json", "usage.json"}
    data = json.dumps(record)
    assert "jane@example.com" not in data
    assert "4111" not in data
    assert json.loads(record["data"]["environment.json"]) == {"name": "shop-prod", "spec": env["spec"]}
    assert json.loads(record["data"]["history.json"]) == env["status"]["history"]  # type: ignore[index]
