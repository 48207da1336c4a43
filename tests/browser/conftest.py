"""Browser tests: Debian's Chromium driven by Playwright's Python package, against the real facade and
operator on the local control plane, with the scripted OpenAI-compatible model server behind the app.

Chromium is the distribution's (``/usr/bin/chromium``, installed by ``.ci/run`` and the README's set-up);
Playwright never downloads a browser here. Host pages of "other sites" are served from other loopback
addresses (127.0.0.2, 127.0.0.3), which browsers treat as other origins than the facade's 127.0.0.1.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from kubernetes import client
from playwright.sync_api import Browser, ConsoleMessage, Page, expect

from dockyard_api.runtime.endpoints import LOCAL_ENDPOINT_ANNOTATION, MODEL_DEPLOYMENT_LABEL
from dockyard_core import apikeys
from dockyard_localcluster.stages import SIMULATE_LABEL
from tests.support.browser import Site, chromium, serve_site
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, get, get_or_empty, hub_model, model_deployment, patch
from tests.support.runners import run_local_runtime
from tests.support.scripted_model import ScriptedModel, scripted_model
from tests.support.waiting import wait_for

expect.set_options(timeout=15_000)
"""A page's answer to a click may take the API server's round trips: on a loaded 2-core CI machine more than
Playwright's default 5 s (clean-clone CI runs of 2026-11-27: the console's settings form, its tool test)."""


ALLOWED_HOST = "127.0.0.2"
"""A site listed in the environment's spec.widget.allowedOrigins."""
OTHER_HOST = "127.0.0.3"
"""A site that is not."""
WEATHER_SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture(scope="module", autouse=True)
def _fresh_webhooks(no_webhook_of_an_earlier_file: None) -> None:
    """Each test file starts from a cluster without another file's admission webhooks
    (:func:`tests.support.k8s_fixtures.no_webhook_of_an_earlier_file`)."""


@pytest.fixture(scope="package")
def browser() -> Iterator[Browser]:
    """One Chromium for the browser tests, stopped after them: Playwright's sync API keeps an event loop
    running in this thread while it lives, and the later tests' asyncio.run() would refuse to start."""
    with chromium() as launched:
        yield launched


@dataclass
class Facade:
    url: str
    http: httpx.Client


@pytest.fixture(scope="module")
def model_server() -> Iterator[ScriptedModel]:
    with scripted_model() as server:
        yield server


@pytest.fixture
def model(model_server: ScriptedModel) -> ScriptedModel:
    model_server.reset()
    return model_server


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, crds: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Facade]:
    """The operator (its generated URLs name this facade) and the facade in local endpoint mode; widget
    settings are read fresh on every request (no cache) so a test's spec change applies at once."""
    with run_local_runtime(tmp_path_factory.mktemp("facade"), widget_config_cache_seconds=0) as (url, running):
        yield Facade(url, running.client)


@dataclass
class Bot:
    namespace: str
    environment: str
    status: dict[str, Any]

    @property
    def base(self) -> str:
        return str(self.status["urls"]["apiBaseUrl"])


