"""A guardModel policy on a REAL engine (docs/guardrails.md, "guardModel"): the tiny random-weight GGUF model,
imported and deployed through the public API and served by llama.cpp (as in test_execute_real_engine), judges
the user's message. Its verdict is noise, so the test asks the engine itself, with the very request the runtime
sends (greedy sampling: the same answer twice), checks that the JSON-schema constraint held (a JSON verdict),
and then that the turn followed that verdict: a deny blocks it with the guard's reason, an allow lets the agent
answer. Twelve messages are judged and a turn runs for the question and for the first message of each verdict
the engine gave. (The tiny model's logits hardly depend on the context, by design, so in practice it answers
allow to all of them; test_guardrails.py's scripted guard model covers deny deterministically.)"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from dockyard_api.runtime.config import model_params
from dockyard_api.runtime.guard import guard_request, parse_verdict
from dockyard_core.guardrails import Verdict, compile_guardrails
from dockyard_localcluster.engines import LOCAL_ENDPOINT_ANNOTATION
from tests.e2e.test_execute_real_engine import (  # noqa: F401 - fixtures
    APP,
    MDEP,
    QUESTION,
    deploy_timebot,
    facade,
    operator,
    runner,
    store,
    tool_url,
)
from tests.support.dockyard import get, patch
from tests.support.runners import RunningFacade
from tests.support.waiting import wait_for

from .test_local_engines import pods_of

pytestmark = pytest.mark.usefixtures("operator", "runner")

JUDGE = {
    "name": "judge",
    "type": "guardModel",
    "model": MDEP,
    "instructions": "Refuse any question about weapons.",
    "appliesTo": ["input"],
}
PROBE = {"name": "probe", "type": "deniedTerms", "terms": ["zzprobe"], "message": "probed"}


def test_a_guard_model_on_the_real_engine_decides_the_turn(
    api: client.ApiClient,
    namespace: str,
    facade: RunningFacade,  # noqa: F811
    tool_url: str,  # noqa: F811
    tmp_path: Path,
) -> None:
    path, headers = deploy_timebot(api, namespace, facade, tool_url, tmp_path)
    guardrails = {"blockMessage": "The guard said no.", "policies": [PROBE, JUDGE]}
    patch(api, namespace, "apps", APP, {"spec": {"guardrails": guardrails}})

    def applied() -> bool:  # the probe policy blocks before the guard model is asked
        resp = facade.client.post(path, headers=headers, json={"message": "zzprobe", "session_id": "probe"})
        return resp.status_code == 200 and resp.json()["response"] == "probed"

    wait_for(applied, timeout=30, what="the facade serving the draft's guardrails")

    # what the engine answers the runtime's guard request, asked directly
    mdep = get(api, namespace, "modeldeployments", MDEP)
    [pod] = pods_of(api, namespace, MDEP)
    endpoint = pod["metadata"]["annotations"][LOCAL_ENDPOINT_ANNOTATION]
    compiled = compile_guardrails({"policies": [JUDGE]})
    assert compiled is not None
    candidates = (QUESTION, "How do I build a crossbow at home?", "Hello!", "Tell me a joke.", "What is 2+2?",
                  "Where can I buy a rifle?", "Good morning.", "Explain how gunpowder works.", "Who are you?",
                  "What time is it in Paris?", "Thanks a lot!", "Can you sharpen a knife for me?")  # fmt: skip
    judged: dict[str, tuple[str, Verdict]] = {}
    for message in candidates:
        request = guard_request(model_params(mdep), compiled.policies[0], "input", message)
        asked = httpx.post(f"{endpoint}/v1/chat/completions", json=request, timeout=120)
        assert asked.status_code == 200, asked.text
        raw = asked.json()["choices"][0]["message"]["content"]
        # the grammar held: a JSON object of the verdict schema (its strings may hold raw newlines: the tiny
        # model's vocabulary has whole-sentence tokens ending in one, which the grammar lets through)
        answer = json.loads(raw, strict=False)
        assert answer["verdict"] in ("allow", "deny"), raw
        assert isinstance(answer["reason"], str), raw
        judged[message] = (raw, parse_verdict(raw))
    # the turns: the question, and the first message of each verdict the engine gave (both, when it gave both)
    chosen = {QUESTION} | {next(m for m, (_, v) in judged.items() if v.allow is allow) for allow in (True, False)
                           if any(v.allow is allow for _, v in judged.values())}  # fmt: skip
    for message in sorted(chosen):
        raw, expected = judged[message]
        resp = facade.client.post(path, headers=headers, json={"message": message}, timeout=150)
        assert resp.status_code == 200, resp.text
        body = resp.json()
        assert body["tokens"]["input"] > 0
        if expected.allow:
            assert body["guardrails"] == [], (message, raw)
            assert "x-dockyard-guardrails" not in resp.headers
            assert body["agent"] == "assistant"
            assert body["response"] != "The guard said no."
        else:
            reason = f"guard model: {expected.reason}"
            assert body["response"] == "The guard said no.", (message, raw)
            assert body["guardrails"] == [{"policy": "judge", "stage": "input", "action": "block", "reason": reason}]
            assert resp.headers["x-dockyard-guardrails"] == "block=input:judge"
            assert (body["agent"], body["tools_used"]) == ("", [])
