"""The console in Debian's Chromium, against the real facade and operator: SPEC's whole lifecycle as a
user (sign in, create a version, create an environment with it, deploy, generate a key, run the copied
cURL script, deploy a second version, roll back, delete the environment), then a viewer refused."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

from kubernetes import client
from playwright.sync_api import Browser, BrowserContext, Page, expect

from dockyard_core import apikeys
from dockyard_localcluster.consoleuser import ConsoleUser
from tests.browser.conftest import Facade, deploy_bot, serve_model
from tests.support.dockyard import create, get
from tests.support.dockyard import get_or_empty as get_or_none
from tests.support.scripted_model import Reply, ScriptedModel
from tests.support.users import USERS_NS, Users
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
DESKTOP = {"width": 1280, "height": 800}
PHONE = {"width": 390, "height": 844}
DEPLOY_TIMEOUT = 90_000
SAVE_TIMEOUT = 20_000
"""The answer to a settings form's submission: an access review, the Environment's patch and an Event, each a
round trip to the API server (more than the default 5 s on a loaded 2-core CI machine: 2026-11-27)."""
SHOTS = os.environ.get("DOCKYARD_CONSOLE_SCREENSHOTS")
"""Set to a folder (e.g. docs/images) to write the console's screenshots there."""


def _context(browser: Browser, facade: Facade, **options: object) -> BrowserContext:
    context = browser.new_context(viewport=DESKTOP, **options)  # type: ignore[arg-type]
    context.set_default_timeout(20_000)
    context.grant_permissions(["clipboard-read", "clipboard-write"], origin=facade.url)
    return context


def _sign_in(page: Page, facade: Facade, token: str, namespace: str) -> None:
    page.goto(f"{facade.url}/console/")
    expect(page.get_by_role("heading", name="Sign in to the Dockyard console")).to_be_visible()
    page.get_by_label("Kubernetes token").fill(token)
    page.get_by_label("Namespace").fill(namespace)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Apps", exact=True)).to_be_visible()


def _shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"console-{name}.png"), full_page=True)


def _create_version(page: Page, version: str, name: str) -> None:
    page.get_by_role("link", name="Create version").click()
    page.get_by_label("Version number").fill(version)
    page.get_by_label("Name", exact=True).fill(name)
    page.get_by_label("Description").fill(f"{name}: triage agent with the weather tool")
    page.get_by_role("button", name="Validate and create version").click()
    expect(page.get_by_role("heading", name=f"Version {version}: {name}")).to_be_visible()
    expect(page.get_by_role("status")).to_contain_text(f"Version {version} ({name}) created and validated")


def _wait_active(page: Page, version: str) -> None:
    """The page polls the environment while it deploys and reloads when done: wait for what it shows."""
    expect(page.locator("#active-version")).to_have_text(version, timeout=DEPLOY_TIMEOUT)
    expect(page.locator("#health")).to_have_text("Active", timeout=DEPLOY_TIMEOUT)


def _history(page: Page) -> list[list[str]]:
    rows = page.locator("#history tbody tr")
    return [[rows.nth(i).locator("td").nth(c).inner_text().strip() for c in (0, 2, 3, 4)] for i in range(rows.count())]