def deploy_bot(api: client.ApiClient, namespace: str, model: ScriptedModel, serve: bool = True, **env_spec: Any) -> Bot:
    """App ``bot`` (agent ``helper`` with HTTP tool ``weather``) on ModelDeployment ``tiny``, which the
    scripted model serves (this plays the local engine runner, Contract 1); its draft environment gets
    ``env_spec`` (access, widget) and is returned once the operator has published its URLs and embed code.
    ``serve`` False: the model's pods never turn Ready (kwok's ``never-ready`` simulation, a label of the
    ModelDeployment that its pods carry), so the environment stays deploying until :func:`serve_model` with
    ``release``."""
    hub_model(api, namespace, "tiny")
    model_deployment(api, namespace, "tiny", labels=None if serve else {SIMULATE_LABEL: "never-ready"})
    weather = model.tool("weather", lambda args: {"city": args.get("city"), "celsius": 12})
    spec = {"name": "weather", "version": "1.0.0", "endpoint": weather, "parameters": WEATHER_SCHEMA}
    create(api, namespace, "tools", "Tool", "weather-1.0.0", spec)
    agent = {"name": "helper", "version": "1.0.0", "instructions": "You are helpful.", "model": "tiny"}
    app = {
        "displayName": "Bot",
        "agents": [{**agent, "tools": ["weather"]}],
        "toolVersions": [{"name": "weather", "version": "1.0.0"}],
    }
    create(api, namespace, "apps", "App", "bot", app)
    draft = "the draft environment"
    wait_for(lambda: get_or_empty(api, namespace, "environments", "bot-draft"), timeout=30, what=draft)
    if env_spec:
        patch(api, namespace, "environments", "bot-draft", {"spec": env_spec})
    status = wait_for(
        lambda: (
            (get_or_empty(api, namespace, "environments", "bot-draft").get("status") or {}).get("embedCode")
            and get_or_empty(api, namespace, "environments", "bot-draft")["status"]
        ),
        timeout=60,
        what="the environment's embed code",
    )
    if serve:
        serve_model(api, namespace, model.url)
    return Bot(namespace, "bot-draft", status)


def serve_model(api: client.ApiClient, namespace: str, url: str, release: bool = False) -> None:
    """The scripted model at ``url`` serves ModelDeployment ``tiny``'s Ready pods; ``release``: first its
    ``never-ready`` label is removed (:func:`deploy_bot` with ``serve`` False), so the rollout of pods without it
    ends."""
    core = client.CoreV1Api(api)
    if release:
        patch(api, namespace, "modeldeployments", "tiny", {"metadata": {"labels": {SIMULATE_LABEL: None}}})

    def ready_pods() -> list[Any]:
        pods = core.list_namespaced_pod(namespace, label_selector=f"{MODEL_DEPLOYMENT_LABEL}=tiny").items
        return [p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]

    for pod in wait_for(ready_pods, timeout=90, what="a Ready pod of ModelDeployment tiny"):
        core.patch_namespaced_pod(
            pod.metadata.name, namespace, {"metadata": {"annotations": {LOCAL_ENDPOINT_ANNOTATION: url}}}
        )


def api_key(api: client.ApiClient, namespace: str, environment: str) -> str:
    env = get(api, namespace, "environments", environment)
    key = apikeys.generate()
    secret = apikeys.key_secret(key=key, name="site", environment=env, created_by="test", created_at=datetime.now(UTC))
    client.CoreV1Api(api).create_namespaced_secret(namespace, secret)
    return key.value


@pytest.fixture
def allowed_site() -> Iterator[Site]:
    with serve_site(ALLOWED_HOST) as site:
        yield site


@pytest.fixture
def other_site() -> Iterator[Site]:
    with serve_site(OTHER_HOST) as site:
        yield site


@dataclass
class Tab:
    """A page with what it logged: console messages and uncaught errors (the host page must see none)."""

    page: Page
    console: list[str]
    errors: list[str]
    shots: Path

    def shot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=False)
        return path


@pytest.fixture
def open_tab(browser: Browser, tmp_path: Path) -> Iterator[Callable[..., Tab]]:
    """Opens pages in one fresh browser context (its own storage); screenshots go under the test's tmp dir."""
    context = browser.new_context(viewport={"width": 1100, "height": 760})
    context.set_default_timeout(20_000)

    def opener(viewport: dict[str, int] | None = None) -> Tab:
        page = context.new_page()
        if viewport:
            page.set_viewport_size({"width": viewport["width"], "height": viewport["height"]})
        tab = Tab(page, [], [], tmp_path)

        def on_console(msg: ConsoleMessage) -> None:
            tab.console.append(f"{msg.type}: {msg.text}")

        page.on("console", on_console)
        page.on("pageerror", lambda exc: tab.errors.append(str(exc)))
        return tab

    yield opener
    context.close()
