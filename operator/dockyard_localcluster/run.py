"""``make run``: Dockyard (operator + facade) on the local control plane, in the foreground."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from dockyard_core.kubeconfig import api_client
from dockyard_localcluster.cluster import ClusterError, LocalCluster, log
from dockyard_localcluster.consoleuser import ensure_console_user
from dockyard_localcluster.demo import ensure_demo, ensure_demo_model
from dockyard_localcluster.settings import repo_root

FACADE_HOST = "127.0.0.1"


def _wait_http_ok(url: str, child: Child, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            raise ClusterError(
                f"the {child.name} exited with code {child.proc.returncode} before it was ready; "
                f"see its log: {child.log}"
            )
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise ClusterError(f"the {child.name} did not answer 200 at {url} within {timeout:.0f}s; see its log: {child.log}")


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@dataclass
class Child:
    """A Dockyard process of ``make run`` and the file its output goes to."""

    name: str
    proc: subprocess.Popen[bytes]
    log: Path


def spawn(name: str, args: list[str], env: dict[str, str], log: Path) -> Child:
    """Start ``python <args>`` in its own process group: a Ctrl-C in the terminal reaches only the
    supervisor, which stops the children in order (a child interrupted by the terminal would look like
    a crash)."""
    with log.open("ab") as logfile:  # the child keeps its own descriptor
        proc = subprocess.Popen(
            [sys.executable, *args], env=env, stdout=logfile, stderr=subprocess.STDOUT, process_group=0
        )
    return Child(name, proc, log)


def supervise(children: list[Child], poll: float = 0.5, on_watch: Callable[[], None] | None = None) -> int:
    """Wait until Ctrl-C / SIGTERM (exit 0, one "stopped" line) or a child exits by itself (non-zero, the
    message names the process and its log); then stop the others.

    The signals set a flag that the loop reads between polls instead of raising KeyboardInterrupt at an
    arbitrary point: an exception raised inside ``Popen.poll`` could leave its wait lock taken, and the
    later ``wait`` in :func:`stop` would then block for ever. ``on_watch`` is called once the handlers
    are in place (a caller that announces readiness does it there)."""
    requested: list[int] = []

    def request_stop(signum: int, frame: object) -> None:
        requested.append(signum)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        if on_watch is not None:
            on_watch()
        while not requested:
            for child in children:
                code = child.proc.poll()
                if code is not None:
                    log(f"the {child.name} exited unexpectedly (exit code {code}); see its log: {child.log}. Stopping.")
                    return code or 1
            time.sleep(poll)
        stop(children)
        print("Dockyard stopped (the local cluster keeps running; `make cluster-down` removes it).", flush=True)
        return 0
    finally:
        stop(children)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def stop(children: list[Child], timeout: float = 15) -> None:
    for child in children:
        if child.proc.poll() is None:
            child.proc.terminate()
    for child in children:
        try:
            child.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.proc.kill()
            child.proc.wait()


def run(cluster: LocalCluster) -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # until supervise(): SIGTERM stops the start-up like Ctrl-C
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
    # model pods answer: the engine runner starts real engines on the host (Contract 1), and the
    # facade's app runtime finds them through the pods' dockyard.dev/local-endpoint annotations
    env.setdefault("DOCKYARD_OPERATOR_LOCAL_ENGINES", "true")
    env.setdefault("DOCKYARD_OPERATOR_KNOWLEDGE_RUNS", "local")  # indexing runs as host processes (kwok runs no pod)
    env.setdefault("DOCKYARD_API_ENDPOINT_MODE", "local")
    env.setdefault("DOCKYARD_LOCAL_ENGINES_LOG_DIR", str(state / "engines"))
    tool_port = int(os.environ.get("DOCKYARD_DEMO_TOOL_PORT", "18090"))
    children: list[Child] = []
    try:
        children.append(spawn("operator", ["-m", "dockyard_operator", "--standalone"], env, state / "operator.log"))
        children.append(spawn("facade", ["-m", "dockyard_api"], env, state / "facade.log"))
        children.append(spawn("engine runner", ["-m", "dockyard_localcluster", "engines"], env, state / "engines.log"))
        children.append(
            spawn(
                "demo tool server",
                ["-m", "dockyard_localcluster", "toolserver", "--port", str(tool_port)],
                env,
                state / "toolserver.log",
            )
        )
        operator, facade, _, tool = children
        _wait_http_ok(f"http://127.0.0.1:{operator_port}/readyz", operator, 60)
        _wait_http_ok(f"http://{FACADE_HOST}:{facade_port}/readyz", facade, 60)
        _wait_http_ok(f"http://127.0.0.1:{tool_port}/time", tool, 30)
        with api_client(str(cluster.settings.kubeconfig)) as api:
            demo = ensure_demo(api, state, f"http://{FACADE_HOST}:{facade_port}")
            model = ensure_demo_model(
                api, demo, state, f"http://{FACADE_HOST}:{facade_port}", f"http://127.0.0.1:{tool_port}/time"
            )
        console = ensure_console_user(cluster, demo.namespace)
        key_line = (
            f"  demo API key:        {demo.new_key}\n"
            f"                       (shown once; also in {demo.key_file}, mode 0600)\n"
            if demo.new_key
            else f"  demo API key:        in {demo.key_file} (still valid)\n"
        )
        banner = (
            "\nDockyard is running on the local control plane.\n"
            f"  facade (public API): http://{FACADE_HOST}:{facade_port}   (OpenAPI: /docs)\n"
            f"  console sign-in:     {console.signin_link(f'http://{FACADE_HOST}:{facade_port}')}\n"
            f"                       (as {console.username}, a dockyard-editor in {console.namespace})\n"
            f"  operator health:     http://127.0.0.1:{operator_port}/readyz\n"
            f"  demo app:            App {demo.namespace}/demo, environment {demo.environment}\n"
            f"  demo model:          ModelDeployment {demo.namespace}/{model} (tiny GGUF, llama.cpp on this host;"
            f" kubectl get pods -l dockyard.dev/model-deployment={model} -o yaml shows its local endpoint)\n"
            f"  demo tool:           clock, http://127.0.0.1:{tool_port}/time\n"
            f"  demo base URL:       {demo.base_url}   (the public API's {{base_url}}: docs/public-api.md)\n"
            f"{key_line}"
            f"  kubectl:             export KUBECONFIG={cluster.settings.kubeconfig}\n"
            f"  model store:         {model_store}\n"
            f"  logs:                {state}/operator.log, {state}/facade.log, {state}/engines.log,"
            f" {state}/engines/\n"
            "Press Ctrl-C to stop Dockyard (the cluster keeps running; `make cluster-down` removes it)."
        )
        # announced once Ctrl-C is handled by supervise(): a Ctrl-C right after the banner stops Dockyard
        # like any later one, and none between the two escapes with the children still running
        return supervise(children, on_watch=lambda: print(banner, flush=True))
    except KeyboardInterrupt:
        stop(children)
        print("Dockyard stopped before it was ready.", flush=True)
        return 0
    except BaseException:
        stop(children)
        raise
