"""The demo App of ``make run``: an App ``demo`` (with its ``draft`` environment) and one API key.

Idempotent: a second run finds the App and, when ``.dockyard/demo-api-key`` still holds a valid key of
the draft environment, keeps it. Otherwise a fresh key is generated, printed once and written to that
file (mode 0600, gitignored) so that scripts and the README's examples can use it.

:func:`ensure_demo_model` then makes the demo answer, as a user would: it writes the tiny random-weight
GGUF model (:mod:`dockyard_localcluster.tinymodel`), imports it through the PUBLIC import API in
chunks (printing progress), deploys it on g5.xlarge through the public deploy API, creates the HTTP
tool ``clock`` (:mod:`dockyard_localcluster.toolserver`) and gives the App an agent on that model with
that tool. A second run reuses the Model and the deployment when they are still there.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import httpx
from kubernetes import client

from dockyard_core import apikeys
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION

APP = "demo"
ENVIRONMENT = f"{APP}-draft"
KEY_FILE = "demo-api-key"


@dataclass(frozen=True)
class Demo:
    namespace: str
    environment: str
    base_url: str
    key_file: Path
    new_key: str | None
    """The key, when this run generated it (shown once); None when the file's key is still valid."""

    def key(self) -> str:
        return self.new_key or self.key_file.read_text().strip()


