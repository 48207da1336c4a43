"""Guardrails as users see them (docs/guardrails.md, docs/web-client-and-widget.md), in Debian's Chromium
against the real operator and facade on the local control plane, with the scripted model server behind
the app: an app version carrying a deniedTerms block policy and an output redaction, deployed in an
environment with PII protection; the widget on another site shows a blocked message as blocked and a
redacted answer as such, and so does the web client page; the console's Guardrails tab shows the
version's policies, the PII settings and the interventions (never the values), and so do the management
API and the CLI with a viewer's real Kubernetes token; the checklist computes its three items from the
version and the environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client
from playwright.sync_api import Browser, expect

from tests.browser.conftest import Facade, Site, Tab, deploy_bot
from tests.support.dockyard import get_or_empty
from tests.support.scripted_model import Reply, ScriptedModel
from tests.support.users import Users
from tests.support.waiting import wait_for

DOCKYARD = str(Path(sys.executable).parent / "dockyard")
BLOCK_MESSAGE = "I can only talk about our own products."
GUARDRAILS = {
    "policies": [
        {"name": "no-competitors", "type": "deniedTerms", "terms": ["Acme"], "appliesTo": ["input"],
         "message": BLOCK_MESSAGE},
        {"name": "order-ids", "type": "pattern", "patterns": ["ORD-[0-9]{6}"], "appliesTo": ["output"],
         "action": "redact"},
    ]
}  # fmt: skip
SECRETS = ("cheaper", "jane@example.com", "ORD-123456")
"""What users typed or the model answered that the guardrails acted on: never shown back, never stored."""


def _management(facade: Facade, team: Users, who: str, method: str, path: str, **kw: Any) -> Any:
    answer = facade.http.request(method, f"/api/v1/namespaces/{path}", headers=team.headers(who), **kw)
    assert answer.status_code < 300, answer.text
    return answer.json()


def _checklist(api: client.ApiClient, namespace: str) -> dict[str, tuple[str, str]]:
    items = (get_or_empty(api, namespace, "environments", "bot-prod").get("status") or {}).get("checklist") or []
    return {i["item"]: (i["state"], i.get("detail", "")) for i in items}


def test_a_blocked_message_in_the_widget_and_its_intervention_on_the_console(
    api: client.ApiClient,
    namespace: str,
    facade: Facade,
    model: ScriptedModel,
    team: Users,
    browser: Browser,
    allowed_site: Site,
    open_tab: Callable[..., Tab],
) -> None:
    deploy_bot(api, namespace, model)  # App bot (agent helper on ModelDeployment tiny, served by the model)
    # as alice (an editor), through the management API: version 1.0.0 with the guardrails, environment prod
    # deploying it, whose widget this site may embed and which redacts e-mail addresses before storage
    version = _management(facade, team, "alice", "POST", f"{namespace}/apps/bot/versions",
                          json={"version": "1.0.0", "name": "Guarded", "guardrails": GUARDRAILS})  # fmt: skip
    assert [p["name"] for p in version["guardrails"]["policies"]] == ["no-competitors", "order-ids"]
    _management(facade, team, "alice", "POST", f"{namespace}/apps/bot/environments",
                json={"name": "prod", "appVersion": "1.0.0"})  # fmt: skip
    settings = {"widget": {"allowedOrigins": [allowed_site.origin], "tokensPerMinutePerAddress": 1000},
                "pii": {"entities": ["EMAIL_ADDRESS"]}, "access": {"webClient": "public"}}  # fmt: skip
    _management(facade, team, "alice", "PATCH", f"{namespace}/environments/bot-prod/settings", json=settings)
    status = wait_for(
        lambda: (
            (s := get_or_empty(api, namespace, "environments", "bot-prod").get("status") or {}).get("embedCode")
            and s.get("activeVersion") == "1.0.0"
            and s
        ),
        timeout=90,
        what="environment prod active with its embed code",
    )

    # the checklist computes its three items from the version and the environment
    checklist = wait_for(
        lambda: (c := _checklist(api, namespace)).get("PII protection configured", ("",))[0] == "Done" and c,
        timeout=30,
        what="the checklist to read spec.pii",
    )
    assert checklist["Guardrails enabled"] == (
        "Done", "2 policies; input: no-competitors (block); output: order-ids (redact)",
    )  # fmt: skip
    assert checklist["PII protection configured"][1].startswith("spec.pii recognises EMAIL_ADDRESS;")
    assert checklist["Sensitive data protected"][0] == "Done"

    # the widget on another site: a message the input policy blocks is shown as blocked, the model never asked
    allowed_site.pages["/"] = f"""<!doctype html><html lang="en"><head><title>Shop</title></head><body>
