"""An environment's PII protection (``spec.pii``; docs/guardrails.md, "PII protection") set through the
management API and kubectl against the real local control plane with the operator's admission webhooks
running: a custom pattern that does not compile is refused naming its field (the facade's validation; the
Environment webhook for kubectl, since CEL cannot compile a regular expression), a built-in entity's name
by the CRD's own rule, and nothing changes; a valid one lands with the CRD's defaults."""

from __future__ import annotations

import json

from kubernetes import client

from tests.e2e.test_environment_settings import answer, facade, operator  # noqa: F401 - fixtures
from tests.support.cluster import E2ECluster
from tests.support.dockyard import get_or_empty as get
from tests.support.runners import RunningFacade
from tests.support.users import Users, kubectl
from tests.support.waiting import wait_for

GOOD = {
    "entities": ["EMAIL_ADDRESS", "CREDIT_CARD", "US_SSN"],
    "customPatterns": [{"name": "ORDER_ID", "pattern": r"ORD-\d{6}"}],
    "redact": {"model": True},
}


def test_pii_settings_are_validated_where_they_are_written(
    api: client.ApiClient,
    namespace: str,
    team: Users,
    facade: RunningFacade,  # noqa: F811
    cluster: E2ECluster,
) -> None:
    http, alice = facade.client, team.headers("alice")
    mgmt = f"/api/v1/namespaces/{namespace}"
    answer(http.post(f"{mgmt}/apps", json={"name": "shop"}, headers=alice), 201)
    wait_for(lambda: get(api, namespace, "environments", "shop-draft"), timeout=30, what="the draft environment")
    settings = f"{mgmt}/environments/shop-draft/settings"

    # the management API: the settings member pii, merged and validated like the Environment
    view = answer(http.patch(settings, json={"pii": GOOD}, headers=alice))
    assert view["pii"]["customPatterns"] == GOOD["customPatterns"]
    stored = get(api, namespace, "environments", "shop-draft")["spec"]["pii"]
    assert stored["entities"] == GOOD["entities"]
    # the CRD's defaults of the members not sent
    assert stored["redact"] == {"storage": True, "model": True, "tools": False, "answer": False}

    bad = {"customPatterns": [*GOOD["customPatterns"], {"name": "TICKET", "pattern": "TCK-(\\d+"}]}
    refused = answer(http.patch(settings, json={"pii": bad}, headers=alice), 422)
    fields = [d["field"] for d in refused["error"]["details"]]
    assert fields == ["body.pii.customPatterns.1.pattern"], refused
    assert "not a valid regular expression" in refused["error"]["message"]
    assert get(api, namespace, "environments", "shop-draft")["spec"]["pii"] == stored

    # kubectl: the Environment webhook refuses the same pattern, naming the field; nothing changes
    patch = json.dumps({"spec": {"pii": bad}})
    out = kubectl(cluster, "-n", namespace, "patch", "environment", "shop-draft", "--type", "merge", "-p", patch,
                  check=False)  # fmt: skip
    assert "denied" in out, out
    assert "spec.pii.customPatterns[1].pattern: is not a valid regular expression: missing )" in out, out
    anything = json.dumps({"spec": {"pii": {"customPatterns": [{"name": "ALL", "pattern": "x*"}]}}})
    out = kubectl(cluster, "-n", namespace, "patch", "environment", "shop-draft", "--type", "merge", "-p", anything,
                  check=False)  # fmt: skip
    assert "spec.pii.customPatterns[0].pattern: matches the empty text" in out, out
    # a built-in entity's name: the CRD's own rule (the API server, before the webhook)
    builtin = json.dumps({"spec": {"pii": {"customPatterns": [{"name": "US_SSN", "pattern": "x"}]}}})
    out = kubectl(cluster, "-n", namespace, "patch", "environment", "shop-draft", "--type", "merge", "-p", builtin,
                  check=False)  # fmt: skip
    assert "spec.pii.customPatterns[0].name" in out, out
    assert "already a built-in entity's name" in out, out
    unknown = json.dumps({"spec": {"pii": {"entities": ["PASSPORT"]}}})
    out = kubectl(cluster, "-n", namespace, "patch", "environment", "shop-draft", "--type", "merge", "-p", unknown,
                  check=False)  # fmt: skip
    assert "spec.pii.entities[0]" in out, out
    assert get(api, namespace, "environments", "shop-draft")["spec"]["pii"] == stored

    # null removes it (not configured)
    view = answer(http.patch(settings, json={"pii": None}, headers=alice))
    assert view["pii"] is None
    assert "pii" not in get(api, namespace, "environments", "shop-draft")["spec"]