def ensure_demo(api: client.ApiClient, state_dir: Path, facade_url: str, namespace: str = "default") -> Demo:
    objects = client.CustomObjectsApi(api)
    core = client.CoreV1Api(api)
    app = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "App",
        "metadata": {"name": APP},
        "spec": {"displayName": "Demo app", "description": "Created by make run"},
    }
    try:
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "apps", app)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    env = _wait_environment(objects, namespace)
    key_file = state_dir / KEY_FILE
    base_url = f"{facade_url.rstrip('/')}/e/{namespace}/{ENVIRONMENT}"
    if _still_valid(api, namespace, key_file):
        return Demo(namespace, ENVIRONMENT, base_url, key_file, None)
    key = apikeys.generate()
    secret = apikeys.key_secret(
        key=key, name="make run demo key", environment=env, created_by="make run", created_at=datetime.now(UTC)
    )
    core.create_namespaced_secret(namespace, cast(Any, secret))
    state_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(key_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(key.value + "\n")
    key_file.chmod(0o600)
    return Demo(namespace, ENVIRONMENT, base_url, key_file, key.value)


def _wait_environment(objects: client.CustomObjectsApi, namespace: str, timeout: float = 60) -> dict[str, Any]:
    """The draft environment, which the operator creates for the App."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            env: Any = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, "environments", ENVIRONMENT)
            return cast(dict[str, Any], env)
        except client.ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
        time.sleep(0.5)


def _still_valid(api: client.ApiClient, namespace: str, key_file: Path) -> bool:
    if not key_file.is_file():
        return False
    value = key_file.read_text().strip()
    key_id = apikeys.key_id_of(value)
    if key_id is None:
        return False
    try:
        secret = client.CoreV1Api(api).read_namespaced_secret(apikeys.secret_name(key_id), namespace)
    except client.ApiException as exc:
        if exc.status == 404:
            return False
        raise
    stored = apikeys.stored_key(api.sanitize_for_serialization(secret))
    return stored is not None and stored.verify(value, ENVIRONMENT) is apikeys.Verdict.OK


# --- the model the demo answers with ------------------------------------------------------------------

DEMO_DEPLOYMENT = "demo-tiny"
"""The ModelDeployment (and served model name) of the demo's agent."""
DEMO_MODEL_STATE = "demo-model.json"
TOOL_NAME = "clock"
TOOL_VERSION = "1.0.0"
CHUNK_BYTES = 192 * 1024
DEPLOY_BODY: dict[str, Any] = {
    "name": DEMO_DEPLOYMENT,
    "isDeployedPreviously": False,
    "deviceType": "g5.xlarge",
    "hyperParameters": {"temperature": 0.7, "maxTokens": 64, "topP": 0.95, "topK": 40},
    "scalingParameters": {"maxBatchSize": 4, "minReplicas": 1, "maxReplicas": 1},
    "optimizationInfo": {"optimizationType": "", "quantizationType": ""},
}


def say(message: str) -> None:
    print(f"[demo] {message}", flush=True)


def _wait_job(http: httpx.Client, root: str, headers: dict[str, str], job_id: str, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    last = ""
    while True:
        record = http.get(f"{root}/dock-status/{job_id}", headers=headers).json()
        status = record.get("status")
        line = f"{what}: {status} {record.get('message') or ''}".strip()
        if line != last:
            say(line)
            last = line
        if status == "SUCCESS":
            return
        if status == "FAILED":
            raise RuntimeError(f"{what} FAILED: {record.get('reason')}: {record.get('message')}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} still {status} after {timeout:.0f}s")
        time.sleep(0.5)


def import_model(http: httpx.Client, root: str, key: str, path: Path, extension: str = "gguf") -> str:
    """The public chunked import (docs/public-api.md, "Chunked model import") of the file at ``path``
    (``extension``: gguf, or tar for a model directory): start, chunks, complete, then the dock status
    until the import job is SUCCESS. Returns the modelId."""
    from dockyard_localcluster.tinymodel import sha256_of

    headers = {"x-api-key": key}
    data = path.read_bytes()
    chunks = [data[i : i + CHUNK_BYTES] for i in range(0, len(data), CHUNK_BYTES)]
    body = {
        "fileContext": "model",
        "totalChunks": len(chunks),
        "fileExtension": extension,
        "fileName": path.name,
        "fileSize": len(data),
        "sha256": sha256_of(path),
    }
    started = http.post(f"{root}/files/session/start", json=body, headers=headers)
    started.raise_for_status()
    session = started.json()
    say(f"import session {session['sessionId']} for model {session['modelId']} ({len(data)} bytes)")
    for number, chunk in enumerate(chunks):
        resp = http.post(
            f"{root}/files/session/{session['sessionId']}",
            data={"chunkNumber": str(number)},
            files={"file": (path.name, chunk, "application/octet-stream")},
            headers=headers,
        )
        resp.raise_for_status()
        say(f"uploaded chunk {number + 1}/{len(chunks)}")
    job = http.post(f"{root}/files/session/{session['sessionId']}/complete", headers=headers)
    job.raise_for_status()
    record = job.json()
    _wait_job(http, root, headers, record["dockStatusId"], "import job", 120)
    return str(session["modelId"])


def deploy_model(http: httpx.Client, root: str, key: str, model_id: str, timeout: float = 300) -> None:
    """docs/public-api.md 'Deploy a model' on g5.xlarge, then the dock status until the deployment answers (SUCCESS)."""
    headers = {"x-api-key": key}
    resp = http.post(
        f"{root}/models/{model_id}/deploy", params={"modelType": "openSource"}, json=DEPLOY_BODY, headers=headers
    )
    if resp.status_code >= 400:
        raise RuntimeError(f"deploy answered {resp.status_code}: {resp.text}")
    say(f"deploying {model_id} as {DEPLOY_BODY['name']} on {DEPLOY_BODY['deviceType']}")
    _wait_job(http, root, headers, resp.json()["dockStatusId"], "deployment job", timeout)


def _reusable_model(objects: client.CustomObjectsApi, namespace: str, state: Path, sha: str) -> str | None:
    try:
        saved = json.loads(state.read_text())
    except (OSError, ValueError):
        return None
    if saved.get("sha256") != sha:
        return None
    try:
        model: Any = objects.get_namespaced_custom_object(GROUP, VERSION, namespace, "models", saved["modelId"])
    except client.ApiException:
        return None
    return str(saved["modelId"]) if (model.get("status") or {}).get("phase") == "ReadyToDeploy" else None


def ensure_demo_model(
    api: client.ApiClient,
    demo: Demo,
    state_dir: Path,
    facade_url: str,
    tool_url: str | None = None,
    tool_image: str | None = None,
) -> str:
    """The demo's model, deployment, tool and agent (see the module docstring). Returns the
    ModelDeployment's name. The tool is the HTTP endpoint ``tool_url`` (``make run``: a process on this
    host) or, in a cluster whose pods run (``make run-incluster``), the image ``tool_image`` that the
    environment deploys as a ToolDeployment."""
    if (tool_url is None) == (tool_image is None):
        raise ValueError("give the demo tool either as tool_url or as tool_image")
    from dockyard_localcluster.tinymodel import sha256_of, write_tiny_gguf
    from dockyard_localcluster.toolserver import DESCRIPTION, PARAMETERS

    objects = client.CustomObjectsApi(api)
    namespace = demo.namespace
    gguf = state_dir / "demo" / "dockyard-tiny-llama.gguf"
    write_tiny_gguf(gguf)  # deterministic: the same bytes each run, unless the generator changed
    say(f"wrote the tiny random-weight model {gguf} ({gguf.stat().st_size} bytes)")
    sha = sha256_of(gguf)
    root = f"{demo.base_url}/api/public"
    key = demo.key()
    saved = state_dir / DEMO_MODEL_STATE
    with httpx.Client(timeout=60) as http:
        model_id = _reusable_model(objects, namespace, saved, sha)
        if model_id is None:
            model_id = import_model(http, root, key, gguf)
            saved.write_text(json.dumps({"modelId": model_id, "sha256": sha}))
        else:
            say(f"model {model_id} is imported already")
        try:
            mdep: Any = objects.get_namespaced_custom_object(
                GROUP, VERSION, namespace, "modeldeployments", DEMO_DEPLOYMENT
            )
        except client.ApiException as exc:
            if exc.status != 404:
                raise
            mdep = None
        if mdep is None or mdep["spec"].get("modelRef") != model_id:
            if mdep is not None:
                objects.delete_namespaced_custom_object(GROUP, VERSION, namespace, "modeldeployments", DEMO_DEPLOYMENT)
                _wait_gone(objects, namespace, "modeldeployments", DEMO_DEPLOYMENT)
            deploy_model(http, root, key, model_id)
        else:
            job = (mdep.get("status") or {}).get("job") or {}
            say(f"model deployment {DEMO_DEPLOYMENT} exists (last job {job.get('status')})")
    tool = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "Tool",
        "metadata": {"name": f"{TOOL_NAME}-{TOOL_VERSION}"},
        "spec": {
            "name": TOOL_NAME,
            "version": TOOL_VERSION,
            "description": DESCRIPTION,
            **({"endpoint": tool_url} if tool_url else {"container": {"image": tool_image, "port": 8080}}),
            "parameters": PARAMETERS,
        },
    }
    try:
        objects.create_namespaced_custom_object(GROUP, VERSION, namespace, "tools", tool)
    except client.ApiException as exc:
        if exc.status != 409:
            raise
    agent = {
        "name": "assistant",
        "version": "1.0.0",
        "instructions": "You answer questions about time. Call the clock tool for the current time.",
        "model": DEMO_DEPLOYMENT,
        "tools": [TOOL_NAME],
    }
    patch = {"spec": {"agents": [agent], "toolVersions": [{"name": TOOL_NAME, "version": TOOL_VERSION}]}}
    objects.patch_namespaced_custom_object(GROUP, VERSION, namespace, "apps", APP, patch)
    return DEMO_DEPLOYMENT


def _wait_gone(objects: client.CustomObjectsApi, namespace: str, plural: str, name: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            objects.get_namespaced_custom_object(GROUP, VERSION, namespace, plural, name)
        except client.ApiException as exc:
            if exc.status == 404:
                return
            raise
        time.sleep(0.5)
    raise RuntimeError(f"{plural}/{name} was not deleted within {timeout:.0f}s")
