"""The demo App of ``make run``: an App ``demo`` (with its ``draft`` environment) and one API key.

Idempotent: a second run finds the App and, when ``.dockyard/demo-api-key`` still holds a valid key of
the draft environment, keeps it. Otherwise a fresh key is generated, printed once and written to that
file (mode 0600, gitignored) so that scripts and the README's examples can use it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from kubernetes import client

from dockyard_api import apikeys
from dockyard_api.resources import GROUP
from dockyard_api.resources.v1alpha1 import VERSION

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
