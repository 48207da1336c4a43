"""Promotion as app owners see it in the console (docs/promotion.md), in Debian's Chromium against the real
operator and facade on the local control plane, with the scripted model server behind the app.

The evaluation part (#27, EVAL): alice runs the draft's evaluation suite from the environment's
Evaluations page, sees the run fail with the failed case and why, fixes the agent's instructions, runs
again and sees every case pass with the case marked fixed against the previous run; the checklist's Testing
item follows. (The canary and rollback part of the flow extends this file.)"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from kubernetes import client
from playwright.sync_api import Browser, Page, expect

from tests.browser.conftest import Facade, deploy_bot
from tests.support.dockyard import get_or_empty, patch
from tests.support.scripted_model import Reply, ScriptedModel
from tests.support.users import Users
from tests.support.waiting import wait_for

GOOD = "You are helpful. Our refund policy: refunds within 30 days."
BAD = "You are helpful."
SUITE: dict[str, Any] = {
    "cases": [
        {
            "name": "refund-policy",
            "category": "keyFlow",
            "message": "Can I get a refund?",
            "expect": {"contains": ["30 days"]},
        },
        {"name": "greeting", "category": "edgeCase", "message": "Hello", "expect": {"notContains": ["error"]}},
    ]
}


def answer_from_instructions(body: dict[str, Any]) -> Reply:
    """The agent's model: it knows the refund policy only when its instructions say it."""
    system = next((m["content"] for m in body["messages"] if m["role"] == "system"), "")
    return Reply(text="Refunds within 30 days." if "refund policy" in system else "Please contact support.")


def sign_in(browser: Browser, facade: Facade, team: Users, who: str, namespace: str) -> Page:
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(20_000)
    console = context.new_page()
    console.goto(f"{facade.url}/console/")
    console.get_by_label("Kubernetes token").fill(team.tokens[who])
    console.get_by_label("Namespace").fill(namespace)
    console.get_by_role("button", name="Sign in").click()
    expect(console.get_by_role("heading", name="Apps", exact=True)).to_be_visible()
    return console


def agents(instructions: str) -> list[dict[str, Any]]:
    return [{"name": "helper", "version": "1.0.0", "instructions": instructions, "model": "tiny", "tools": ["weather"]}]


def run_from_the_console(console: Page) -> None:
    console.get_by_role("button", name="Run evaluation").click()
    expect(console.get_by_role("heading", name="Evaluation run")).to_be_visible()
    # the run's page reloads itself while the run runs
    expect(console.locator("#run-state")).not_to_have_text("running", timeout=60_000)


def test_run_an_evaluation_see_it_fail_fix_the_version_and_see_it_pass(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel, team: Users, browser: Browser
) -> None:
    model.respond_with(answer_from_instructions)
    deploy_bot(api, namespace, model)
    patch(api, namespace, "apps", "bot", {"spec": {"agents": agents(BAD), "evaluations": SUITE}})
    console = sign_in(browser, facade, team, "alice", namespace)
    console.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-draft")
    console.get_by_role("link", name="Evaluations", exact=True).click()
    expect(console.get_by_role("heading", name="Evaluations of draft")).to_be_visible()
    expect(console.locator("main")).to_contain_text("No evaluation run here yet")

    run_from_the_console(console)
    expect(console.locator("#run-state")).to_have_text("failed")
    expect(console.locator("#run-passed")).to_have_text("1/2 cases passed")
    failed = console.locator('#cases tr[data-case="refund-policy"]')
    expect(failed).to_contain_text("failed")
    expect(failed).to_contain_text("the answer does not contain '30 days'")
    expect(failed).to_contain_text("Please contact support.")
    first = console.url.rsplit("/", 1)[-1]

    def key_flows() -> str:
        items = (get_or_empty(api, namespace, "environments", "bot-draft").get("status") or {}).get("checklist") or []
        return next((i["state"] for i in items if i["item"] == "Key flows tested"), "")

    wait_for(lambda: key_flows() == "NotDone", timeout=30, what="Key flows tested NotDone")

    # the owner fixes the draft's instructions, and runs the suite again from the Evaluations page
    patch(api, namespace, "apps", "bot", {"spec": {"agents": agents(GOOD)}})
    console.get_by_role("link", name="evaluations", exact=True).click()
    expect(console.locator("#runs tbody tr")).to_have_count(1)
    run_from_the_console(console)
    expect(console.locator("#run-state")).to_have_text("passed")
    expect(console.locator("#run-passed")).to_have_text("2/2 cases passed")
    expect(console.locator("#diff-base")).to_contain_text(first)
    fixed = console.locator('#cases tr[data-case="refund-policy"]')
    expect(fixed.locator(".change")).to_have_text("fixed")
    expect(console.locator('#cases tr[data-case="greeting"] .change')).to_have_text("still passing")
    wait_for(lambda: key_flows() == "Done", timeout=30, what="Key flows tested Done")
    if os.environ.get("DOCKYARD_CONSOLE_SCREENSHOTS"):
        console.screenshot(path=str(Path(os.environ["DOCKYARD_CONSOLE_SCREENSHOTS"]) / "console-evaluation.png"),
                           full_page=True)  # fmt: skip
    console.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-draft/evaluations")
    expect(console.locator("#runs tbody tr")).to_have_count(2)
    expect(console.locator("#runs tbody tr").first).to_contain_text("passed")
    console.context.close()
