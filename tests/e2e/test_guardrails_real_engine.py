"""A guardModel policy on a REAL engine (docs/guardrails.md, "guardModel"): the tiny random-weight GGUF model,
imported and deployed through the public API and served by llama.cpp (as in test_execute_real_engine), judges
the user's message. Its verdict is noise, so the test asks the engine itself, with the very request the runtime
sends (greedy sampling: the same answer twice), checks that the JSON-schema constraint held (a JSON verdict),
and then that the turn followed that verdict: a deny blocks it with the guard's reason, an allow lets the agent
answer with its tool."""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest
from kubernetes import client

from dockyard_api.runtime.config import model_params
from dockyard_api.runtime.guard import guard_request, parse_verdict
from dockyard_core.guardrails import compile_guardrails
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
    request = guard_request(model_params(mdep), compiled.policies[0], "input", QUESTION)
    asked = httpx.post(f"{endpoint}/v1/chat/completions", json=request, timeout=120)
    assert asked.status_code == 200, asked.text
    raw = asked.json()["choices"][0]["message"]["content"]
    # the grammar held: a JSON object of the verdict schema (its strings may hold raw newlines: the tiny
    # model's vocabulary has whole-sentence tokens ending in one, which the grammar lets through)
    answer = json.loads(raw, strict=False)
    assert answer["verdict"] in ("allow", "deny"), raw
    assert isinstance(answer["reason"], str), raw
    expected = parse_verdict(raw)

    resp = facade.client.post(path, headers=headers, json={"message": QUESTION}, timeout=150)
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["tokens"]["input"] > 0
    if expected.allow:
        assert body["guardrails"] == []
        assert "x-dockyard-guardrails" not in resp.headers
        assert body["tools_used"] == ["clock"]
        assert body["response"] != "The guard said no."
    else:
        reason = f"guard model: {expected.reason}"
        assert body["response"] == "The guard said no."
        assert body["guardrails"] == [{"policy": "judge", "stage": "input", "action": "block", "reason": reason}]
        assert resp.headers["x-dockyard-guardrails"] == "block=input:judge"
        assert body["tools_used"] == []
