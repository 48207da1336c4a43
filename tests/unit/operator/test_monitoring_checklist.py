"""The checklist's Monitoring items from what is configured and flowing (dockyard_operator.observability):
each state with the detail that says why."""

from __future__ import annotations

from datetime import UTC, datetime

from dockyard_operator import environments as envs
from dockyard_operator.observability import (
    MonitoringFacts,
    Observed,
    PrometheusView,
    alerts_item,
    analytics_item,
    logging_item,
)

LIVE = datetime(2026, 11, 20, 9, tzinfo=UTC)


def usage(*versions: dict[str, object]) -> dict[str, object]:
    return {"day": "2026-11-26", "versions": list(versions)}


def test_analytics_needs_answered_calls_with_tokens_of_the_active_version_since_it_went_live() -> None:
    flowing = {
        "version": "1.2.0",
        "requests": 12,
        "errors": 2,
        "tokensIn": 900,
        "tokensOut": 300,
        "lastDay": "2026-11-26",
    }
    state, detail = analytics_item(usage(flowing), "1.2.0", LIVE)
    assert state == "Done"
    assert "10 answered call(s), 2 error(s) and 1200 tokens" in detail
    assert analytics_item(None, "1.2.0", LIVE)[0] == "NotDone"
    assert analytics_item(usage(flowing), None, None)[0] == "NotDone"
    other = analytics_item(usage({**flowing, "version": "1.1.0"}), "1.2.0", LIVE)
    assert other == ("NotDone", "no answered call of version 1.2.0 recorded in the last 30 days: call it")
    failing = analytics_item(usage({**flowing, "errors": 12}), "1.2.0", LIVE)
    assert failing[0] == "NotDone"  # only errors: nothing flows
    old = analytics_item(usage({**flowing, "lastDay": "2026-11-19"}), "1.2.0", LIVE)
    assert old[0] == "NotDone"
    assert "since it went live on 2026-11-20" in old[1]
    silent = analytics_item(usage({**flowing, "tokensIn": 0, "tokensOut": 0}), "1.2.0", LIVE)
    assert silent == ("NotDone", "10 answered call(s) of version 1.2.0, but no model tokens recorded")


def prom(**kw: object) -> PrometheusView:
    base: dict[str, object] = {
        "url": "http://prom:9090",
        "groups": ("dockyard.components", "dockyard.environments"),
        "rules": 13,
        "alertmanagers": ("http://am:9093/api/v2/alerts",),
    }
    return PrometheusView(**{**base, **kw})  # type: ignore[arg-type]


def test_alerts_done_when_prometheus_loaded_the_rules_and_has_an_alertmanager() -> None:
    firing = ({"alertname": "DockyardEnvironmentErrorRate", "environment_namespace": "team", "environment": "prod"},
              {"alertname": "DockyardStoreDown"})  # fmt: skip
    state, detail = alerts_item(MonitoringFacts(prometheus=prom(firing=firing)), "team", "prod")
    assert state == "Done"
    assert "evaluates 13 Dockyard alert rules (dockyard.components, dockyard.environments)" in detail
    assert "http://am:9093/api/v2/alerts" in detail
    assert detail.endswith("firing now for this environment: DockyardEnvironmentErrorRate")
    assert "firing" not in alerts_item(MonitoringFacts(prometheus=prom(firing=firing)), "team", "dev")[1]

    no_manager = alerts_item(MonitoringFacts(prometheus=prom(alertmanagers=())), "team", "prod")
    assert no_manager[0] == "NotDone"
    assert "no Alertmanager" in no_manager[1]
    not_loaded = alerts_item(MonitoringFacts(prometheus=prom(groups=(), rules=0)), "team", "prod")
    assert not_loaded[0] == "NotDone"
    assert "has not loaded Dockyard's alert rules" in not_loaded[1]
    down = alerts_item(MonitoringFacts(prometheus=prom(error="connection refused")), "team", "prod")
    assert down == (
        "NotDone",
        "Prometheus at http://prom:9090 does not answer (connection refused): alerts cannot fire",
    )


def test_alerts_without_a_prometheus_url_say_what_dockyard_cannot_see() -> None:
    nothing = alerts_item(MonitoringFacts(), "team", "prod")
    assert nothing[0] == "NotDone"
    assert "no alert rules installed" in nothing[1]
    rule = alerts_item(MonitoringFacts(alert_rules="PrometheusRule dockyard-system/dockyard-alerts"), "team", "prod")
    assert rule[0] == "Manual"
    assert "in PrometheusRule dockyard-system/dockyard-alerts" in rule[1]
    assert "metrics.alerting.prometheusUrl" in rule[1]
    assert alerts_item(MonitoringFacts(alert_rules="elsewhere"), "team", "prod")[0] == "Manual"


def test_logging_needs_json_from_both_and_a_shipping_destination() -> None:
    both = MonitoringFacts(operator_log_format="json", facade_log_format="json", log_shipping="Fluent Bit to Loki")
    assert logging_item(both) == (
        "Done",
        "the operator logs json, the facade logs json lines to standard output, shipped by Fluent Bit to Loki "
        "(as configured)",
    )
    unshipped = logging_item(MonitoringFacts(operator_log_format="json", facade_log_format="json"))
    assert unshipped[0] == "Manual"
    assert "cannot see the agent" in unshipped[1]
    plain = logging_item(MonitoringFacts(operator_log_format="json", facade_log_format="plain", log_shipping="x"))
    assert plain[0] == "NotDone"
    assert "the facade logs plain" in plain[1]
    assert "the facade logs unknown" in logging_item(MonitoringFacts(operator_log_format="json"))[1]


def test_the_checklist_carries_the_three_items() -> None:
    observed = Observed(
        MonitoringFacts(prometheus=prom(), operator_log_format="json", facade_log_format="json", log_shipping="Vector"),
        "team",
        "prod",
        "1.2.0",
        LIVE,
        usage({"version": "1.2.0", "requests": 3, "tokensIn": 30, "tokensOut": 9, "lastDay": "2026-11-26"}),
    )
    items = envs.checklist(content={"agents": [{"name": "a"}]}, tool_jobs={}, key_count=1, version_found=True,
                           observed=observed)  # fmt: skip
    monitoring = {i.item: i.state for i in items if i.category == "Monitoring"}
    assert monitoring == {"Analytics": "Done", "Alerts": "Done", "Logging": "Done"}
    bare = envs.checklist(content={}, tool_jobs={}, key_count=0, version_found=False)
    assert {i.item: i.state for i in bare if i.category == "Monitoring"} == {
        "Analytics": "NotDone",
        "Alerts": "NotDone",
        "Logging": "NotDone",
    }
