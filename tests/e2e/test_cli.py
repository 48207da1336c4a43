"""The ``dockyard`` command against the real facade and operator, each its own process (as deployed),
on the local control plane:

- ``dockyard import``: interrupted by Ctrl-C and resumed, and carried through a facade restart; the
  stored model's SHA-256 equals the file's; the progress bar in a real terminal (tmux);
- ``dockyard deploy model|tool`` and ``dockyard status``, with the request id followed from the facade's
  log to the operator's (JSON logs of both);
- the environment lifecycle: versions, environments, keys, deploy, history, rollback, delete;
- at the end, both processes' logs hold no API key and no token that the tests used.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import signal
import struct
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import httpx
import pytest
from kubernetes import client

from dockyard_core.resources.v1alpha1.modeldeployment import model_deployment_name
from dockyard_localcluster.cluster import LocalCluster
from tests.support.cluster import E2ECluster
from tests.support.dockyard import create, get, hub_model, model_deployment, patch
from tests.support.public import environment_with_key, wait_model_ready
from tests.support.publicapi import api_key
from tests.support.runners import free_port, wait_http_ok
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
DOCKYARD = str(Path(sys.executable).parent / "dockyard")
KiB, MiB = 1024, 1024 * 1024
SECRETS: list[str] = []
"""Every API key and token the tests hand to the CLI: none may appear in the processes' logs."""


@dataclass
class Process:
    """A Dockyard component as its own process, logging (JSON) to a file that survives restarts."""

    args: list[str]
    env: dict[str, str]
    log: Path
    ready_url: str
    proc: subprocess.Popen[bytes] | None = None
    _out: TextIO | None = field(default=None, repr=False)

    def start(self) -> None:
        self._out = self.log.open("a")
        self.proc = subprocess.Popen(self.args, env=self.env, stdout=self._out, stderr=subprocess.STDOUT, cwd=ROOT)
        wait_http_ok(self.ready_url, timeout=60)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._out is not None:
            self._out.close()
        self.proc = None

    def lines(self) -> list[dict[str, Any]]:
        """The JSON lines of the log (other lines, e.g. a traceback printed by Python itself, are skipped)."""
        out = []
        for line in self.log.read_text().splitlines():
            with contextlib.suppress(ValueError):
                out.append(json.loads(line))
        return out


@pytest.fixture(scope="module")
def logs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("model-store")


def _base_env(cluster: E2ECluster) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("DOCKYARD_")}
    env["KUBECONFIG"] = str(cluster.kubeconfig)
    return env


@pytest.fixture(scope="module")
def operator(cluster: E2ECluster, crds: None, store: Path, logs_dir: Path) -> Iterator[Process]:
    port = free_port()
    env = {
        **_base_env(cluster),
        "DOCKYARD_OPERATOR_HEALTH_PORT": str(port),
        "DOCKYARD_OPERATOR_MODEL_STORE": str(store),
        "DOCKYARD_OPERATOR_ENVIRONMENT_INTERVAL_SECONDS": "1",
        "DOCKYARD_OPERATOR_LOG_FORMAT": "json",
    }
    args = [sys.executable, "-m", "dockyard_operator", "--standalone"]
    process = Process(args, env, logs_dir / "operator.log", f"http://127.0.0.1:{port}/readyz")
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="module")
def facade(cluster: E2ECluster, operator: Process, store: Path, logs_dir: Path) -> Iterator[Process]:
    port = free_port()
    env = {
        **_base_env(cluster),
        "DOCKYARD_API_PORT": str(port),
        "DOCKYARD_API_MODEL_STORE": str(store),
        "DOCKYARD_API_MAX_CHUNK_BYTES": str(4 * MiB),
        "DOCKYARD_API_SWEEP_INTERVAL_SECONDS": "0",
        "DOCKYARD_API_FSYNC_CHUNKS": "false",
        "DOCKYARD_API_LOG_FORMAT": "json",
        "DOCKYARD_API_ACCESS_LOG": "true",
        "DOCKYARD_API_API_KEY_CACHE_SECONDS": "0",
        "DOCKYARD_API_TOKEN_CACHE_SECONDS": "0",
    }
    process = Process([sys.executable, "-m", "dockyard_api"], env, logs_dir / "facade.log",
                      f"http://127.0.0.1:{port}/healthz")  # fmt: skip
    process.start()
    yield process
    process.stop()


