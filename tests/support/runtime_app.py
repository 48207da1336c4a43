"""A deployed bot for runtime tests: an App with one agent on ModelDeployment "tiny", served by the
scripted model server (the test plays the local engine runner, Contract 1), and an API key."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import httpx
from kubernetes import client

from dockyard_api.runtime.endpoints import LOCAL_ENDPOINT_ANNOTATION, MODEL_DEPLOYMENT_LABEL
from dockyard_core import apikeys
from tests.support.dockyard import create, get_or_empty, hub_model, model_deployment
from tests.support.scripted_model import ScriptedModel
from tests.support.waiting import wait_for


@dataclass
class Bot:
    namespace: str
    environment: str
    key: str

    @property
    def execute(self) -> str:
        return f"/e/{self.namespace}/{self.environment}/v1/apps/bot/execute"

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.key}"}


def deploy_bot(
    api: client.ApiClient, namespace: str, model: ScriptedModel, environment: str = "bot-draft", **env_spec: Any
) -> Bot:
    """The bot, its ``environment`` (the App's draft environment, or a new one with ``env_spec``) and a key."""
    hub_model(api, namespace, "tiny")
    model_deployment(api, namespace, "tiny")
    create(api, namespace, "tools", "Tool", "weather-1.0.0",
           {"name": "weather", "version": "1.0.0", "endpoint": model.tool("weather", lambda a: {"celsius": 12}),
            "parameters": {"type": "object", "properties": {}}})  # fmt: skip
    agent = {"name": "helper", "version": "1.0.0", "instructions": "You are helpful.", "model": "tiny"}
    create(api, namespace, "apps", "App", "bot", {"displayName": "Bot", "agents": [agent]})
    core = client.CoreV1Api(api)

    def ready_pods() -> list[Any]:
        pods = core.list_namespaced_pod(namespace, label_selector=f"{MODEL_DEPLOYMENT_LABEL}=tiny").items
        return [p for p in pods if any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]

    for pod in wait_for(ready_pods, timeout=180, what="a Ready pod of ModelDeployment tiny"):
        core.patch_namespaced_pod(
            pod.metadata.name, namespace, {"metadata": {"annotations": {LOCAL_ENDPOINT_ANNOTATION: model.url}}}
        )
    if environment != "bot-draft":
        create(api, namespace, "environments", "Environment", environment, {"appRef": "bot", **env_spec})
    env = wait_for(lambda: get_or_empty(api, namespace, "environments", environment), timeout=60, what=environment)
    key = apikeys.generate()
    secret = apikeys.key_secret(
        key=key, name="chaos", environment=env, created_by="chaos", created_at=datetime.now(UTC)
    )
    core.create_namespaced_secret(namespace, secret)
    return Bot(namespace, environment, key.value)


def answered(http: httpx.Client, bot: Bot, body: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
    """The 200 answer of an execute call (retried while the facade's caches warm up after a start)."""
    last: httpx.Response | None = None

    def attempt() -> dict[str, Any] | None:
        nonlocal last
        last = http.post(bot.execute, headers=bot.headers, json=body)
        if last.status_code == 200:
            result: dict[str, Any] = last.json()
            return result
        assert last.status_code in (404, 503), last.text  # the environment not yet in the facade's informer
        return None

    return wait_for(attempt, timeout=timeout, what=f"an answer (last: {last and last.text})")
