"""runtime/guard.py's pure parts: the guard model's request and how its answer is read (docs/guardrails.md,
"guardModel"), and the X-Dockyard-Guardrails header of a turn's interventions."""

from __future__ import annotations

from dockyard_api.runtime.guard import GUARD_MAX_TOKENS, VERDICT_SCHEMA, guard_request, parse_verdict
from dockyard_core.guardrails import Verdict, compile_guardrails, header_value
from dockyard_core.interventions import Intervention


def test_the_guard_request_constrains_the_answer_and_keeps_the_deployment_sampling() -> None:
    compiled = compile_guardrails(
        {"policies": [{"name": "judge", "type": "guardModel", "model": "guard", "instructions": "No weapons."}]}
    )
    assert compiled is not None
    params = {"model": "guard", "temperature": 0.0, "top_k": 40, "max_tokens": 8, "stop": ["}"]}
    body = guard_request(params, compiled.policies[0], "toolResults", "a tool said this")
    assert body["response_format"] == {"type": "json_object", "schema": VERDICT_SCHEMA}
    assert (body["model"], body["temperature"], body["top_k"]) == ("guard", 0.0, 40)
    assert body["max_tokens"] == GUARD_MAX_TOKENS  # the deployment's limit could cut the JSON
    assert "stop" not in body
    system, user = body["messages"]
    assert system["role"] == "system"
    assert system["content"].endswith("Policy: No weapons.")
    assert user == {"role": "user", "content": "Check a tool's answer:\n\na tool said this"}


def test_a_verdict_is_read_strictly_and_anything_else_is_a_deny() -> None:
    assert parse_verdict('{"verdict": "allow", "reason": "fine"}') == Verdict(True, "fine")
    assert parse_verdict('{"verdict":"deny","reason":" weapons\n talk "}') == Verdict(False, "weapons talk")
    assert parse_verdict('{"verdict": "deny"}') == Verdict(False, "no reason given")
    for garbage in ("yes", '{"verdict": "maybe", "reason": ""}', "[]", '{"reason": "x"}', ""):
        assert parse_verdict(garbage) == Verdict(False, "the guard model's answer is not a verdict"), garbage
    assert len(parse_verdict('{"verdict": "deny", "reason": "' + "x" * 500 + '"}').reason) == 200


def test_the_header_names_each_intervention_and_stays_bounded() -> None:
    many = [Intervention(f"policy-{i}", "output", "record", "x") for i in range(100)]
    value = header_value(many)
    assert len(value) == 1024
    assert value.startswith("record=output:policy-0, record=output:policy-1")
    assert value.endswith("...")