def facade_url(facade: Process) -> str:
    return facade.ready_url.removesuffix("/healthz")


@pytest.fixture
def state_home(tmp_path: Path) -> Path:
    return tmp_path / "state"


def cli_env(facade: Process, namespace: str, environment: str | None, *, key: str | None = None,
            token: str | None = None, state: Path | None = None) -> dict[str, str]:  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DOCKYARD_", "KUBECONFIG"))}
    env.update({"DOCKYARD_URL": facade_url(facade), "DOCKYARD_NAMESPACE": namespace, "DOCKYARD_CONFIG": "/nonexistent",
                "COLUMNS": "120", "NO_COLOR": "1"})  # fmt: skip
    if environment:
        env["DOCKYARD_ENVIRONMENT"] = environment
    if key:
        env["DOCKYARD_API_KEY"] = key
        SECRETS.append(key)
    if token:
        env["DOCKYARD_TOKEN"] = token
        SECRETS.append(token)
    if state:
        env["XDG_STATE_HOME"] = str(state)
    return env


def dockyard(*args: str, env: dict[str, str], timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [DOCKYARD, *args], env=env, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL
    )


def model_file(path: Path, size: int) -> str:
    """A safetensors file of about ``size`` random bytes (a valid model for the import job); its SHA-256."""
    payload = os.urandom(size)
    header = json.dumps({"w": {"dtype": "U8", "shape": [size], "data_offsets": [0, size]}}).encode()
    data = struct.pack("<Q", len(header)) + header + payload
    path.write_bytes(data)
    return hashlib.sha256(data).hexdigest()


def resume_record(state: Path) -> dict[str, Any] | None:
    for found in (state / "dockyard" / "uploads").glob("*.json"):
        record: dict[str, Any] = json.loads(found.read_text())
        return record
    return None


def received(facade: Process, namespace: str, environment: str, key: str, session_id: str) -> dict[str, Any]:
    url = f"{facade_url(facade)}/e/{namespace}/{environment}/api/public/files/session/{session_id}"
    answer = httpx.get(url, headers={"x-api-key": key}, timeout=10)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    return body


DEFAULT_SIGINT = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])"
)
"""Runs the command given after it with SIGINT's default action: a test run started in the background by a shell
(``make test &``, a CI runner's) ignores SIGINT, its children inherit that across exec, and Python then installs
no KeyboardInterrupt for Ctrl-C (the import ran to its end, exit 0, in such a run)."""


