"""An evaluation run against a REAL engine on CPU, end to end (docs/promotion.md): the tiny random-weight GGUF
model imported through the public API and served by llama.cpp's server (the local engine runner, as in
test_execute_real_engine), the demo's clock tool, the facade's runtime. The suite's cases are answered by the
real engine through the same runtime as deployed-app calls: the tool is really called, the latency is real,
and a case whose expectation the model's words cannot meet fails with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from tests.e2e.test_execute_real_engine import (  # noqa: F401 - fixtures
    APP,
    ENVIRONMENT,
    deploy_timebot,
    facade,
    operator,
    runner,
    store,
    tool_url,
)
from tests.support.dockyard import get, patch
from tests.support.runners import RunningFacade
from tests.support.users import Users
from tests.support.waiting import wait_for

SUITE: dict[str, Any] = {
    "concurrency": 2,
    "cases": [
        {
            "name": "tokyo-time",
            "category": "keyFlow",
            "message": "What time is it in Tokyo right now? Use the clock tool.",
            "expect": {"toolsUsed": ["clock"], "maxLatencyMs": 120000},
        },
        {
            "name": "impossible",
            "category": "edgeCase",
            "message": "Say the secret word.",
            "expect": {"contains": ["xyzzy-never-written"]},
        },
    ],
}

pytestmark = pytest.mark.usefixtures("operator", "runner", "user_roles")


def test_a_suite_runs_against_a_real_engine(
    api: client.ApiClient,
    namespace: str,
    facade: RunningFacade,  # noqa: F811
    tool_url: str,  # noqa: F811
    tmp_path: Path,
    team: Users,
) -> None:
    deploy_timebot(api, namespace, facade, tool_url, tmp_path)
    patch(api, namespace, "apps", APP, {"spec": {"evaluations": SUITE}})
    runs = f"/api/v1/namespaces/{namespace}/environments/{ENVIRONMENT}/evaluations"
    alice = team.headers("alice")
    started = facade.client.post(runs, json={}, headers=alice)
    assert started.status_code == 202, started.text
    url = f"{runs}/{started.json()['id']}"
    done = wait_for(
        lambda: (lambda r: r if r["state"] != "running" else None)(
            facade.client.get(url, params={"wait": 30}, headers=alice, timeout=40).json()
        ),
        timeout=300,
        what="the run to end",
    )
    assert (done["state"], done["total"], done["passed"]) == ("failed", 2, 1), done
    tokyo, impossible = done["results"]
    assert (tokyo["case"], tokyo["passed"], tokyo["toolsUsed"], tokyo["agent"]) == (
        "tokyo-time", True, ["clock"], "assistant"
    ), tokyo  # fmt: skip
    assert tokyo["response"].strip()
    assert 0 < tokyo["latencyMs"] < 120000
    assert impossible["reasons"] == ["the answer does not contain 'xyzzy-never-written'"], impossible
    summary = wait_for(lambda: (get(api, namespace, "apps", APP).get("status") or {}).get("evaluations"), timeout=30,
                       what="the summary")  # fmt: skip
    assert summary[0]["toolsReached"] == ["clock"]
    assert summary[0]["agentsReached"] == ["assistant"]