def test_console_lifecycle_and_viewer(
    browser: Browser,
    facade: Facade,
    api: client.ApiClient,
    namespace: str,
    team: Users,
    model: ScriptedModel,
) -> None:
    deploy_bot(api, namespace, model)  # App "bot" (agent helper, tool weather, model tiny) and its draft
    clock = {"name": "clock", "version": "1.0.0", "endpoint": model.tool("clock", lambda args: {"now": "noon"})}
    create(api, namespace, "tools", "Tool", "clock-1.0.0", clock)
    alice = team.name("alice")
    context = _context(browser, facade)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))

    # sign in: labels and focus order; a wrong token is refused next to the token field; then alice's token
    page.goto(f"{facade.url}/console/")
    page.get_by_label("Kubernetes token").focus()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.id") == "namespace"
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.textContent") == "Sign in"
    page.get_by_label("Kubernetes token").fill("not-a-token")
    page.get_by_label("Namespace").fill(namespace)
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#token-error")).to_contain_text("This token was not accepted")
    _shot(page, "signin")
    _sign_in(page, facade, team.tokens["alice"], namespace)
    expect(page.locator("#whoami")).to_have_text(alice)
    cookie = next(c for c in context.cookies() if c["name"] == "dockyard_console")
    assert cookie["httpOnly"]
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/console"
    assert team.tokens["alice"] not in cookie["value"]  # sealed, never the token itself
    assert page.evaluate("document.cookie") == ""  # nothing of the session is readable by scripts
    _shot(page, "apps")

    # the app: the draft environment first, no versions yet
    page.get_by_role("link", name="Bot").click()
    expect(page.locator("tr[data-environment=draft]")).to_contain_text("Active")
    expect(page.locator("tr[data-environment=draft]")).to_contain_text("SUCCESS")  # its tool's dock status
    expect(page.get_by_text("No versions yet.")).to_be_visible()

    # edit the draft: YAML that does not parse, then a field the schema refuses, each next to the field
    page.get_by_role("link", name="Edit draft").click()
    expect(page.get_by_label("Agents, tool versions, MCP servers and guardrails (YAML)")).to_contain_text(
        "name: helper"
    )
    content = page.get_by_label("Agents, tool versions, MCP servers and guardrails (YAML)").input_value()
    page.get_by_label("Agents, tool versions, MCP servers and guardrails (YAML)").fill("agents: [unclosed")
    page.get_by_role("button", name="Save draft").click()
    expect(page.locator("#content-error")).to_contain_text("This is not valid YAML")
    page.get_by_label("Agents, tool versions, MCP servers and guardrails (YAML)").fill(
        content.replace("name: helper", "name: Helper!")
    )
    page.get_by_role("button", name="Save draft").click()
    expect(page.locator("#content-error")).to_contain_text("agents.0.name")
    page.get_by_label("Agents, tool versions, MCP servers and guardrails (YAML)").fill(content)
    page.get_by_label("Description").fill("Answers weather questions")
    page.get_by_role("button", name="Save draft").click()
    expect(page.get_by_role("status").first).to_contain_text("Draft saved.")
    expect(page.get_by_text("Answers weather questions")).to_be_visible()

    # create version 1.0.0: a field error first (no name), in words next to the field
    page.get_by_role("link", name="Create version").click()
    expect(page.get_by_label("Version number")).to_have_value("1.0.0")
    expect(page.get_by_label("helper 1.0.0")).to_be_checked()
    expect(page.get_by_label("weather 1.0.0")).to_be_checked()
    _shot(page, "create-version")
    page.get_by_role("button", name="Validate and create version").click()
    expect(page.locator("#name-error")).to_be_visible()
    expect(page.get_by_label("Name", exact=True)).to_have_attribute("aria-invalid", "true")
    # the validation of the admission webhook, each problem next to its field: no agent chosen, and a tool
    # deleted while the form was open
    page.get_by_label("Name", exact=True).fill("First release")
    page.get_by_label("helper 1.0.0").uncheck()
    page.get_by_label("clock 1.0.0").check()
    client.CustomObjectsApi(api).delete_namespaced_custom_object(
        "dockyard.dev", "v1alpha1", namespace, "tools", "clock-1.0.0"
    )
    page.get_by_role("button", name="Validate and create version").click()
    expect(page.locator("#agents-error")).to_have_text("a version needs at least one agent")
    expect(page.locator("#toolVersions-error")).to_have_text(
        "tool clock version 1.0.0 does not exist (no Tool clock-1.0.0)"
    )
    page.get_by_label("helper 1.0.0").check()
    expect(page.get_by_label("Name", exact=True)).to_have_value("First release")  # what was typed stays
    _shot(page, "version-errors")
    expect(page.get_by_label("clock 1.0.0")).to_have_count(0)  # the picker lists what exists
    page.get_by_role("button", name="Validate and create version").click()
    expect(page.get_by_role("heading", name="Version 1.0.0: First release")).to_be_visible()
    expect(page.get_by_text("helper", exact=True)).to_be_visible()  # the preview lists the agent

    # create environment staging with 1.0.0 (previewed), which deploys it
    page.get_by_role("link", name="bot", exact=True).click()
    page.get_by_role("link", name="Create environment").click()
    page.get_by_label("Name", exact=True).fill("staging")
    page.get_by_label("Description").fill("Before production")
    page.get_by_label("App version").select_option("1.0.0")
    expect(page.get_by_label("Preview of version 1.0.0")).to_contain_text("helper 1.0.0")
    page.get_by_role("button", name="Create and deploy").click()
    expect(page.get_by_role("heading", name="Environment staging")).to_be_visible()
    expect(page.locator("#linked-version")).to_have_text("1.0.0")
    # progress while it deploys: the page polls the status and reloads when the deployment is done
    expect(page.locator("[data-poll]")).to_contain_text("Deploying version 1.0.0")
    _wait_active(page, "1.0.0")
    expect(page.locator("[data-poll]")).to_have_count(0)
    _shot(page, "environment")
    page.get_by_role("link", name="History").click()
    assert _history(page) == [["1.0.0", alice, "Active", "Deploy"]]

    # an API key: shown once with a warning, gone on reload, listed by name
    page.get_by_role("link", name="API Keys").click()
    expect(page.get_by_text("No API keys yet.")).to_be_visible()
    page.get_by_label("Key name").fill("ci pipeline")
    page.get_by_role("button", name="Generate key").click()
    expect(page.get_by_text("it is shown this once")).to_be_visible()
    key = page.get_by_label("The new API key").input_value()
    assert apikeys.key_id_of(key), key  # a well-formed key of this environment
    page.get_by_role("button", name="Copy key").click()
    expect(page.locator("#new-key-copied")).to_have_text("Copied.")
    assert page.evaluate("navigator.clipboard.readText()") == key
    _shot(page, "api-keys")
    page.reload()
    expect(page.get_by_label("The new API key")).to_have_count(0)
    assert key not in page.content()
    expect(page.locator("#keys")).to_contain_text("ci pipeline")
    expect(page.locator("#keys")).to_contain_text("never")

    # the cURL script: copied and run as it is, with the key in DOCKYARD_API_KEY; the app answers
    model.script(Reply(text="Hello from staging.", usage=(7, 4)))
    page.get_by_role("link", name="Access").click()
    page.get_by_role("button", name="Copy cURL script").click()
    expect(page.locator("#curl-script-copied")).to_have_text("Copied.")
    script = page.evaluate("navigator.clipboard.readText()")
    assert "/v1/apps/bot/execute" in script
    assert "$DOCKYARD_API_KEY" in script
    _shot(page, "access")
    done = subprocess.run(
        ["bash", "-c", script + " -w '\\n%{http_code}'"],
        env={**os.environ, "DOCKYARD_API_KEY": key},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    body, _, code = done.stdout.rpartition("\n")
    assert code == "200", done.stdout
    answer = json.loads(body)
    assert answer["response"] == "Hello from staging."
    assert answer["agent"] == "helper"
    # revoke the key: listed no more, and the same call is now refused
    page.get_by_role("link", name="API Keys").click()
    page.get_by_role("button", name="Revoke key ci pipeline").click()
    expect(page.get_by_role("status").first).to_contain_text("API key revoked")
    expect(page.get_by_text("No API keys yet.")).to_be_visible()
    again = subprocess.run(
        ["bash", "-c", script + " -w '\\n%{http_code}'"],
        env={**os.environ, "DOCKYARD_API_KEY": key},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert again.stdout.rpartition("\n")[2] == "401", again.stdout
    page.get_by_role("link", name="Embed Code").click()
    expect(page.locator("#embed-code")).to_contain_text('data-app-id="bot"')
    expect(page.locator("#embed-code")).to_contain_text("/v1/loader.js")
    page.get_by_role("link", name="Checklist").click()
    for category in ("Configuration", "Testing", "Security", "Monitoring"):
        expect(page.get_by_role("heading", name=category)).to_be_visible()
    expect(page.get_by_text("(computed)").first).to_be_visible()
    _shot(page, "checklist")
    page.get_by_role("link", name="Usage").click()
    expect(page.get_by_role("img", name="Requests (bars) and tokens (line) per day")).to_be_visible()
    expect(page.locator("#usage-summary")).to_contain_text("Requests: 1 · Errors: 0")
    expect(page.locator("#usage-summary")).to_contain_text("Input tokens: 7 · Output tokens: 4")
    _shot(page, "usage")

    # models and tools: the Model (phase, format; an adapter's base), the ModelDeployment and the ToolDeployments
    # with dock status
    lora = {"source": {"hub": {"id": "dockyard-dev/tiny-lora"}}, "isAdapter": True}
    create(api, namespace, "models", "Model", "tiny-lora", lora)
    page.get_by_role("link", name="Models and tools").click()
    models = page.get_by_role("table", name="Models")
    expect(models).to_contain_text("tiny")
    expect(models).to_contain_text("ReadyToDeploy")
    expect(models.locator("tr", has_text="tiny-lora")).to_contain_text("base not chosen yet")
    page.get_by_label("Base model for adapter tiny-lora").select_option("tiny")  # the adapter's base, chosen here
    page.get_by_role("button", name="Serve on this base").click()
    expect(page.locator(".flash")).to_contain_text("Adapter tiny-lora is served on tiny")
    expect(models.locator("tr", has_text="tiny-lora")).to_contain_text("adapter on tiny")
    assert get(api, namespace, "models", "tiny-lora")["spec"]["baseModel"] == "tiny"
    deployments = page.get_by_role("table", name="Model deployments")
    expect(deployments.locator("tr", has_text="tiny")).to_contain_text("SUCCESS")
    tools = page.get_by_role("table", name="Tool deployments")
    expect(tools.locator("tr", has_text="bot-staging")).to_contain_text("SUCCESS")
    _shot(page, "models")

    # a second version, deployed from the environment's Overview
    page.get_by_role("link", name="Apps", exact=True).click()
    page.get_by_role("link", name="Bot").click()
    _create_version(page, "1.1.0", "Second release")
    page.get_by_role("link", name="bot", exact=True).click()
    page.get_by_role("link", name="staging").click()
    page.get_by_label("Version", exact=True).select_option("1.1.0")
    page.get_by_role("button", name="Deploy", exact=True).click()
    expect(page.get_by_role("status").first).to_contain_text("deploying version 1.1.0 to bot-staging")
    _wait_active(page, "1.1.0")
    page.get_by_role("link", name="History").click()
    assert _history(page) == [["1.1.0", alice, "Active", "Deploy"], ["1.0.0", alice, "Previous", "Deploy"]]
    _shot(page, "history")
    page.get_by_role("link", name="bot", exact=True).click()
    expect(page.locator("tr[data-version='1.1.0']")).to_contain_text("bot-staging")  # deployed in
    _shot(page, "app")

    # a version an environment deploys cannot be deleted: the dependency check's refusal in words
    page.goto(f"{facade.url}/console/ns/{namespace}/apps/bot/versions/1.1.0")
    page.get_by_role("button", name="Delete version 1.1.0").click()
    expect(page.get_by_role("alert")).to_contain_text("1.1.0")
    expect(page.get_by_role("heading", name="Version 1.1.0: Second release")).to_be_visible()

    # restore the draft from 1.0.0: refused until confirmed, then done
    page.goto(f"{facade.url}/console/ns/{namespace}/apps/bot/versions/1.0.0")
    expect(page.get_by_text("It cannot be undone.")).to_be_visible()
    page.get_by_role("button", name="Restore draft").click()
    expect(page.locator("#confirm-error")).to_contain_text("cannot be undone")
    page.get_by_label("I understand the draft is overwritten").check()
    page.get_by_role("button", name="Restore draft").click()
    expect(page.get_by_role("status").first).to_contain_text("The draft now holds version 1.0.0")
    expect(page.get_by_text("draft restored from version 1.0.0")).to_be_visible()

    # roll back to 1.0.0 from the history, confirmed
    page.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-staging?tab=history")
    page.get_by_text("Roll back to 1.0.0").click()
    page.get_by_label("I confirm the rollback to 1.0.0").check()
    page.get_by_role("button", name="Confirm rollback").click()
    expect(page.get_by_role("status").first).to_contain_text("rolling back bot-staging from 1.1.0 to version 1.0.0")
    page.get_by_role("link", name="Overview").click()
    _wait_active(page, "1.0.0")
    page.get_by_role("link", name="History").click()
    assert _history(page)[0] == ["1.0.0", alice, "Active", "Rollback"]

    # delete the environment: the button waits for the typed name; the app's list no longer shows it
    page.get_by_role("link", name="Overview").click()
    expect(page.get_by_text("Audit logs and usage statistics are kept.")).to_be_visible()
    delete = page.get_by_role("button", name="Delete environment")
    expect(delete).to_be_disabled()
    page.get_by_label("Type the environment's name").fill("stagin")
    expect(delete).to_be_disabled()
    page.get_by_label("Type the environment's name").fill("staging")
    delete.click()
    expect(page.get_by_role("status").first).to_contain_text("Environment staging deleted")
    staging = page.locator("tr[data-environment=staging]")
    if staging.count():  # its finalizer releases the workloads first: the list says so meanwhile
        expect(staging).to_contain_text("Deleting")
    try:
        wait_for(
            lambda: page.reload() and not staging.count(), timeout=90, interval=1, what="staging to leave the list"
        )
    except AssertionError as exc:  # say what holds it (finalizers, status) when the operator is slow
        held = get_or_none(api, namespace, "environments", "bot-staging")
        raise AssertionError(
            f"{exc}; the Environment now: {held.get('metadata')} {held.get('status', {}).get('conditions')}"
        ) from exc
    expect(page.locator("tr[data-environment=draft]")).to_be_visible()

    # the phone-sized viewport: the app page fits its width
    page.set_viewport_size(PHONE)
    page.reload()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], width
    _shot(page, "phone")
    for tab in ("overview", "history", "access", "embed", "checklist"):  # the environment's pages fit too
        page.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-draft?tab={tab}")
        width = page.evaluate("document.documentElement.scrollWidth")
        assert width <= PHONE["width"], (tab, width)
    page.set_viewport_size(DESKTOP)
    assert errors == []

    # the Theme button: dark, kept across a reload
    page.get_by_role("button", name="Theme").click()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    page.reload()
    assert page.evaluate("document.documentElement.dataset.theme") == "dark"
    assert page.evaluate("getComputedStyle(document.body).backgroundColor") == "rgb(21, 24, 29)"

    # sign out: the session cookie is gone and pages ask to sign in again
    page.get_by_role("button", name="Sign out").click()
    expect(page.get_by_role("heading", name="Sign in to the Dockyard console")).to_be_visible()
    assert not [c for c in context.cookies() if c["name"] == "dockyard_console"]
    page.goto(f"{facade.url}/console/ns/{namespace}/apps/bot")
    expect(page.get_by_role("heading", name="Sign in to the Dockyard console")).to_be_visible()
    context.close()

    # vic, a viewer: reads everything, every action refused in words
    viewer = _context(browser, facade, color_scheme="dark")
    page = viewer.new_page()
    # a sign-in link as make run prints it: the token rides in the fragment, the page fills the form with it
    link = ConsoleUser(team.name("vic"), namespace, team.tokens["vic"]).signin_link(facade.url)
    page.goto(link)
    expect(page.get_by_label("Kubernetes token")).to_have_value(team.tokens["vic"])
    expect(page.get_by_label("Namespace")).to_have_value(namespace)
    assert "#" not in page.url  # the token left the address bar
    page.get_by_role("button", name="Sign in").click()
    expect(page.locator("#whoami")).to_have_text(team.name("vic"))
    page.get_by_role("link", name="Models and tools").click()
    expect(page.get_by_role("table", name="Model deployments")).to_contain_text("tiny")  # viewers read
    page.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-draft")
    expect(page.get_by_role("heading", name="Environment draft")).to_be_visible()
    page.get_by_role("button", name="Deploy", exact=True).click()
    expect(page.get_by_role("alert")).to_contain_text(f'user "{team.name("vic")}" cannot create environments/deploy')
    _shot(page, "viewer-refused-dark")
    page.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-draft?tab=keys")
    expect(page.get_by_role("alert")).to_contain_text("cannot list environments/apikeys")
    page.get_by_label("Key name").fill("sneaky")
    page.get_by_role("button", name="Generate key").click()
    expect(page.get_by_role("alert").first).to_contain_text("cannot create environments/apikeys")
    page.goto(f"{facade.url}/console/ns/{namespace}/apps/bot/draft")
    page.get_by_role("button", name="Save draft").click()
    expect(page.get_by_role("alert").first).to_contain_text('cannot patch resource "apps"')
    page.goto(f"{facade.url}/console/ns/{namespace}/apps/bot/versions/new")
    page.get_by_label("Name", exact=True).fill("Viewer release")
    page.get_by_role("button", name="Validate and create version").click()
    expect(page.get_by_role("alert").first).to_contain_text("forbidden")
    assert re.search(r"cannot create resource \"appversions\"", page.content())
    viewer.close()

    # mallory, no Dockyard role here: signed in (the token is valid), but the namespace's pages refuse her
    stranger = _context(browser, facade)
    page = stranger.new_page()
    page.goto(f"{facade.url}/console/")
    page.get_by_label("Kubernetes token").fill(team.tokens["mallory"])
    page.get_by_label("Namespace").fill(namespace)
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("heading", name="Not allowed")).to_be_visible()
    expect(page.get_by_role("alert")).to_contain_text("forbidden")
    expect(
        page.get_by_text("Ask a cluster administrator for the dockyard-viewer or dockyard-editor role")
    ).to_be_visible()
    stranger.close()

    # a forged form (no CSRF token) is refused even with alice's session cookie
    forged = _context(browser, facade)
    page = forged.new_page()
    _sign_in(page, facade, team.tokens["alice"], namespace)
    answer = page.request.post(
        f"{facade.url}/console/ns/{namespace}/environments/bot-draft/apikeys", form={"name": "forged"}
    )
    assert answer.status == 403
    assert "CSRF" in answer.text()
    forged.close()


