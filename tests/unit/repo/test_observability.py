"""Metrics and logs of both processes, without a cluster: the facade's /metrics (route templates, upload
and job counters, the functions the runtime calls), the operator's work-queue and job metrics on its
health port, JSON logs with the request id, and secrets masked in every log line."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiohttp.test_utils import TestClient as AioClient
from aiohttp.test_utils import TestServer
from fastapi import FastAPI
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from dockyard_api import metrics
from dockyard_api.metrics import RequestMiddleware
from dockyard_core import logs, requestid
from dockyard_operator import health, monitoring
from dockyard_operator.workqueue import Outcome, WorkQueue


def sample(text: str, name: str, **labels: str) -> float | None:
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return float(s.value)
    return None


# --- facade ----------------------------------------------------------------------------------------------


def small_app() -> FastAPI:
    from dockyard_api.ops import router as metrics_router

    app = FastAPI()
    app.add_middleware(RequestMiddleware)
    app.include_router(metrics_router.router)

    @app.get("/e/{namespace}/{environment}/api/public/dock-status/{dock_status_id}")
    async def lookup(namespace: str, environment: str, dock_status_id: str) -> dict[str, Any]:
        logging.getLogger("dockyard.test").info("looked up %s", dock_status_id)
        return {"requestId": requestid.current.get(), "annotations": requestid.as_annotation()}

    return app


def test_requests_are_counted_by_route_template_and_carry_a_request_id() -> None:
    client = TestClient(small_app())
    before = sample(client.get("/metrics").text, "dockyard_api_requests_total", status="200",
                    route="/e/{namespace}/{environment}/api/public/dock-status/{dock_status_id}") or 0  # fmt: skip
    unmatched = sample(client.get("/metrics").text, "dockyard_api_requests_total", route="<unmatched>",
                       method="GET", status="404") or 0  # fmt: skip
    answers = [client.get(f"/e/team/env-{i}/api/public/dock-status/job-{i}") for i in range(3)]
    client.get("/no/such/path/a"), client.get("/no/such/path/b")
    text = client.get("/metrics").text
    route = "/e/{namespace}/{environment}/api/public/dock-status/{dock_status_id}"
    assert sample(text, "dockyard_api_requests_total", route=route, method="GET", status="200") == before + 3
    # other tests' apps count in the same registry: the difference, for this method
    assert sample(text, "dockyard_api_requests_total", route="<unmatched>", method="GET", status="404") == unmatched + 2
    assert (sample(text, "dockyard_api_request_duration_seconds_count", route=route) or 0) >= 3
    assert "/no/such" not in text  # never a concrete path: bounded cardinality
    assert "job-1" not in text
    ids = {a.headers["x-request-id"] for a in answers}
    assert len(ids) == 3
    body = answers[0].json()
    assert body["requestId"] == answers[0].headers["x-request-id"]
    assert body["annotations"] == {"dockyard.dev/request-id": body["requestId"]}
    # a sane id offered by the caller is kept; anything else is replaced
    assert client.get("/metrics", headers={"X-Request-Id": "ci-run-42.7"}).headers["x-request-id"] == "ci-run-42.7"
    assert (
        client.get("/metrics", headers={"X-Request-Id": "bad id with spaces"}).headers["x-request-id"]
        != "bad id with spaces"
    )


def test_the_runtime_counters_are_exposed() -> None:
    metrics.upload_chunk(1000)
    metrics.import_outcome("completed")
    metrics.deploy_outcome("model", "IN_PROGRESS")
    metrics.execute_outcome("team", "bot-prod", "ok", 0.2)
    metrics.execute_outcome("team", "bot-prod", "rate_limited")
    metrics.tokens("team", "bot-prod", 12, 7)
    metrics.rate_limited("team", "bot-prod", "requestsPerMinute")
    text = metrics.exposition()[0].decode()
    assert (sample(text, "dockyard_api_upload_bytes_total") or 0) >= 1000
    assert (sample(text, "dockyard_api_imports_total", outcome="completed") or 0) >= 1
    assert (sample(text, "dockyard_api_deploys_total", kind="model", outcome="IN_PROGRESS") or 0) >= 1
    assert (sample(text, "dockyard_api_executes_total", environment="bot-prod", outcome="ok") or 0) >= 1
    assert (sample(text, "dockyard_api_tokens_total", environment="bot-prod", direction="in") or 0) >= 12
    assert (sample(text, "dockyard_api_tokens_total", environment="bot-prod", direction="out") or 0) >= 7
    assert (sample(text, "dockyard_api_rate_limited_total", limit="requestsPerMinute") or 0) >= 1
    assert sample(text, "process_resident_memory_bytes") is not None


def test_children_kept_are_the_metrics_own_and_count_as_they_would(monkeypatch: pytest.MonkeyPatch) -> None:
    """metrics.Children looks a child up once: the same object as labels() gives, so every count reaches the
    exposition, also for label sets beyond the ones it keeps."""
    monkeypatch.setattr(metrics, "CHILDREN_KEPT", 2)
    children = metrics.Children(metrics.EXECUTES)
    assert children("kept", "env-a", "ok") is metrics.EXECUTES.labels("kept", "env-a", "ok")
    for environment in ("env-a", "env-b", "env-c", "env-c"):
        children("kept", environment, "ok").inc()
    assert len(children.children) == 2
    text = metrics.exposition()[0].decode()
    counts = {
        e: sample(text, "dockyard_api_executes_total", environment_namespace="kept", environment=f"env-{e}")
        for e in "abc"
    }
    assert counts == {"a": 1, "b": 1, "c": 2}


# --- logs -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "secret",
    [
        "dky_abcdefghijkl_Zq9s8XYZ-very_secret",
        "Bearer eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJl",
        "token=0123456789abcdefSECRET",
    ],
)
def test_secrets_never_reach_a_log_line(secret: str) -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.json_formatter())
    logs.install_filters(handler)
    logger = logging.getLogger("dockyard.test.redact")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("calling with %s", secret)
        try:
            raise RuntimeError(f"failed with {secret}")
        except RuntimeError:
            logger.exception("boom")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    for part in ("Zq9s8XYZ", "very_secret", "c2lnbmF0dXJl", "eyJzdWIiOiJzeXN0ZW0ifQ", "0123456789abcdef"):
        assert part not in out
    lines = [json.loads(line) for line in out.splitlines()]
    assert lines[0]["level"] == "WARNING"
    assert "dky_abcdefghijkl_***" in out or "***" in lines[0]["message"]


def test_json_logs_carry_the_request_id() -> None:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(logs.json_formatter())
    logs.install_filters(handler)
    logger = logging.getLogger("dockyard.test.rid")
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    logger.propagate = False
    token = requestid.current.set("req-123")
    try:
        logger.info("deploy %s", "llama", extra={"dock_status_id": "job-1"})
    finally:
        requestid.current.reset(token)
        logger.removeHandler(handler)
    line = json.loads(stream.getvalue())
    assert (line["message"], line["request_id"], line["dock_status_id"], line["logger"]) == (
        "deploy llama", "req-123", "job-1", "dockyard.test.rid",
    )  # fmt: skip


# --- operator ---------------------------------------------------------------------------------------------


def test_the_work_queue_reports_depth_wait_and_results() -> None:
    async def run() -> str:
        gate = asyncio.Event()
        results = iter(["success", "conflict"])

        async def reconcile(body: Any) -> Outcome:
            await gate.wait()
            if body["metadata"]["name"] == "bad":
                raise RuntimeError("reconcile failed")
            return Outcome(result=next(results))

        queue = WorkQueue("TestKind", reconcile, batch_window=0.0, max_concurrent=1)
        for name in ("a", "b", "bad"):
            queue.observe({"metadata": {"namespace": "ns", "name": name}})
        await asyncio.sleep(0.05)
        text = monitoring.exposition()[0].decode()
        assert sample(text, "dockyard_operator_workqueue_depth", kind="TestKind") == 2  # one runs, two wait
        assert sample(text, "dockyard_operator_workqueue_running", kind="TestKind") == 1
        gate.set()
        await asyncio.sleep(0.1)
        await queue.close()
        return monitoring.exposition()[0].decode()

    text = asyncio.run(run())
    assert sample(text, "dockyard_operator_reconciles_total", kind="TestKind", result="success") == 1
    assert sample(text, "dockyard_operator_reconciles_total", kind="TestKind", result="conflict") == 1
    assert sample(text, "dockyard_operator_reconciles_total", kind="TestKind", result="error") == 1
    assert sample(text, "dockyard_operator_workqueue_wait_seconds_count", kind="TestKind") == 3
    assert sample(text, "dockyard_operator_workqueue_depth", kind="TestKind") == 0


def test_job_outcomes_are_timed_by_device_type(caplog: pytest.LogCaptureFixture) -> None:
    body = {"kind": "ModelDeployment", "metadata": {"namespace": "ns", "name": "llama",
            "annotations": {"dockyard.dev/request-id": "req-9"}}, "spec": {"deviceType": "g6e.xlarge"}}  # fmt: skip
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with caplog.at_level(logging.INFO, logger="dockyard.jobs"):
        monitoring.job_finished(body, dock_status_id="j-1", job_type="MODELS", action="DEPLOY", status="FAILED",
                                reason="NoFittingNode", device_type="g6e.xlarge", start=start,
                                end=start + timedelta(seconds=42))  # fmt: skip
    monitoring.autoscaler_decision("ScaleUp")
    text = monitoring.exposition()[0].decode()
    labels = {"job_type": "MODELS", "action": "DEPLOY", "device_type": "g6e.xlarge", "status": "FAILED"}
    assert (sample(text, "dockyard_operator_jobs_total", **labels) or 0) >= 1
    assert (sample(text, "dockyard_operator_job_duration_seconds_sum", **labels) or 0) >= 42
    assert (sample(text, "dockyard_operator_autoscaler_decisions_total", reason="ScaleUp") or 0) >= 1
    record = next(r for r in caplog.records if r.name == "dockyard.jobs")
    assert record.request_id == "req-9"  # type: ignore[attr-defined]
    assert "j-1 FAILED" in record.getMessage()


def test_the_health_port_serves_metrics() -> None:
    async def run() -> tuple[int, str, str]:
        state = health.HealthState(api=None)  # type: ignore[arg-type]
        async with AioClient(TestServer(health.build_app(state))) as client:
            resp = await client.get("/metrics")
            return resp.status, resp.headers["Content-Type"], await resp.text()

    status, content_type, text = asyncio.run(run())
    assert status == 200
    assert content_type.startswith("text/plain")
    assert "dockyard_operator_reconciles" in text
    assert "dockyard_operator_workqueue_depth" in text


def test_every_metric_of_the_grafana_dashboard_exists() -> None:
    import re
    from pathlib import Path

    dashboard = json.loads((Path(__file__).parents[3] / "charts/dockyard/dashboards/dockyard.json").read_text())
    queried = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"\b(dockyard_[a-z_]+)\b", target["expr"])
    }
    known: set[str] = set()
    for registry in (metrics.REGISTRY, monitoring.REGISTRY):
        for family in registry.collect():
            known |= {family.name + suffix for suffix in ("", "_total", "_bucket", "_count", "_sum")}
    assert len(queried) >= 15
    assert queried <= known, sorted(queried - known)


def test_the_store_heartbeat_is_a_metric() -> None:
    metrics.store_up(False)
    assert sample(metrics.exposition()[0].decode(), "dockyard_api_store_up") == 0
    metrics.store_up(True)
    assert sample(metrics.exposition()[0].decode(), "dockyard_api_store_up") == 1


def test_each_deployments_latest_job_is_a_metric() -> None:
    async def run() -> str:
        async def reconcile(body: Any) -> Outcome:
            return Outcome(result="success")

        queue = WorkQueue("JobKind", reconcile, batch_window=0.0)
        started = "2026-11-26T08:00:00Z"
        job = {"status": "FAILED", "reason": "NoMatchingNode", "startTime": started}
        queue.observe({"metadata": {"namespace": "team", "name": "llama"}, "status": {"job": job}})
        queue.observe({"metadata": {"namespace": "team", "name": "fresh"}})  # no job yet: not exported
        text = monitoring.exposition()[0].decode()
        await queue.close()
        return text

    text = asyncio.run(run())
    labels = {"kind": "JobKind", "deployment_namespace": "team", "deployment": "llama"}
    assert sample(text, "dockyard_operator_deployment_job_status", **labels, status="FAILED",
                  reason="NoMatchingNode") == 1  # fmt: skip
    assert (
        sample(text, "dockyard_operator_deployment_job_start_time_seconds", **labels)
        == datetime(2026, 11, 26, 8, tzinfo=UTC).timestamp()
    )
    assert sample(text, "dockyard_operator_deployment_job_status", deployment="fresh") is None


def test_the_webhook_certificate_expiry_is_read_from_its_file(tmp_path: Any) -> None:
    from dockyard_operator.webhook_tls import self_signed

    cert, _ = self_signed(tmp_path / "a", "127.0.0.1", days=3)
    monitoring.watch_certificate(cert)
    expiry = sample(
        monitoring.exposition()[0].decode(), "dockyard_operator_webhook_certificate_expiry_timestamp_seconds"
    )
    assert expiry is not None
    assert abs(expiry - (datetime.now(UTC) + timedelta(days=3)).timestamp()) < 60
    renewed, _ = self_signed(tmp_path / "b", "127.0.0.1", days=90)  # replaced in place (cert-manager)
    cert.write_bytes(renewed.read_bytes())
    import os

    os.utime(cert, (1, 1))  # another mtime than the first read's
    later = sample(
        monitoring.exposition()[0].decode(), "dockyard_operator_webhook_certificate_expiry_timestamp_seconds"
    )
    assert later is not None
    assert later - expiry > 80 * 86400


def test_the_rule_file_is_generated_from_its_source() -> None:
    from pathlib import Path

    from dockyard_core import alertrules

    shipped = (Path(__file__).parents[3] / "charts/dockyard/files/alerts.yaml").read_text()
    assert shipped == alertrules.render(), (
        "run: python -m dockyard_core.alertrules --output charts/dockyard/files/alerts.yaml"
    )
    short = alertrules.groups(for_override="2s")
    assert {r.get("for") for g in short["groups"] for r in g["rules"]} == {"2s"}
    queried = {
        n
        for g in short["groups"]
        for r in g["rules"]
        for n in __import__("re").findall(r"\b(dockyard_[a-z_]+)\b", r["expr"])
    }
    known: set[str] = set()
    for registry in (metrics.REGISTRY, monitoring.REGISTRY):
        for family in registry.collect():
            known |= {family.name + suffix for suffix in ("", "_total", "_bucket", "_count", "_sum")}
    assert queried <= known, sorted(queried - known)
