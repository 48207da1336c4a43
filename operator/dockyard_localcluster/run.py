"""``make run``: Dockyard (operator + facade) on the local control plane, in the foreground."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from dockyard_api.kube import api_client
from dockyard_localcluster.cluster import ClusterError, LocalCluster, log
from dockyard_localcluster.demo import ensure_demo
from dockyard_localcluster.settings import repo_root

FACADE_HOST = "127.0.0.1"


def _wait_http_ok(url: str, proc: subprocess.Popen[bytes], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ClusterError(f"{url}: the process exited with {proc.returncode} (see the log)")
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise ClusterError(f"{url} did not answer 200 within {timeout:.0f}s")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def run(cluster: LocalCluster) -> int:
    cluster.up()
    crds = repo_root() / "crds"
    if any(crds.glob("*.yaml")):
        cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(crds))
        cluster.kubectl(
            "wait", "--for=condition=Established", "crd", "-l", "app.kubernetes.io/part-of=dockyard", "--timeout=60s"
        )
    state = cluster.settings.state_dir
    env = dict(os.environ, KUBECONFIG=str(cluster.settings.kubeconfig))
    facade_port = int(os.environ.get("DOCKYARD_API_PORT", "8080"))
    operator_port = int(os.environ.get("DOCKYARD_OPERATOR_HEALTH_PORT", "8081"))
    env["DOCKYARD_API_HOST"] = FACADE_HOST
    env["DOCKYARD_API_PORT"] = str(facade_port)
    env["DOCKYARD_OPERATOR_HEALTH_PORT"] = str(operator_port)
    # one model store for both: the facade writes upload chunks, the operator turns them into models
    store = os.environ.get("DOCKYARD_API_MODEL_STORE") or os.environ.get("DOCKYARD_OPERATOR_MODEL_STORE")
    model_store = Path(store) if store else state / "model-store"
    model_store.mkdir(parents=True, exist_ok=True)
    env["DOCKYARD_API_MODEL_STORE"] = env["DOCKYARD_OPERATOR_MODEL_STORE"] = str(model_store)
    env.setdefault("DOCKYARD_OPERATOR_PUBLIC_URL", f"http://{FACADE_HOST}:{facade_port}")
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(name: str, args: list[str]) -> subprocess.Popen[bytes]:
        with Path(state / f"{name}.log").open("ab") as logfile:  # the child keeps its own descriptor
            proc = subprocess.Popen([sys.executable, *args], env=env, stdout=logfile, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    try:
        operator = spawn("operator", ["-m", "dockyard_operator", "--standalone"])
        facade = spawn("facade", ["-m", "dockyard_api"])
        _wait_http_ok(f"http://127.0.0.1:{operator_port}/readyz", operator, 60)
        _wait_http_ok(f"http://{FACADE_HOST}:{facade_port}/readyz", facade, 60)
        with api_client(str(cluster.settings.kubeconfig)) as api:
            demo = ensure_demo(api, state, f"http://{FACADE_HOST}:{facade_port}")
        key_line = (
            f"  demo API key:        {demo.new_key}\n"
            f"                       (shown once; also in {demo.key_file}, mode 0600)\n"
            if demo.new_key
            else f"  demo API key:        in {demo.key_file} (still valid)\n"
        )
        print(
            "\nDockyard is running on the local control plane.\n"
            f"  facade (public API): http://{FACADE_HOST}:{facade_port}   (OpenAPI: /docs)\n"
            f"  operator health:     http://127.0.0.1:{operator_port}/readyz\n"
            f"  demo app:            App {demo.namespace}/demo, environment {demo.environment}\n"
            f"  demo base URL:       {demo.base_url}   (SPEC's {{base_url}}: public API under /api/public)\n"
            f"{key_line}"
            f"  kubectl:             export KUBECONFIG={cluster.settings.kubeconfig}\n"
            f"  model store:         {model_store}\n"
            f"  logs:                {state}/operator.log, {state}/facade.log\n"
            "Press Ctrl-C to stop Dockyard (the cluster keeps running; `make cluster-down` removes it).",
            flush=True,
        )
        signal.signal(signal.SIGTERM, _interrupt)
        while all(p.poll() is None for p in procs):
            time.sleep(1)
        log("a Dockyard process exited; stopping")
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.terminate()
        for proc in procs:
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                proc.kill()