def test_a_deployment_that_ends_while_a_form_is_edited_leaves_the_page_as_it_is(
    browser: Browser, facade: Facade, api: client.ApiClient, namespace: str, team: Users, model: ScriptedModel
) -> None:
    """The environment page shows itself again when its deployment ends, unless a field on it was changed: what
    was typed stays (a reload would drop it, and on the answer to a form that was sent, send that form again) and
    the progress line says to reload."""
    deploy_bot(api, namespace, model, serve=False)  # deploying until the model's pods are let turn Ready
    context = _context(browser, facade)
    page = context.new_page()
    _sign_in(page, facade, team.tokens["alice"], namespace)
    page.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-draft?tab=settings")
    expect(page.locator("[data-poll]")).to_contain_text("Deploying version")
    page.get_by_label("Variables (KEY=VALUE, one per line)").fill("company=Acme Inc.")
    serve_model(api, namespace, model.url, release=True)
    expect(page.locator("[data-poll]")).to_contain_text("Reload the page to see it", timeout=DEPLOY_TIMEOUT)
    expect(page.get_by_label("Variables (KEY=VALUE, one per line)")).to_have_value("company=Acme Inc.")
    # untouched, the page shows itself again at its own address when the deployment has ended
    page.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-draft?tab=settings")
    expect(page.locator("[data-poll]")).to_have_count(0)
    context.close()