<h1>Shop</h1>{status["embedCode"]}</body></html>"""
    tab = open_tab()
    page = tab.page
    page.goto(allowed_site.url("/"))
    page.get_by_role("button", name="Chat", exact=True).click()
    page.get_by_label("Message", exact=True).fill("Is Acme cheaper than you?")
    page.keyboard.press("Enter")
    blocked = page.locator('div[data-role="assistant"][data-guardrail="block"]')
    expect(blocked).to_contain_text(BLOCK_MESSAGE)
    expect(blocked).to_contain_text("Blocked by the app's guardrails")
    assert blocked.evaluate("n => getComputedStyle(n).borderTopStyle") == "dashed"  # distinct from an answer
    assert model.requests == []
    tab.shot("widget-blocked")

    # an answer with a redaction (the e-mail before storage, the order id in the answer) is noted quietly
    model.script(Reply(text="Your order ORD-123456 ships today."))
    page.get_by_label("Message", exact=True).fill("I am jane@example.com: where is my order?")
    page.keyboard.press("Enter")
    redacted = page.locator('div[data-role="assistant"][data-guardrail="redact"]')
    expect(redacted).to_contain_text("Your order [redacted] ships today.")
    expect(redacted).to_contain_text("some details redacted")
    assert redacted.evaluate("n => getComputedStyle(n).borderTopStyle") != "dashed"
    assert page.locator('div[data-role="assistant"]').count() == 2
    # kept with the conversation: a reload shows both marks again
    page.reload()
    page.locator('div[data-guardrail="block"]').wait_for()
    expect(page.locator('div[data-guardrail="block"]')).to_contain_text("Blocked by the app's guardrails")
    expect(page.locator('div[data-guardrail="redact"]')).to_contain_text("some details redacted")
    assert not tab.errors, tab.errors

    # the console's Guardrails tab, as vic (a viewer): the version's policies, the PII settings and the
    # interventions newest first, without any of the values they acted on
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(20_000)
    console = context.new_page()
    console.goto(f"{facade.url}/console/")
    console.get_by_label("Kubernetes token").fill(team.tokens["vic"])
    console.get_by_label("Namespace").fill(namespace)
    console.get_by_role("button", name="Sign in").click()
    expect(console.get_by_role("heading", name="Apps", exact=True)).to_be_visible()
    console.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-prod")
    console.get_by_role("link", name="Guardrails").click()
    expect(console.get_by_role("heading", name="Guardrails of version 1.0.0")).to_be_visible()
    policies = console.locator("#env-guardrails tbody tr")
    expect(policies).to_have_count(2)
    expect(policies.nth(0)).to_contain_text("no-competitors")
    expect(policies.nth(0)).to_contain_text(f"answers “{BLOCK_MESSAGE}”")
    expect(policies.nth(1)).to_contain_text("order-ids")
    expect(console.locator("#pii")).to_contain_text("EMAIL_ADDRESS")
    rows = console.locator("#interventions tbody tr")
    expect(rows).to_have_count(3)
    shown = [[rows.nth(i).locator("td").nth(c).inner_text().strip() for c in (1, 2, 3, 4)] for i in range(3)]
    assert shown == [
        ["order-ids", "output", "redact", "pattern #1"],
        ["pii", "input", "redact", "EMAIL_ADDRESS x1"],
        ["no-competitors", "input", "block", "denied term #1"],
    ], shown
    text = console.locator("main").inner_text()
    assert not any(secret in text for secret in SECRETS), text
    if os.environ.get("DOCKYARD_CONSOLE_SCREENSHOTS"):
        console.screenshot(path=str(Path(os.environ["DOCKYARD_CONSOLE_SCREENSHOTS"]) / "console-guardrails.png"),
                           full_page=True)  # fmt: skip
    # the draft environment runs the App's draft, which has no guardrails, and it has no PII settings
    console.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-draft?tab=guardrails")
    expect(console.get_by_role("heading", name="Guardrails of the draft")).to_be_visible()
    expect(console.locator("main")).to_contain_text("No guardrails: nothing screens")
    expect(console.locator("#pii")).to_contain_text("Not configured: what users type is stored as typed")
    expect(console.locator("main")).to_contain_text("No interventions yet")
    context.close()

    # the management API and the CLI with vic's real token (get environments: the viewer role); mallory,
    # with no role, is refused by the SubjectAccessReview
    listed = _management(facade, team, "vic", "GET", f"{namespace}/environments/bot-prod/interventions")
    assert [(i["policy"], i["stage"], i["action"]) for i in listed["items"]] == [
        ("order-ids", "output", "redact"), ("pii", "input", "redact"), ("no-competitors", "input", "block"),
    ]  # fmt: skip
    assert all(i["version"] == "1.0.0" and i["messageId"] for i in listed["items"])
    assert not any(secret in json.dumps(listed) for secret in SECRETS)
    refused = facade.http.get(f"/api/v1/namespaces/{namespace}/environments/bot-prod/interventions",
                              headers=team.headers("mallory"))  # fmt: skip
    assert refused.status_code == 403, refused.text
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKYARD_", "KUBECONFIG"))}
    env.update({"DOCKYARD_URL": facade.url, "DOCKYARD_NAMESPACE": namespace, "DOCKYARD_TOKEN": team.tokens["vic"],
                "DOCKYARD_CONFIG": "/nonexistent", "COLUMNS": "160", "NO_COLOR": "1"})  # fmt: skip
    done = subprocess.run([DOCKYARD, "env", "interventions", "bot-prod", "--limit", "2", "--json"], env=env,
                          capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert [i["policy"] for i in json.loads(done.stdout)] == ["order-ids", "pii"]
    table = subprocess.run([DOCKYARD, "env", "interventions", "bot-prod"], env=env, capture_output=True, text=True,
                           timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert table.returncode == 0, table.stderr
    assert "denied term #1" in table.stdout

    # the web client page (the same script in page mode) shows a blocked answer as blocked too
    web = open_tab()
    web.page.goto(status["urls"]["webClientUrl"])
    web.page.get_by_label("Message", exact=True).fill("Do you sell Acme parts?")
    web.page.keyboard.press("Enter")
    expect(web.page.locator('div[data-guardrail="block"]')).to_contain_text(BLOCK_MESSAGE)
    expect(web.page.locator('div[data-guardrail="block"]')).to_contain_text("Blocked by the app's guardrails")
    assert model.requests[1:] == []  # only the one turn that got through asked the model
    assert not web.errors, web.errors