def start_upload(path: Path, env: dict[str, str], *extra: str) -> subprocess.Popen[str]:
    command = [DOCKYARD, "import", str(path), "--chunk-size", "256KiB", "--parallel", "2", *extra]
    args = [sys.executable, "-c", DEFAULT_SIGINT, *command]
    return subprocess.Popen(
        args, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_for_chunks(state: Path, facade: Process, namespace: str, key: str, at_least: int) -> dict[str, Any]:
    record = wait_for(lambda: resume_record(state), timeout=60, interval=0.05, what="the resume record")
    return wait_for(
        lambda: (
            (s := received(facade, namespace, "prod", key, record["session_id"]))["receivedBytes"] > 0
            and len(s["receivedChunks"]) >= at_least
            and s
        ),
        timeout=60,
        interval=0.05,
        what=f"{at_least} chunks to arrive",
    )


def maybe_get(api: client.ApiClient, namespace: str, plural: str, name: str) -> dict[str, Any]:
    """The object, or {} while it does not exist."""
    try:
        return get(api, namespace, plural, name)
    except client.ApiException as exc:
        if exc.status == 404:
            return {}
        raise


def stored_sha256(api: client.ApiClient, namespace: str, model_id: str) -> str | None:
    status = get(api, namespace, "models", model_id).get("status") or {}
    storage = status.get("storage") or {}
    return storage.get("sha256")


# --- import --------------------------------------------------------------------------------------------


def test_import_interrupted_with_ctrl_c_resumes_and_the_sha256_matches(
    api: client.ApiClient, namespace: str, facade: Process, state_home: Path, tmp_path: Path
) -> None:
    key = api_key(api, namespace, "prod")
    env = cli_env(facade, namespace, "prod", key=key, state=state_home)
    path = tmp_path / "tiny-model.safetensors"
    sha = model_file(path, 12 * MiB)
    total = -(-path.stat().st_size // (256 * KiB))

    upload = start_upload(path, env, "--max-rate", "3MiB")
    before = wait_for_chunks(state_home, facade, namespace, key, at_least=4)
    upload.send_signal(signal.SIGINT)
    _, err = upload.communicate(timeout=60)
    assert upload.returncode == 130, err
    assert "run the same command again to resume" in err
    record = resume_record(state_home)
    assert record is not None
    session = received(facade, namespace, "prod", key, record["session_id"])
    assert len(before["receivedChunks"]) <= len(session["receivedChunks"]) < total  # interrupted midway
    assert session["state"] == "open"

    done = dockyard("import", str(path), "--chunk-size", "256KiB", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert f"resuming session {record['session_id']}" in done.stderr
    assert f"{len(session['receivedChunks'])} of {total} chunks already there" in done.stderr
    job = json.loads(done.stdout)
    assert job["status"] == "SUCCESS", job
    assert job["dockStatusId"] == job["dock-statusId"]
    assert (job["modelId"], job["jobType"], job["action"]) == (record["model_id"], "MODELS", "EXPORT")
    assert stored_sha256(api, namespace, record["model_id"]) == sha  # sent with the completion, verified by the job
    model = get(api, namespace, "models", record["model_id"])
    assert model["metadata"]["annotations"]["dockyard.dev/upload-sha256"] == sha
    assert model["status"]["phase"] == "ReadyToDeploy"
    assert resume_record(state_home) is None  # the job ended: nothing left to resume

    # the same file again is a new import (a new session and model), not a resume of the finished one
    again = dockyard("import", str(path), "--chunk-size", "1MiB", "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert "resuming" not in again.stderr
    assert json.loads(again.stdout)["modelId"] != record["model_id"]


def test_import_carries_on_through_a_facade_restart(
    api: client.ApiClient, namespace: str, facade: Process, state_home: Path, tmp_path: Path
) -> None:
    key = api_key(api, namespace, "prod")
    env = cli_env(facade, namespace, "prod", key=key, state=state_home)
    path = tmp_path / "restart.safetensors"
    sha = model_file(path, 8 * MiB)
    upload = start_upload(path, env, "--max-rate", "2MiB", "--json")
    wait_for_chunks(state_home, facade, namespace, key, at_least=2)
    facade.stop()  # the facade goes away in the middle of the upload ...
    assert upload.poll() is None  # ... the command keeps retrying
    facade.start()  # ... and comes back on the same port
    out, err = upload.communicate(timeout=180)
    assert upload.returncode == 0, err
    assert "retrying for up to 120s" in err  # it said so while the facade was away
    job = json.loads(out)
    assert job["status"] == "SUCCESS", job
    assert stored_sha256(api, namespace, job["modelId"]) == sha


def test_the_progress_bar_in_a_real_terminal(
    api: client.ApiClient, namespace: str, facade: Process, state_home: Path, tmp_path: Path
) -> None:
    tmux = shutil.which("tmux")
    assert tmux, "tmux is needed (apt-get install tmux; .ci/run installs it)"
    key = api_key(api, namespace, "prod")
    env = cli_env(facade, namespace, "prod", key=key, state=state_home)
    env.pop("NO_COLOR")
    env.pop("COLUMNS")
    env["TERM"] = "xterm-256color"
    path = tmp_path / "terminal.safetensors"
    model_file(path, 6 * MiB)
    socket = f"dockyard-test-{uuid.uuid4().hex[:8]}"
    script = tmp_path / "run.sh"
    script.write_text(
        "#!/bin/sh\n"
        + "".join(f"export {k}='{v}'\n" for k, v in env.items() if k.isidentifier() and "'" not in v)
        + f"{DOCKYARD} import {path} --chunk-size 256KiB --parallel 2 --max-rate 1MiB\n"
        + "echo EXIT=$?\nsleep 120\n"
    )
    script.chmod(0o755)
    subprocess.run([tmux, "-L", socket, "new-session", "-d", "-s", "t", "-x", "120", "-y", "20", str(script)],
                   check=True)  # fmt: skip
    try:

        def pane() -> str:
            return subprocess.run([tmux, "-L", socket, "capture-pane", "-p", "-t", "t"], capture_output=True,
                                  text=True, check=True).stdout  # fmt: skip

        # mid-upload: description, bar, percentage, bytes done/total, rate and time left on one line
        bar = re.compile(r"upload\s.*?\s(\d+)%\s+([\d.]+)/([\d.]+) MiB\s+([\d.]+ [KM]iB/s)\s+eta\s+(\d+:\d\d:\d\d)")
        live = wait_for(lambda: (m := bar.search(pane())) and 0 < int(m.group(1)) < 100 and m, timeout=60,
                        interval=0.1, what="a progress line mid-upload")  # fmt: skip
        assert float(live.group(3)) == pytest.approx(6.0, abs=0.1)
        assert float(live.group(4).split()[0]) > 0
        screen = wait_for(lambda: "EXIT=" in (p := pane()) and p, timeout=120, what="the import to end")
        assert "EXIT=0" in screen, screen
        assert re.search(r"upload\s.*?\s100%\s+6\.0/6\.0 MiB", screen), screen
        assert "SUCCESS" in screen
    finally:
        subprocess.run([tmux, "-L", socket, "kill-server"], check=False)


# --- deploy and status ---------------------------------------------------------------------------------


def test_deploy_model_and_tool_then_follow_the_request_across_both_logs(
    api: client.ApiClient, namespace: str, facade: Process, operator: Process
) -> None:
    env_key = environment_with_key(api, namespace)
    env = cli_env(facade, namespace, env_key.environment, key=env_key.key)
    hub_model(api, namespace, "llama")
    wait_model_ready(api, namespace, "llama")

    done = dockyard("deploy", "model", "llama", "--device", "g5.xlarge", "--max-replicas", "2", "--json",
                    "--timeout", "120", env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    job = json.loads(done.stdout)
    assert (job["status"], job["action"], job["jobType"], job["modelId"]) == ("SUCCESS", "DEPLOY", "MODELS", "llama")
    status = dockyard("status", job["dockStatusId"], "--json", env=env)
    assert status.returncode == 0
    assert json.loads(status.stdout)["status"] == "SUCCESS"
    assert dockyard("status", "no-such-job", env=env).returncode == 4
    # any text as the name: the object is named after it, and `dockyard status` shows both names
    named = dockyard("deploy", "model", "llama", "--device", "g5.xlarge", "--name", "Llama 3 8B", "--no-wait", "--json",
                     env=env)  # fmt: skip
    assert named.returncode == 0, named.stderr
    named_job = json.loads(named.stdout)
    assert (named_job["name"], named_job["deploymentName"]) == ("Llama 3 8B", model_deployment_name("Llama 3 8B"))
    shown = dockyard("status", named_job["dockStatusId"], env=env)
    assert shown.returncode == 0, shown.stderr
    assert "Llama 3 8B" in shown.stdout
    assert named_job["deploymentName"] in shown.stdout
    bad = dockyard("deploy", "model", "llama", "--device", "g5.xlarge", "--temperature", "5", "--max-tokens", "8",
                   "--top-p", "1", "--top-k", "1", env=env)  # fmt: skip
    assert bad.returncode == 2
    assert "body.hyperParameters.temperature" in bad.stderr
    assert dockyard("deploy", "model", "nope", "--device", "g5.xlarge", env=env).returncode == 4

    # the request id: annotation on the ModelDeployment, a line in the facade's log, lines in the operator's
    rid = get(api, namespace, "modeldeployments", "llama")["metadata"]["annotations"]["dockyard.dev/request-id"]
    facade_lines = [line for line in facade.lines() if line.get("request_id") == rid]
    assert any(job["dockStatusId"] in line["message"] for line in facade_lines), facade_lines
    operator_lines = wait_for(
        lambda: [line for line in operator.lines() if line.get("request_id") == rid], timeout=30,
        what="the operator's log lines of the request",
    )  # fmt: skip
    assert any("started" in line["message"] for line in operator_lines), operator_lines
    assert any("SUCCESS" in line["message"] for line in operator_lines), operator_lines

    create(api, namespace, "tools", "Tool", "weather-1.2.0",
           {"name": "weather", "version": "1.2.0", "container": {"image": "registry.example.com/weather:1.2.0",
                                                                 "port": 8080}})  # fmt: skip
    sync = dockyard("deploy", "tool", "weather-1.2.0", "--json", env=env)
    assert sync.returncode == 0, sync.stderr
    assert json.loads(sync.stdout)["status"] == "SUCCESS"
    started = dockyard("deploy", "tool", "weather-1.2.0", "--async", "--no-wait", "--json", env=env)
    assert started.returncode == 0, started.stderr
    record = json.loads(started.stdout)
    assert (record["status"], record["toolId"], record["jobType"]) == ("IN_PROGRESS", "weather-1.2.0", "TOOLS")
    watched = dockyard("status", record["dockStatusId"], "--watch", "--interval", "0.2", "--timeout", "120", env=env)
    assert watched.returncode == 0, watched.stderr
    assert "SUCCESS" in watched.stderr

    text = httpx.get(f"{facade_url(facade)}/metrics", timeout=10).text
    assert 'dockyard_api_deploys_total{kind="model",outcome="IN_PROGRESS"}' in text
    assert 'route="/e/{namespace}/{environment}/api/public/models/{modelId}/deploy"' in text
    op = httpx.get(operator.ready_url.replace("/readyz", "/metrics"), timeout=10).text
    assert (
        'dockyard_operator_jobs_total{action="DEPLOY",device_type="g5.xlarge",job_type="MODELS",status="SUCCESS"}' in op
    )
    assert 'dockyard_operator_reconciles_total{kind="ModelDeployment",result="success"}' in op


# --- management ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def editor_token(cluster: E2ECluster, api: client.ApiClient) -> str:
    """A service account's token; in each test namespace it is bound to the chart's dockyard-editor role."""
    helm = str(LocalCluster().bin_dir / "helm")
    rendered = subprocess.run(
        [helm, "template", "dockyard", str(ROOT / "charts/dockyard"),
         "--show-only", "templates/user-clusterroles.yaml"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    kubectl = [cluster.kubectl, "--kubeconfig", str(cluster.kubeconfig)]
    subprocess.run([*kubectl, "apply", "-f", "-"], input=rendered, text=True, check=True, capture_output=True)
    core = client.CoreV1Api(api)
    with contextlib.suppress(client.ApiException):
        core.create_namespace({"metadata": {"name": "dockyard-e2e-cli"}})
    with contextlib.suppress(client.ApiException):
        core.create_namespaced_service_account("dockyard-e2e-cli", {"metadata": {"name": "ci"}})
    token = subprocess.run([*kubectl, "create", "token", "ci", "-n", "dockyard-e2e-cli", "--duration=2h"],
                           capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    return token


def test_environment_lifecycle(api: client.ApiClient, namespace: str, facade: Process, editor_token: str) -> None:
    client.RbacAuthorizationV1Api(api).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "ci-editor"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "dockyard-editor"},
            "subjects": [{"kind": "ServiceAccount", "name": "ci", "namespace": "dockyard-e2e-cli"}],
        },
    )
    env = cli_env(facade, namespace, None, token=editor_token)

    def run(*args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = dockyard(*args, env=env)
        assert done.returncode == code, f"dockyard {' '.join(args)}: {done.returncode}\n{done.stdout}{done.stderr}"
        return done

    def as_json(*args: str) -> Any:
        return json.loads(run(*args, "--json").stdout)

    create(api, namespace, "apps", "App", "demo", {"description": "CLI test"})
    wait_for(lambda: maybe_get(api, namespace, "environments", "demo-draft"), timeout=30, what="the draft environment")
    # a version needs an agent with a model that exists: refused (exit 2) naming the field until the draft has one
    empty = run("versions", "create", "demo", "0.1.0", "--name", "Empty", code=2)
    assert "spec.agents: a version needs at least one agent" in " ".join(empty.stderr.split()), empty.stderr
    hub_model(api, namespace, "demo-model")
    model_deployment(api, namespace, "demo-model")
    agent = {"name": "helper", "version": "1.0.0", "model": "demo-model"}
    patch(api, namespace, "apps", "demo", {"spec": {"agents": [agent]}})
    run("versions", "create", "demo", "1.0.0", "--name", "First")
    run("versions", "create", "demo", "1.1.0", "--name", "Second", "--description", "more")
    assert [v["version"] for v in as_json("versions", "list", "demo")] == ["1.0.0", "1.1.0"]
    assert as_json("versions", "preview", "demo", "1.1.0")["description"] == "more"

    created = as_json("env", "create", "demo", "staging", "--version", "1.0.0", "--description", "QA")
    assert (created["objectName"], created["appVersion"]) == ("demo-staging", "1.0.0")
    assert sorted(e["objectName"] for e in as_json("env", "list", "demo")) == ["demo-draft", "demo-staging"]
    # settings: the web client signed in through an OpenID provider and a site allowed to embed the widget;
    # oidc without its provider, and a site that is not an origin, refused (exit 2) naming the field
    bad = run("env", "settings", "demo-staging", "--web-client", "oidc", code=2)
    assert "access.oidc" in " ".join(bad.stderr.split()), bad.stderr
    # the facade would send the Secret's clientSecret to the issuer named: an editor who may not read the
    # Secret may not name it (the Environment webhook's SubjectAccessReview, exit 3: 403) ...
    access_before = get(api, namespace, "environments", "demo-staging")["spec"].get("access")
    oidc_args = ("--web-client", "oidc", "--oidc-issuer", "https://id.example.com", "--oidc-client-id",
                 "dockyard-web", "--oidc-client-secret-ref", "web-oidc")  # fmt: skip
    denied = " ".join(run("env", "settings", "demo-staging", *oidc_args, code=3).stderr.split())
    assert "spec.access.oidc.clientSecretRef" in denied, denied
    assert "may not get Secret" in denied, denied
    assert get(api, namespace, "environments", "demo-staging")["spec"].get("access") == access_before  # unchanged
    # ... until someone grants get on that one Secret
    rbac = client.RbacAuthorizationV1Api(api)
    rule = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"], "resourceNames": ["web-oidc"]}
    rbac.create_namespaced_role(namespace, {"metadata": {"name": "read-web-oidc"}, "rules": [rule]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "ci-reads-web-oidc"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-web-oidc"},
        "subjects": [{"kind": "ServiceAccount", "name": "ci", "namespace": "dockyard-e2e-cli"}],
    })  # fmt: skip
    settings = as_json("env", "settings", "demo-staging", "--web-client", "oidc", "--oidc-issuer",
                       "https://id.example.com", "--oidc-client-id", "dockyard-web", "--oidc-client-secret-ref",
                       "web-oidc", "--allow-origin", "https://shop.example.com")  # fmt: skip
    oidc = {"issuer": "https://id.example.com", "clientId": "dockyard-web", "clientSecretRef": "web-oidc"}
    assert settings["access"]["webClient"] == "oidc"
    assert oidc.items() <= settings["access"]["oidc"].items()
    assert settings["widget"]["allowedOrigins"] == ["https://shop.example.com"]
    spec = get(api, namespace, "environments", "demo-staging")["spec"]
    assert (spec["access"], spec["widget"]["allowedOrigins"]) == (
        {"webClient": "oidc", "oidc": oidc}, ["https://shop.example.com"])  # fmt: skip
    shown = run("env", "settings", "demo-staging").stdout
    assert "oidc (https://id.example.com, client dockyard-web)" in shown, shown
    bad = run("env", "settings", "demo-staging", "--allow-origin", "shop.example.com", code=2)
    assert "widget.allowedOrigins.1" in " ".join(bad.stderr.split()), bad.stderr

    key = run("keys", "create", "demo-staging", "ci pipeline", "--quiet").stdout.strip()
    SECRETS.append(key)
    assert key.startswith("dky_")
    keys = as_json("keys", "list", "demo-staging")
    assert [k["name"] for k in keys] == ["ci pipeline"]
    assert key not in json.dumps(keys)  # shown once, never listed

    def history() -> list[tuple[str, str]]:
        return [(h["version"], h["status"]) for h in as_json("env", "history", "demo-staging")]

    wait_for(lambda: history() == [("1.0.0", "Active")], timeout=30, what="the first history entry")
    run("env", "deploy", "demo-staging", "1.1.0")
    # newest first
    wait_for(lambda: history() == [("1.1.0", "Active"), ("1.0.0", "Previous")], timeout=30, what="the deploy")
    run("env", "rollback", "demo-staging", "1.0.0", "--yes")
    wait_for(
        lambda: history() == [("1.0.0", "Active"), ("1.1.0", "Previous"), ("1.0.0", "Previous")],
        timeout=30,
        what="the rollback",
    )
    entries = as_json("env", "history", "demo-staging")
    assert entries[0]["deployedBy"] == "system:serviceaccount:dockyard-e2e-cli:ci"
    refused = run("env", "rollback", "demo-staging", "9.9.9", "--yes", code=5)
    assert "not a previous deployment" in refused.stderr
    shown = as_json("env", "show", "demo-staging")
    assert {c["item"] for c in shown["checklist"]} >= {"API keys generated"}

    run("keys", "revoke", "demo-staging", keys[0]["id"])
    assert as_json("keys", "list", "demo-staging") == []
    restored = as_json("versions", "restore", "demo", "1.1.0", "--yes")
    assert restored["restoredFrom"] == "1.1.0"
    run("versions", "delete", "demo", "1.1.0", "--yes")
    assert [v["version"] for v in as_json("versions", "list", "demo")] == ["1.0.0"]
    not_confirmed = run("env", "delete", "demo-staging", code=2)  # no terminal to ask: refused without --yes
    assert "--yes" in not_confirmed.stderr
    run("env", "delete", "demo-staging", "--yes")
    # gone once the operator's deletion handler (keys revoked, audit stamped) lifts its finalizer: a few API calls,
    # but kopf retries a failed handler after a back-off, and a CI run's load once took this past 30 s
    wait_for(lambda: [e["objectName"] for e in as_json("env", "list", "demo")] == ["demo-draft"], timeout=120,
             interval=1.0, what="the environment to go")  # fmt: skip

    assert dockyard("env", "list", "demo", env={**env, "DOCKYARD_TOKEN": "not-a-token"}).returncode == 3
    no_token = {k: v for k, v in env.items() if k != "DOCKYARD_TOKEN"}
    missing = dockyard("env", "list", "demo", env=no_token)
    assert missing.returncode == 2
    assert "Kubernetes bearer token" in missing.stderr


# --- last: the logs --------------------------------------------------------------------------------------


def test_no_api_key_or_token_in_either_log(facade: Process, operator: Process) -> None:
    assert SECRETS, "the tests above handed keys and tokens to the command"
    for process in (facade, operator):
        text = process.log.read_text()
        assert len(process.lines()) > 10, f"{process.log} holds JSON log lines"
        for secret in SECRETS:
            assert secret not in text, f"a secret ({secret[:8]}...) is in {process.log}"
            # nor its secret half alone (a key is dky_<id>_<secret>, and the secret may itself hold "_")
            if secret.startswith("dky_"):
                assert secret.split("_", 2)[2] not in text