def test_console_settings_and_allow_a_site(
    browser: Browser, facade: Facade, api: client.ApiClient, namespace: str, team: Users, model: ScriptedModel
) -> None:
    """The Settings tab and the Embed Code tab's one-step "Allow a site" change the Environment itself
    (through the settings service: an Event SettingsChanged names alice); bad values are refused next
    to their fields, and a viewer's change is refused in words."""
    deploy_bot(api, namespace, model)
    context = _context(browser, facade)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    _sign_in(page, facade, team.tokens["alice"], namespace)
    env_url = f"{facade.url}/console/ns/{namespace}/environments/bot-draft"

    # Access shows who may use the web client; Settings changes it, with a limit and a variable
    page.goto(f"{env_url}?tab=access")
    expect(page.locator("#web-client-access")).to_contain_text("public")  # the default
    page.get_by_role("navigation", name="Environment sections").get_by_role("link", name="Settings").click()
    expect(page.get_by_label("Web client access")).to_have_value("public")
    expect(page.get_by_label("Token lifetime (seconds, 60 to 86400)")).to_have_value("900")
    # OpenID Connect without its provider: refused next to the issuer's field
    page.get_by_label("Web client access").select_option("oidc")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#oidcIssuer-error")).to_contain_text("webClient oidc needs access.oidc", timeout=SAVE_TIMEOUT)
    expect(page.get_by_label("OpenID provider (issuer URL)")).to_have_attribute("aria-invalid", "true")
    assert "access" not in get_or_none(api, namespace, "environments", "bot-draft")["spec"]
    page.get_by_label("OpenID provider (issuer URL)").fill("https://id.example.com")
    page.get_by_label("Client id").fill("dockyard-web")
    page.get_by_label("Client secret: Secret name").fill("web-oidc")
    page.get_by_label("Model tokens per day (whole environment)").fill("50000")
    page.get_by_label("Variables (KEY=VALUE, one per line)").fill("company=Acme Inc.\ncity=Paris")
    # the facade would send that Secret's clientSecret to the issuer: alice may not name a Secret she may not read
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_text("may not get Secret", exact=False).first).to_be_visible(timeout=SAVE_TIMEOUT)
    assert "access" not in get_or_none(api, namespace, "environments", "bot-draft")["spec"]
    rbac = client.RbacAuthorizationV1Api(api)
    rule = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["web-oidc"]}
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "read-web-oidc"}, "rules": [rule]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "alice-reads-web-oidc"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-web-oidc"},
        "subjects": [{"kind": "ServiceAccount", "name": "alice", "namespace": USERS_NS}],
    })  # fmt: skip
    expect(page.get_by_label("Client secret: Secret name")).to_have_value("web-oidc")  # what was typed is kept
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("status").first).to_contain_text("Settings saved: access.webClient", timeout=SAVE_TIMEOUT)
    expect(page.get_by_label("Web client access")).to_have_value("oidc")
    expect(page.get_by_label("Client id")).to_have_value("dockyard-web")
    spec = get_or_none(api, namespace, "environments", "bot-draft")["spec"]
    assert spec["access"]["webClient"] == "oidc"
    assert spec["access"]["oidc"] == {
        "issuer": "https://id.example.com", "clientId": "dockyard-web", "clientSecretRef": "web-oidc"
    }  # fmt: skip
    assert spec["rateLimits"] == {"tokensPerDay": 50000}
    assert spec["configuration"] == {"company": "Acme Inc.", "city": "Paris"}
    _shot(page, "settings")

    # bad values: each refused next to its field, what was typed kept, the Environment unchanged
    page.get_by_label("Allowed origins (one per line)").fill("https://ok.example\nshop.example.com/cart")
    page.get_by_label("Token lifetime (seconds, 60 to 86400)").fill("10")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#allowedOrigins-error")).to_contain_text(
        "'shop.example.com/cart' is not a site's origin", timeout=SAVE_TIMEOUT
    )
    expect(page.locator("#tokenTtlSeconds-error")).to_contain_text("greater than or equal to 60")
    expect(page.get_by_label("Allowed origins (one per line)")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Allowed origins (one per line)")).to_have_value(
        "https://ok.example\nshop.example.com/cart"
    )
    _shot(page, "settings-errors")
    page.get_by_label("Token lifetime (seconds, 60 to 86400)").fill("abc")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#tokenTtlSeconds-error")).to_have_text("'abc' is not a whole number.", timeout=SAVE_TIMEOUT)
    assert "widget" not in get_or_none(api, namespace, "environments", "bot-draft")["spec"]  # nothing changed

    # Embed Code: allow a site in one step; a bad origin is refused next to the input
    page.get_by_role("link", name="Embed Code").click()
    expect(page.locator("#allow-help")).to_contain_text("A snippet carrying your API key works on any site")
    expect(page.locator("#allowed-origins")).to_have_text("none")
    page.get_by_label("Site's origin").fill("shop.example.com")
    page.get_by_role("button", name="Allow this site").click()
    expect(page.locator("#origin-error")).to_contain_text(
        "'shop.example.com' is not a site's origin", timeout=SAVE_TIMEOUT
    )
    expect(page.get_by_label("Site's origin")).to_have_value("shop.example.com")
    _shot(page, "embed-allow-error")
    page.get_by_label("Site's origin").fill("https://shop.example.com/")
    page.get_by_role("button", name="Allow this site").click()
    expect(page.get_by_role("status").first).to_contain_text(
        "https://shop.example.com added to the allowed origins", timeout=SAVE_TIMEOUT
    )
    expect(page.locator("#allowed-origins")).to_have_text("https://shop.example.com")
    env = get_or_none(api, namespace, "environments", "bot-draft")
    assert env["spec"]["widget"]["allowedOrigins"] == ["https://shop.example.com"]
    assert env["spec"]["access"]["webClient"] == "oidc"  # the other settings kept
    _shot(page, "embed-allow")
    page.get_by_label("Site's origin").fill("https://shop.example.com")
    page.get_by_role("button", name="Allow this site").click()
    expect(page.get_by_role("status").first).to_contain_text(
        "https://shop.example.com is already allowed", timeout=SAVE_TIMEOUT
    )
    events = client.CoreV1Api(api).list_namespaced_event(namespace, field_selector="involvedObject.name=bot-draft")
    changes = [e.message for e in events.items if e.reason == "SettingsChanged"]
    assert any(team.name("alice") in m and "access.webClient" in m for m in changes), changes
    assert any('widget.allowedOrigins=["https://shop.example.com"]' in m for m in changes), changes
    page.set_viewport_size(PHONE)  # both forms fit a phone
    for tab in ("settings", "embed"):
        page.goto(f"{env_url}?tab={tab}")
        assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"], tab
    assert errors == []
    context.close()

    # vic, a viewer, reads the settings; a change is refused in words and the Environment stays
    viewer = _context(browser, facade)
    page = viewer.new_page()
    _sign_in(page, facade, team.tokens["vic"], namespace)
    page.goto(f"{env_url}?tab=settings")
    page.get_by_label("Web client access").select_option("disabled")
    page.get_by_role("button", name="Save settings").click()
    expect(page.get_by_role("alert").first).to_contain_text(team.name("vic"))
    assert get_or_none(api, namespace, "environments", "bot-draft")["spec"]["access"]["webClient"] == "oidc"
    viewer.close()


