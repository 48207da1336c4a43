"""Admission webhooks fail closed everywhere: the configurations the operator writes for local runs
have failurePolicy Fail, like the chart's default (docs/reliability.md explains the trade-off)."""

from __future__ import annotations

from pathlib import Path

import kopf
import yaml
from kopf._cogs.structs.references import Resource
from kopf._core.engines.admission import build_webhooks

import dockyard_operator.handlers  # noqa: F401  (registers the webhooks)

ROOT = Path(__file__).resolve().parents[3]


def test_the_operators_own_webhook_configurations_fail_closed() -> None:
    handlers = kopf.get_default_registry()._webhooks.get_all_handlers()
    assert {h.id for h in handlers} >= {"validate-tool", "validate-appversion", "validate-environment",
                                        "mutate-environment"}  # fmt: skip
    resources = [Resource("dockyard.dev", "v1alpha1", p) for p in ("tools", "appversions", "environments")]
    webhooks = build_webhooks(
        handlers, resources=resources, name_suffix="dockyard.dev", client_config={"url": "https://127.0.0.1:1"}
    )
    assert webhooks
    assert {w["name"]: w["failurePolicy"] for w in webhooks} == {w["name"]: "Fail" for w in webhooks}


def test_the_chart_default_is_the_same() -> None:
    values = yaml.safe_load((ROOT / "charts/dockyard/values.yaml").read_text())
    assert values["webhook"]["failurePolicy"] == "Fail"
