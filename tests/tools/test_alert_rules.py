"""The alert rules with the real promtool (tests/support/prometheus.py): the shipped rule file passes ``promtool
check rules``, each rule fires on the series it is about and stays quiet on the ones it is not
(``promtool test rules`` on the same rules without their annotations), and the chart's PrometheusRule
carries the file unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dockyard_core import alertrules
from tests.support.helm import CHART, Helm, find, helm_binary, one
from tests.support.prometheus import promtool

RULE_FILE = CHART / "files" / "alerts.yaml"
OP = {"job": "dockyard-operator", "instance": "op:8081"}
API = {"job": "dockyard-facade", "instance": "api:8080"}
ENV = {"environment_namespace": "team", "environment": "bot-prod"}


def series(name: str, labels: dict[str, str], values: str) -> dict[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return {"series": f"{name}{{{inner}}}", "values": values}


def case(
    inputs: list[dict[str, str]], alert: str, at: str, expected: list[dict[str, str]], interval: str = "1m"
) -> dict[str, Any]:
    return {
        "interval": interval,
        "input_series": inputs,
        "alert_rule_test": [{"eval_time": at, "alertname": alert, "exp_alerts": [{"exp_labels": e} for e in expected]}],
    }


DEPLOYMENT = {"kind": "ModelDeployment", "deployment_namespace": "team", "deployment": "llama"}
CASES: list[dict[str, Any]] = [
    # a failed deployment fires after its for: (1m), a successful one never
    case(
        [
            series(
                "dockyard_operator_deployment_job_status",
                {**OP, **DEPLOYMENT, "status": "FAILED", "reason": "NoMatchingNode"},
                "1x5",
            ),
            series(
                "dockyard_operator_deployment_job_status",
                {**OP, **DEPLOYMENT, "deployment": "ok", "status": "SUCCESS", "reason": "Deployed"},
                "1x5",
            ),
        ],
        "DockyardDeploymentFailed",
        "2m",
        [{**OP, **DEPLOYMENT, "status": "FAILED", "reason": "NoMatchingNode", "severity": "warning"}],
    ),
    case(
        [
            series(
                "dockyard_operator_deployment_job_status",
                {**OP, **DEPLOYMENT, "status": "FAILED", "reason": "NoMatchingNode"},
                "1x5",
            ),
        ],
        "DockyardDeploymentFailed",
        "30s",
        [],  # still pending: for 1m
        interval="15s",
    ),
    # stuck: IN_PROGRESS since t=0 for more than 30 minutes (plus for: 5m); one started later is not
    case(
        [
            series(
                "dockyard_operator_deployment_job_status",
                {**OP, **DEPLOYMENT, "status": "IN_PROGRESS", "reason": "Deploying"},
                "1x60",
            ),
            series("dockyard_operator_deployment_job_start_time_seconds", {**OP, **DEPLOYMENT}, "0x60"),
            series(
                "dockyard_operator_deployment_job_status",
                {**OP, **DEPLOYMENT, "deployment": "new", "status": "IN_PROGRESS", "reason": "Deploying"},
                "1x60",
            ),
            series(
                "dockyard_operator_deployment_job_start_time_seconds",
                {**OP, **DEPLOYMENT, "deployment": "new"},
                "1500x60",
            ),
        ],
        "DockyardDeploymentStuck",
        "40m",
        [{**OP, **DEPLOYMENT, "severity": "warning"}],
    ),
    # errors on Dockyard's side count, the callers' own mistakes (invalid, rate_limited...) do not
    case(
        [
            series("dockyard_api_executes_total", {**API, **ENV, "outcome": "ok"}, "0+60x30"),
            series("dockyard_api_executes_total", {**API, **ENV, "outcome": "upstream_error"}, "0+10x30"),
            series("dockyard_api_executes_total", {**API, **ENV, "environment": "noisy", "outcome": "ok"}, "0+60x30"),
            series(
                "dockyard_api_executes_total", {**API, **ENV, "environment": "noisy", "outcome": "invalid"}, "0+60x30"
            ),
        ],
        "DockyardEnvironmentErrorRate",
        "20m",
        [{**ENV, "severity": "critical"}],
    ),
    case(
        [
            series("dockyard_api_execute_duration_seconds_bucket", {**API, **ENV, "le": le}, values)
            for le, values in (("10.0", "0+1x30"), ("30.0", "0+2x30"), ("60.0", "0+10x30"), ("+Inf", "0+10x30"))
        ],
        "DockyardEnvironmentLatencyHigh",
        "20m",
        [{**ENV, "severity": "warning"}],
    ),
    case(
        [
            series("dockyard_api_executes_total", {**API, **ENV, "outcome": "ok"}, "0+60x30"),
            series("dockyard_api_rate_limited_total", {**API, **ENV, "limit": "requestsPerMinute"}, "0+30x30"),
        ],
        "DockyardRateLimitSaturated",
        "25m",
        [{**ENV, "severity": "warning"}],
    ),
    case(
        [series("dockyard_api_store_up", API, "1 1 0 0 0 0 0")],
        "DockyardStoreDown",
        "6m",
        [{**API, "severity": "critical"}],
    ),
    case(
        [series("dockyard_api_store_up", API, "1 1 0 1 0 1 1")],  # a blip is no outage
        "DockyardStoreDown",
        "6m",
        [],
    ),
    case(
        # expires 10 days after t=0: the warning (14 days) fires after its hour, the critical one (3 days) not
        [series("dockyard_operator_webhook_certificate_expiry_timestamp_seconds", OP, f"{10 * 86400}x120")],
        "DockyardWebhookCertificateExpiresSoon",
        "90m",
        [{**OP, "severity": "warning"}],
    ),
    case(
        [
            series(
                "dockyard_operator_jobs_total",
                {**OP, "job_type": "MODELS", "action": "DEPLOY", "device_type": "none", "status": "FAILED"},
                "0 1 2 3 3 3",
            )
        ],
        "DockyardJobsFailing",
        "4m",
        [{"job_type": "MODELS", "action": "DEPLOY", "severity": "warning"}],
    ),
    case(
        [series("up", OP, "1 1 0 0 0 0 0 0 0"), series("up", {"job": "other", "instance": "x"}, "0x8")],
        "DockyardTargetDown",
        "8m",
        [{**OP, "severity": "critical"}],
    ),
]


def test_the_rule_file_passes_promtool_check() -> None:
    checked = promtool("check", "rules", str(RULE_FILE))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    count = sum(len(g["rules"]) for g in yaml.safe_load(RULE_FILE.read_text())["groups"])
    assert f"SUCCESS: {count} rules found" in checked.stdout + checked.stderr


def test_each_rule_fires_on_its_fault_and_not_otherwise(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(alertrules.render(annotations=False))
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump({"rule_files": ["rules.yaml"], "evaluation_interval": "15s", "tests": CASES})
    )
    tested = promtool("test", "rules", "tests.yaml", cwd=tmp_path)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    alerts = {r["alert"] for g in alertrules.groups()["groups"] for r in g["rules"]}
    covered = {t["alert_rule_test"][0]["alertname"] for t in CASES}
    assert {"DockyardReconcileErrors", "DockyardFacadeErrors", "DockyardGuardrailBlocksSpiking"} | covered == alerts


@pytest.fixture(scope="module")
def helm() -> Helm:
    return Helm(helm_binary())


def operator_env(objects: list[dict[str, Any]]) -> dict[str, str]:
    operator = one(objects, "Deployment", "dockyard-operator")
    return {e["name"]: e.get("value") for e in operator["spec"]["template"]["spec"]["containers"][0]["env"]}


@pytest.mark.parametrize("enabled", ["true", "auto"])
def test_the_prometheus_rule_is_the_rule_file(helm: Helm, enabled: str) -> None:
    extra = ["--api-versions", "monitoring.coreos.com/v1/PrometheusRule"] if enabled == "auto" else []
    values = ["metrics.prometheusRule.labels.release=kps", "metrics.alerting.prometheusUrl=http://prom.monitoring:9090"]
    if enabled == "true":
        values.append("metrics.prometheusRule.enabled=true")
    rendered = helm.objects(values=values, extra=extra)
    rule = one(rendered, "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    assert rule["spec"] == yaml.safe_load(RULE_FILE.read_text())
    env = operator_env(rendered)
    assert env["DOCKYARD_OPERATOR_ALERT_RULES"] == f"PrometheusRule dockyard-system/{rule['metadata']['name']}"
    assert env["DOCKYARD_OPERATOR_PROMETHEUS_URL"] == "http://prom.monitoring:9090"


def test_no_prometheus_rule_without_the_kind_unless_asked(helm: Helm) -> None:
    assert find(helm.objects(), "PrometheusRule") == []
    off = helm.objects(
        values=["metrics.prometheusRule.enabled=false", "metrics.alerting.rulesLoadedElsewhere=true"],
        extra=["--api-versions", "monitoring.coreos.com/v1/PrometheusRule"],
    )
    assert find(off, "PrometheusRule") == []
    assert operator_env(off)["DOCKYARD_OPERATOR_ALERT_RULES"] == "elsewhere"
