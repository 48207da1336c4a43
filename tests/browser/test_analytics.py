"""The console's Analytics tab in Debian's Chromium, against the real operator and facade on the local control
plane with the scripted model server behind the app: turns made through the deployed-app API (one calling
the weather tool, one failing) show up per version with their users, tokens, latency percentiles, tool calls
and errors, with the chart's text alternative; a version filter narrows it; a viewer reads it."""

from __future__ import annotations

import os
from pathlib import Path

from kubernetes import client
from playwright.sync_api import Browser, expect

from tests.browser.conftest import Facade, api_key, deploy_bot
from tests.support.dockyard import get_or_empty
from tests.support.scripted_model import Call, Reply, ScriptedModel
from tests.support.users import Users
from tests.support.waiting import wait_for


def test_the_analytics_tab_shows_turns_users_tokens_latency_tools_and_errors(
    api: client.ApiClient, namespace: str, facade: Facade, model: ScriptedModel, team: Users, browser: Browser,
    tmp_path: Path,
) -> None:  # fmt: skip
    bot = deploy_bot(api, namespace, model)
    key = api_key(api, namespace, "bot-draft")
    execute = f"{bot.base}/v1/apps/bot/execute"
    headers = {"Authorization": f"Bearer {key}"}
    model.script(
        Reply(calls=[Call("weather", {"city": "Oslo"})], usage=(20, 4)),
        Reply(text="12 degrees in Oslo.", usage=(30, 6)),
        Reply(text="Hello Bob.", usage=(10, 3)),
        Reply(status=500, raw=b"engine crashed"),
    )
    for message, user in (("Weather in Oslo?", "ann"), ("Hi", "bob")):
        body = {"message": message, "metadata": {"user_id": user}}
        answer = wait_for(lambda b=body: (r := facade.http.post(execute, headers=headers, json=b)).status_code == 200
                          and r, timeout=30, what="an answered call")  # fmt: skip
        assert answer.json()["response"]
    failed = facade.http.post(execute, headers=headers, json={"message": "again", "metadata": {"user_id": "ann"}})
    assert failed.status_code >= 500

    # the page polls and reloads itself while the environment deploys: open it once it is Active
    wait_for(lambda: (get_or_empty(api, namespace, "environments", "bot-draft").get("status") or {}).get("phase")
             == "Active", timeout=60, what="the environment Active")  # fmt: skip
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(20_000)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    page.goto(f"{facade.url}/console/")
    page.get_by_label("Kubernetes token").fill(team.tokens["vic"])
    page.get_by_label("Namespace").fill(namespace)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Apps", exact=True)).to_be_visible()

    def shown() -> bool:  # the failed call is counted by a batch written within a second
        page.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-draft?tab=analytics")
        return page.locator('[data-version="draft"] [data-figure="errors"]').inner_text() == "1"

    wait_for(shown, timeout=30, what="the failed call counted")
    expect(page.get_by_role("link", name="Analytics")).to_have_attribute("aria-current", "page")
    draft = page.locator('section[data-version="draft"]')
    expect(draft.get_by_role("heading", name="Draft")).to_contain_text("active")
    expect(draft.locator('[data-figure="turns"]')).to_have_text("2")
    expect(draft.locator('[data-figure="users"]')).to_contain_text("2")
    expect(draft.locator('[data-figure="users"]')).to_contain_text("(2 sessions)")
    expect(draft.locator('[data-figure="tokens"]')).to_have_text("60 in, 13 out")  # 20+30+10 in, 4+6+3 out
    expect(draft.locator('[data-figure="tools"]')).to_have_text("weather (1)")
    expect(draft.locator('[data-figure="latency"]')).to_contain_text("p50")
    chart = draft.get_by_role("img", name="Turns (bars) and errors (red) per day of version draft")
    expect(chart).to_be_visible()
    assert "2 turns and 1 errors" in (chart.locator("desc").text_content() or "")
    draft.get_by_text("Per day", exact=True).click()
    expect(draft.locator("tbody tr")).to_have_count(1)
    if os.environ.get("DOCKYARD_CONSOLE_SCREENSHOTS"):
        page.screenshot(path=str(Path(os.environ["DOCKYARD_CONSOLE_SCREENSHOTS"]) / "console-analytics.png"))

    # a version with no turns: nothing shown, said so; a malformed one: the API's refusal naming the field
    page.get_by_role("textbox", name="Version").fill("9.9.9")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**version=9.9.9**")
    expect(page.locator("#analytics-empty")).to_contain_text("No turns in this period for version 9.9.9")
    page.get_by_role("textbox", name="Version").fill("latest")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**version=latest**")
    expect(page.get_by_role("alert")).to_contain_text("version must be a semantic version")
    assert not errors, errors
    context.close()