def test_console_tests_a_tool_and_the_checklist_counts_it(
    browser: Browser, facade: Facade, api: client.ApiClient, namespace: str, team: Users, model: ScriptedModel
) -> None:
    """The environment's Tools page: a Test per tool with its arguments as JSON; bad arguments refused next
    to the field (not JSON; not matching the tool's JSON Schema); a passing call shows the tool's answer,
    is recorded in the App's status and makes "Tools deployed and tested" Done; a viewer is refused."""
    deploy_bot(api, namespace, model)
    context = _context(browser, facade)
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    _sign_in(page, facade, team.tokens["alice"], namespace)
    page.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-draft")
    page.get_by_role("link", name="Test the tools").click()
    form = page.get_by_role("form", name="Test weather")
    expect(page.get_by_role("heading", name="weather 1.0.0")).to_be_visible()
    form.get_by_label("Arguments (JSON)").fill("{city: Oslo}")
    form.get_by_role("button", name="Test").click()
    expect(page.locator("#arguments-error")).to_contain_text("not JSON")
    form.get_by_label("Arguments (JSON)").fill("{}")
    form.get_by_role("button", name="Test").click()
    expect(page.locator("#arguments-error")).to_contain_text("'city' is a required property")
    expect(form.get_by_label("Arguments (JSON)")).to_have_attribute("aria-invalid", "true")
    expect(form.get_by_label("Arguments (JSON)")).to_have_value("{}")
    assert not (get_or_none(api, namespace, "apps", "bot").get("status") or {}).get("toolTests")  # not called
    _shot(page, "tool-test-error")
    form.get_by_label("Arguments (JSON)").fill('{"city": "Oslo"}')
    form.get_by_role("button", name="Test").click()
    expect(page.locator("#test-result")).to_contain_text("passed")
    expect(page.locator("#test-answer")).to_contain_text('"celsius"')
    # the recorded call, listed with the tool
    expect(page.get_by_role("region", name="weather 1.0.0")).to_contain_text(f"by {team.name('alice')}")
    [record] = get_or_none(api, namespace, "apps", "bot")["status"]["toolTests"]
    assert (record["tool"], record["passed"], record["by"]) == ("weather", True, team.name("alice"))
    _shot(page, "tool-test")

    def tools_item() -> str:
        checklist = get_or_none(api, namespace, "environments", "bot-draft")["status"]["checklist"]
        return str(next(c["state"] for c in checklist if c["item"] == "Tools deployed and tested"))

    wait_for(lambda: tools_item() == "Done", timeout=30, what="the checklist item Done")
    page.set_viewport_size(PHONE)
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    viewer = _context(browser, facade).new_page()
    _sign_in(viewer, facade, team.tokens["vic"], namespace)
    viewer.goto(f"{facade.url}/console/ns/{namespace}/environments/bot-draft/tools")
    viewer.get_by_role("form", name="Test weather").get_by_role("button", name="Test").click()
    expect(viewer.get_by_role("alert").first).to_contain_text("cannot create environments/tooltests")
    assert errors == []
    context.close()
