"""The environment's PII protection in the runtime (docs/guardrails.md, "PII protection") end to end: the operator
and the facade on the real local control plane, an agent served by a scripted OpenAI-compatible server, and the
SQLite conversation store read back: values redacted before storage and before the model, one placeholder per
value within a session and another in another session, the answer redacted only when the environment says so."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from kubernetes import client

from tests.e2e.test_guardrails import (  # noqa: F401 - fixtures
    ENVIRONMENT,
    Bot,
    counted,
    deploy,
    facade,
    model,
    servers,
    state,
    stored,
)
from tests.support.dockyard import patch
from tests.support.runners import RunningFacade
from tests.support.scripted_model import Reply, ScriptedModel
from tests.support.waiting import wait_for

EMAIL = re.compile(r"<EMAIL_ADDRESS_[0-9a-f]{6}>")
CARD = re.compile(r"<CREDIT_CARD_[0-9a-f]{6}>")


def _applied(api: client.ApiClient, bot: Bot, pii: dict[str, Any], check: Any) -> None:
    """Set the environment's ``spec.pii`` and wait until the facade's view of it has changed: probe turns in a
    session of their own until ``check(answer)`` holds."""

    def probe() -> bool:
        answer, _ = bot.answer("probe: write to probe@example.org", session_id="probe")
        return bool(check(answer))

    patch(api, bot.namespace, "environments", ENVIRONMENT, {"spec": {"pii": pii}})
    wait_for(probe, timeout=30, what=f"the facade applying spec.pii {pii}")


def test_pii_is_redacted_before_storage_and_the_model_consistently_within_a_session(
    api: client.ApiClient,
    namespace: str,
    facade: RunningFacade,  # noqa: F811
    model: ScriptedModel,  # noqa: F811
    state: Path,  # noqa: F811
) -> None:
    bot = deploy(api, namespace, facade, model, {"policies": []})
    _applied(api, bot, {"redact": {"storage": True, "model": True}}, lambda a: a["guardrails"])
    model.reset()
    before = counted(
        facade, "dockyard_pii_redactions_total", environment_namespace=namespace, entity="EMAIL_ADDRESS", stage="input"
    )

    model.script(Reply(text="Noted: jane.doe@example.com."))
    answer, header = bot.answer("Mail Jane.Doe@example.com, card 4111 1111 1111 1111.", session_id="s1")
    seen = model.bodies()[-1]["messages"][-1]["content"]
    assert "example.com" not in seen
    assert "4111" not in seen
    first = EMAIL.findall(seen)
    assert len(first) == 1, seen
    assert len(CARD.findall(seen)) == 1, seen
    assert answer["response"] == "Noted: jane.doe@example.com."  # redact.answer is off: the user gets it
    assert answer["guardrails"] == [
        {"policy": "pii", "stage": "input", "action": "redact", "reason": "CREDIT_CARD x1, EMAIL_ADDRESS x1"},
        {"policy": "pii", "stage": "output", "action": "redact", "reason": "EMAIL_ADDRESS x1"},
    ]
    assert header == "redact=input:pii, redact=output:pii"

    answer, _ = bot.answer("Again, that is jane.doe@example.com", session_id="s1")
    messages = model.bodies()[-1]["messages"]
    history = " ".join(m["content"] for m in messages[:-1])
    assert EMAIL.findall(messages[-1]["content"]) == first  # the same value, the same placeholder
    assert EMAIL.findall(history) == first * 2  # the stored user message and the stored reply
    assert "example.com" not in history

    bot.answer("Write to jane.doe@example.com", session_id="s2")
    other = EMAIL.findall(model.bodies()[-1]["messages"][-1]["content"])
    assert len(other) == 1
    assert other != first  # another session, another placeholder

    messages_, interventions = stored(state, namespace)
    assert not any("example.com" in m or "4111" in m for m in messages_), messages_
    assert sum(len(EMAIL.findall(m)) for m in messages_) >= 5
    assert ("pii", "input", "redact", "", "CREDIT_CARD x1, EMAIL_ADDRESS x1") in interventions
    after = counted(
        facade, "dockyard_pii_redactions_total", environment_namespace=namespace, entity="EMAIL_ADDRESS", stage="input"
    )
    assert after == before + 3

    # the answer too, once the environment says so
    model.respond_with(lambda body: Reply(text="Sure: probe@example.org"))
    _applied(api, bot, {"redact": {"storage": True, "answer": True}}, lambda a: "example.org" not in a["response"])
    answer, _ = bot.answer("What is my address?", session_id="s3")
    assert EMAIL.fullmatch(answer["response"].removeprefix("Sure: ")), answer
