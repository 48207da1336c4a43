"""Where the client's settings come from, strongest first: flags, environment variables, a profile of
the profile file, defaults.

| setting | flag | environment | profile key |
|---|---|---|---|
| facade URL (or an environment's base URL ``.../e/<ns>/<env>``) | ``--url`` | ``DOCKYARD_URL`` | ``url`` |
| namespace | ``--namespace`` | ``DOCKYARD_NAMESPACE`` | ``namespace`` |
| environment (object name, e.g. ``demo-draft``) | ``--environment`` | ``DOCKYARD_ENVIRONMENT`` | ``environment`` |
| API key (public API, deployed-app calls) | ``--api-key`` | ``DOCKYARD_API_KEY`` | ``api_key`` or ``api_key_file`` |
| Kubernetes token (management API) | ``--token`` | ``DOCKYARD_TOKEN`` | ``token`` or ``token_file`` |
| kubeconfig (its current user's token) | ``--kubeconfig`` | ``DOCKYARD_KUBECONFIG``, ``KUBECONFIG`` | ``kubeconfig`` |

The profile file is TOML, ``$DOCKYARD_CONFIG`` or ``~/.config/dockyard/config.toml``; the profile is
``--profile``, ``DOCKYARD_PROFILE``, the file's ``default`` or ``default``::

    default = "local"
    [profiles.local]
    url = "http://127.0.0.1:8080"
    namespace = "default"
    environment = "demo-draft"
    api_key_file = "/home/me/dockyard/.dockyard/demo-api-key"
"""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dockyard_client.errors import ConfigurationError

DEFAULT_URL = "http://127.0.0.1:8080"


def config_path(env: Mapping[str, str]) -> Path:
    if env.get("DOCKYARD_CONFIG"):
        return Path(env["DOCKYARD_CONFIG"]).expanduser()
    base = Path(env.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "dockyard" / "config.toml"


@dataclass(frozen=True)
class Settings:
    url: str = DEFAULT_URL
    namespace: str | None = None
    environment: str | None = None
    api_key: str | None = None
    token: str | None = None
    kubeconfig: str | None = None
    profile: str | None = None


def _read(path: str | Path) -> str:
    try:
        return Path(path).expanduser().read_text().strip()
    except OSError as exc:
        raise ConfigurationError(f"cannot read {path}: {exc.strerror}") from exc


def load_profile(name: str | None, env: Mapping[str, str]) -> tuple[str | None, dict[str, Any]]:
    path = config_path(env)
    if not path.exists():
        if name:
            raise ConfigurationError(f"profile {name!r} asked for, but there is no profile file {path}")
        return None, {}
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ConfigurationError(f"cannot read the profile file {path}: {exc}") from exc
    chosen = name or data.get("default") or "default"
    profiles = data.get("profiles") or {}
    if chosen not in profiles:
        if name:
            raise ConfigurationError(f"{path} has no profile {name!r} (it has: {', '.join(profiles) or 'none'})")
        return None, {}
    profile = profiles[chosen]
    if not isinstance(profile, dict):
        raise ConfigurationError(f"profile {chosen!r} of {path} is not a table")
    return chosen, profile


def resolve(
    *,
    url: str | None = None,
    namespace: str | None = None,
    environment: str | None = None,
    api_key: str | None = None,
    token: str | None = None,
    kubeconfig: str | None = None,
    profile: str | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """The settings from flags (the arguments), the environment and the profile file."""
    env = os.environ if env is None else env
    name, prof = load_profile(profile or env.get("DOCKYARD_PROFILE"), env)

    def pick(flag: str | None, variable: str, key: str) -> str | None:
        value = flag or env.get(variable) or prof.get(key)
        return str(value) if value else None

    key = pick(api_key, "DOCKYARD_API_KEY", "api_key")
    if key is None and prof.get("api_key_file"):
        key = _read(prof["api_key_file"])
    tok = pick(token, "DOCKYARD_TOKEN", "token")
    if tok is None and prof.get("token_file"):
        tok = _read(prof["token_file"])
    return Settings(
        url=pick(url, "DOCKYARD_URL", "url") or DEFAULT_URL,
        namespace=pick(namespace, "DOCKYARD_NAMESPACE", "namespace"),
        environment=pick(environment, "DOCKYARD_ENVIRONMENT", "environment"),
        api_key=key,
        token=tok,
        kubeconfig=kubeconfig or env.get("DOCKYARD_KUBECONFIG") or prof.get("kubeconfig") or env.get("KUBECONFIG"),
        profile=name,
    )


def kubeconfig_token(path: str) -> tuple[str | None, str | None]:
    """The bearer token of the kubeconfig's current user (``token``, ``tokenFile`` or an ``exec`` credential
    plugin) and the current context's namespace. A user that authenticates with a client certificate has
    no token to give the facade: (None, namespace)."""
    first = path.split(os.pathsep)[0]
    try:
        config = yaml.safe_load(Path(first).expanduser().read_text()) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ConfigurationError(f"cannot read the kubeconfig {first}: {exc}") from exc
    current = config.get("current-context")
    context = next((c.get("context") or {} for c in config.get("contexts") or [] if c.get("name") == current), {})
    user = next((u.get("user") or {} for u in config.get("users") or [] if u.get("name") == context.get("user")), {})
    namespace = context.get("namespace")
    if user.get("token"):
        return str(user["token"]), namespace
    if user.get("tokenFile"):
        return _read(user["tokenFile"]), namespace
    if user.get("exec"):
        return _exec_token(user["exec"]), namespace
    return None, namespace


def _exec_token(spec: dict[str, Any]) -> str:
    """Run a client-go credential plugin and read ``status.token`` of its ExecCredential."""
    command = [spec["command"], *(spec.get("args") or [])]
    extra = {e["name"]: e["value"] for e in spec.get("env") or []}
    info = {"apiVersion": spec.get("apiVersion", "client.authentication.k8s.io/v1"), "kind": "ExecCredential",
            "spec": {"interactive": False}}  # fmt: skip
    try:
        done = subprocess.run(
            command,
            env={**os.environ, **extra, "KUBERNETES_EXEC_INFO": json.dumps(info)},
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        token = (json.loads(done.stdout).get("status") or {}).get("token")
    except (OSError, subprocess.SubprocessError, ValueError) as exc:
        raise ConfigurationError(f"the kubeconfig's credential plugin {command[0]} failed: {exc}") from exc
    if not token:
        raise ConfigurationError(f"the kubeconfig's credential plugin {command[0]} gave no token")
    return str(token)


def management_token(settings: Settings) -> str | None:
    """The token for the management API: the explicit one, else the kubeconfig user's."""
    if settings.token:
        return settings.token
    if settings.kubeconfig:
        return kubeconfig_token(settings.kubeconfig)[0]
    return None
