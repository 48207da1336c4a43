"""Alert rules end to end with a real Prometheus (built from Go modules, tests/support/prometheus.py) on
127.0.0.1: it scrapes the facade and the operator of the local control plane and loads the shipped rules
(every ``for:`` shortened by the rules' own parameter, nothing else changed); injected faults make the
matching alerts fire and reach a receiver; the checklist's Alerts item reads that Prometheus."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from kubernetes import client

from dockyard_api.settings import ApiSettings
from dockyard_core import alertrules
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, get, model_deployment, wait_job
from tests.support.prometheus import RunningPrometheus, run_prometheus
from tests.support.runners import RunningFacade, RunningOperator, free_port, run_facade, run_operator
from tests.support.runtime_app import answered, deploy_bot
from tests.support.scripted_model import Reply, ScriptedModel, scripted_model
from tests.support.users import Users
from tests.support.waiting import wait_for


class Receiver:
    """An HTTP endpoint on 127.0.0.1 that takes what Prometheus posts to an Alertmanager (``/api/v2/alerts``)."""

    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                owner.alerts.extend(json.loads(body or b"[]"))
                self.send_response(200)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                return

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def names(self) -> set[str]:
        return {str(a.get("labels", {}).get("alertname")) for a in self.alerts}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def model() -> Iterator[ScriptedModel]:
    with scripted_model() as server:
        yield server


@pytest.fixture(scope="module")
def stack(
    cluster: E2ECluster, crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[RunningOperator, RunningFacade, RunningPrometheus, Receiver]]:
    state = tmp_path_factory.mktemp("alerts")
    rules = state / "alerts.yaml"
    rules.write_text(alertrules.render(for_override="2s"))  # the shipped rules, each for: 2s
    prom_port = free_port()
    receiver = Receiver()
    env = {
        "DOCKYARD_OPERATOR_ENVIRONMENT_INTERVAL_SECONDS": "1",
        "DOCKYARD_OPERATOR_PROMETHEUS_URL": f"http://127.0.0.1:{prom_port}",
    }
    settings = ApiSettings(
        api_key_cache_seconds=0, token_cache_seconds=0, last_used_interval_seconds=0, sweep_interval_seconds=0,
        usage_summary_seconds=0.5, model_store=state / "model-store", endpoint_mode="local",
    )  # fmt: skip
    try:
        with run_operator(env=env) as operator, run_facade(settings) as facade:
            targets = {
                "dockyard-operator": [operator.health_url.removeprefix("http://")],
                "dockyard-facade": [facade.url.removeprefix("http://")],
            }
            with run_prometheus(state / "prometheus", scrape=targets, rule_files=[rules],
                                alertmanagers=[receiver.address], port=prom_port) as prom:  # fmt: skip
                yield operator, facade, prom, receiver
    finally:
        receiver.close()


def firing(prom: RunningPrometheus, name: str, **labels: str) -> dict[str, Any] | None:
    for alert in prom.alerts():
        found = alert["labels"]
        wanted = found.get("alertname") == name and all(found.get(k) == v for k, v in labels.items())
        if wanted and alert["state"] == "firing":
            return alert
    return None


def item(api: client.ApiClient, namespace: str, environment: str, name: str) -> tuple[str, str] | None:
    for c in (get(api, namespace, "environments", environment).get("status") or {}).get("checklist") or []:
        if c["item"] == name:
            return c["state"], c["detail"]
    return None


def test_prometheus_scrapes_both_and_loads_the_rules(
    stack: tuple[RunningOperator, RunningFacade, RunningPrometheus, Receiver],
) -> None:
    _, _, prom, _ = stack
    up = wait_for(lambda: (r := prom.query("up == 1")) and len(r) == 2 and r, timeout=30, what="both targets up")
    assert {r["metric"]["job"] for r in up} == {"dockyard-operator", "dockyard-facade"}
    groups = prom.get("/api/v1/rules")["groups"]
    loaded = {r["name"] for g in groups for r in g["rules"]}
    assert loaded == {r["alert"] for g in alertrules.groups()["groups"] for r in g["rules"]}
    assert all(r["health"] == "ok" for g in groups for r in g["rules"]), [r for g in groups for r in g["rules"]]
    assert wait_for(lambda: prom.query("dockyard_api_store_up == 1"), timeout=15, what="the store up")


def test_a_failed_deployment_fires_its_alert_and_reaches_the_receiver(
    api: client.ApiClient, namespace: str, stack: tuple[RunningOperator, RunningFacade, RunningPrometheus, Receiver]
) -> None:
    _, _, prom, receiver = stack
    # the fault: a ModelDeployment of a Model whose upload never completed fails at once (ModelNotReady)
    upload = {"fileContext": "model", "fileName": "m", "fileExtension": "tar", "fileSize": 10, "totalChunks": 1}
    create(api, namespace, "models", "Model", "importing", {"source": {"upload": upload}})
    assert firing(prom, "DockyardDeploymentFailed", deployment_namespace=namespace) is None
    model_deployment(api, namespace, "importing")
    wait_job(api, namespace, "modeldeployments", "importing", "FAILED", timeout=30)
    alert = wait_for(lambda: firing(prom, "DockyardDeploymentFailed", deployment_namespace=namespace), timeout=60,
                     what="DockyardDeploymentFailed firing")  # fmt: skip
    assert alert["labels"]["deployment"] == "importing"
    assert alert["labels"]["reason"] == "ModelNotReady"
    assert alert["labels"]["severity"] == "warning"
    assert alert["annotations"]["summary"] == f"ModelDeployment {namespace}/importing failed"
    wait_for(lambda: "DockyardDeploymentFailed" in receiver.names(), timeout=30, what="the alert at the receiver")


def test_a_model_that_errors_fires_the_environments_error_rate_and_the_checklist_sees_it(
    api: client.ApiClient, namespace: str, stack: tuple[RunningOperator, RunningFacade, RunningPrometheus, Receiver],
    model: ScriptedModel, team: Users,
) -> None:  # fmt: skip
    _, facade, prom, receiver = stack
    bot = deploy_bot(api, namespace, model, "bot-prod")
    model.script(*(Reply(text=f"answer {i}", usage=(10, 4)) for i in range(3)))
    for i in range(3):
        answered(facade.client, bot, {"message": f"hello {i}", "session_id": f"ok-{i}"})
    state = wait_for(lambda: (s := item(api, namespace, "bot-prod", "Alerts")) and s[0] == "Done" and s, timeout=60,
                     what="Alerts Done")  # fmt: skip
    assert "evaluates 13 Dockyard alert rules" in state[1]
    assert receiver.address in state[1]
    # the summary on the status is refreshed on a period: it may first show the calls counted so far
    analytics = wait_for(lambda: (s := item(api, namespace, "bot-prod", "Analytics")) and s[0] == "Done"
                         and "3 answered call(s)" in s[1] and s,
                         timeout=60, what="Analytics Done with the 3 calls")  # fmt: skip
    assert "0 error(s)" in analytics[1]
    assert firing(prom, "DockyardEnvironmentErrorRate", environment_namespace=namespace) is None

    # the fault: the model answers 500 from now on; calls keep coming (spread over several scrapes)
    model.script(*(Reply(status=500, raw=b"engine crashed") for _ in range(12)))
    for i in range(6):
        failed = facade.client.post(bot.execute, headers=bot.headers, json={"message": "x", "session_id": f"bad-{i}"})
        assert failed.status_code >= 500, failed.text
        scraped = f'sum(dockyard_api_executes_total{{environment_namespace="{namespace}",outcome!="ok"}}) >= {i + 1}'
        wait_for(lambda q=scraped: prom.query(q), timeout=15, what="the error scraped")
    alert = wait_for(lambda: firing(prom, "DockyardEnvironmentErrorRate", environment_namespace=namespace),
                     timeout=60, what="DockyardEnvironmentErrorRate firing")  # fmt: skip
    assert alert["labels"]["environment"] == "bot-prod"
    assert alert["labels"]["severity"] == "critical"
    wait_for(lambda: "DockyardEnvironmentErrorRate" in receiver.names(), timeout=30, what="at the receiver")
    detail = wait_for(lambda: (s := item(api, namespace, "bot-prod", "Alerts")) and "firing now" in s[1] and s[1],
                      timeout=60, what="the checklist naming the firing alert")  # fmt: skip
    assert detail.endswith("firing now for this environment: DockyardEnvironmentErrorRate")
    # the other environments' alerts are theirs: the draft environment names none
    assert "firing now" not in (item(api, namespace, "bot-draft", "Alerts") or ("", ""))[1]

    # the same turns in the analytics of the management API (a viewer may read them, a stranger may not)
    url = f"/api/v1/namespaces/{namespace}/environments/bot-prod/analytics"

    def counted() -> dict[str, Any] | None:
        shown = facade.client.get(url, headers=team.headers("vic"))
        assert shown.status_code == 200, shown.text
        versions = shown.json()["versions"]
        return versions[0] if versions and versions[0]["totals"]["errors"] >= 6 else None

    draft = wait_for(counted, timeout=30, what="the errors counted per version")
    totals = draft["totals"]
    assert draft["version"] == "draft"
    assert (totals["turns"], totals["errors"], totals["sessions"]) == (3, 6, 3)
    assert (totals["tokensIn"], totals["tokensOut"]) == (30, 12)
    assert 0 < totals["latencyMs"]["p50"] <= totals["latencyMs"]["p99"] < 30_000
    assert sum(d["turns"] for d in draft["days"]) == 3
    assert facade.client.get(url, headers=team.headers("mallory")).status_code == 403
    refused = facade.client.get(url, params={"version": "newest"}, headers=team.headers("vic"))
    assert refused.status_code == 422
    assert refused.json()["error"]["details"][0]["field"] == "query.version"
