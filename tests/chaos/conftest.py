"""Fixtures of the chaos suite: the local control plane with one component stopped and started again
(kube-apiserver, etcd), the operator as a real process that can be SIGKILLed, and the figures each
scenario records (operations tried, recovered, lost) for docs/reliability.md.

A component of the local control plane is restarted the way a crash and a supervisor would do it: its
process (kwokctl's binary runtime keeps one pid file per component) is killed, and ``kwokctl start
cluster`` starts what is not running, with the same flags, data directory and port.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dockyard_localcluster.cluster import LocalCluster
from tests.support.cluster import E2ECluster
from tests.support.runners import free_port, wait_http_ok
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
FIGURES = ROOT / ".dockyard" / "chaos-figures.json"


# --- the control plane ------------------------------------------------------------------------------


class ControlPlane:
    """One component of the local control plane stopped and started again."""

    def __init__(self, target: E2ECluster) -> None:
        if target.kind != "local":
            pytest.fail("the chaos suite restarts control-plane processes: it needs DOCKYARD_E2E_CLUSTER=local")
        self.local = LocalCluster()
        self.target = target
        self.workdir = self.local.settings.kwok_workdir / "clusters" / self.local.settings.cluster_name
        self.down: set[str] = set()
        self.lock = threading.RLock()

    def pid(self, component: str) -> int:
        path = self.workdir / "pids" / f"{component}.pid"
        if not path.is_file():
            found = sorted(p.name for p in (self.workdir / "pids").glob("*"))
            pytest.fail(f"no pid file for {component} in {self.workdir / 'pids'} (found {found})")
        return int(path.read_text().strip())

    def stop(self, component: str) -> None:
        """Kill the component (SIGKILL: a crash, nothing flushed) and wait until it is gone."""
        with self.lock:  # the supervisor does not act meanwhile
            self.down.add(component)
            pid = self.pid(component)
            os.kill(pid, signal.SIGKILL)
            wait_for(lambda: not _alive(pid), timeout=30, interval=0.1, what=f"{component} (pid {pid}) to exit")
            self._forget(component)

    def _forget(self, component: str) -> None:
        """Remove the pid file of a dead component. Where nobody reaps orphans (PID 1 of some sandboxes does
        not), the killed process stays a zombie, which kwokctl's liveness check (signal 0) takes for a
        running process: it would not start it again."""
        (self.workdir / "pids" / f"{component}.pid").unlink(missing_ok=True)

    def start(self) -> None:
        """Start what is not running (kwokctl skips running components), then wait for /readyz."""
        with self.lock:
            for component in self.dead():
                self._forget(component)
            self.local.kwokctl("start", "cluster")
            self.down.clear()
        self.local.wait_ready(120)

    def ready(self) -> bool:
        return self.local.is_ready()

    def dead(self) -> list[str]:
        """Components whose process is gone (or a zombie)."""
        found = []
        for path in (self.workdir / "pids").glob("*.pid"):
            text = path.read_text().strip()
            if not text.isdigit() or not _alive(int(text)):
                found.append(path.stem)
        return found

    def supervise(self, stop: threading.Event) -> None:
        """What kubelet or systemd does for a real control plane: start again a component that exited by
        itself (kube-controller-manager and kube-scheduler exit when they cannot renew their leader lease
        during an API-server outage). Components stopped on purpose stay down until :meth:`start`."""
        while not stop.wait(2):
            try:
                with self.lock:
                    if self.down or not self.dead():
                        continue
                    self.start()
            except Exception as exc:  # the next round tries again
                sys.stderr.write(f"[chaos] restarting dead components failed: {exc}\n")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie of a process we did not start is gone for our purpose
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture(scope="session")
def control_plane(cluster: E2ECluster) -> Iterator[ControlPlane]:
    plane = ControlPlane(cluster)
    stop = threading.Event()
    supervisor = threading.Thread(target=plane.supervise, args=(stop,), name="control-plane-supervisor", daemon=True)
    supervisor.start()
    yield plane
    stop.set()
    supervisor.join(timeout=150)
    if plane.dead() or not plane.ready():  # the next suite must find a whole control plane
        plane.start()


# --- the operator as a process ----------------------------------------------------------------------


@dataclass
class OperatorProcess:
    """``python -m dockyard_operator`` as `make run` starts it: SIGKILL-able, restartable."""

    kubeconfig: Path
    log: Path
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0

    def start(self) -> None:
        port = free_port()
        env = dict(os.environ, KUBECONFIG=str(self.kubeconfig), DOCKYARD_OPERATOR_HEALTH_PORT=str(port), **self.env)
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "dockyard_operator", "--standalone"], env=env,
                                         stdout=out, stderr=subprocess.STDOUT)  # fmt: skip
        self.starts += 1
        wait_http_ok(f"http://127.0.0.1:{port}/readyz", timeout=90)

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # a clean stop removes the webhook configurations it wrote
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def operator_process(
    cluster: E2ECluster,
    crds: None,
    tmp_path: Path,
) -> Iterator[OperatorProcess]:
    proc = OperatorProcess(cluster.kubeconfig, tmp_path / "operator.log")
    try:
        yield proc
    finally:
        proc.stop()
        if proc.proc is not None and proc.proc.returncode not in (0, -signal.SIGTERM, None):
            sys.stderr.write(proc.log.read_text(errors="replace")[-4000:])


# --- figures ----------------------------------------------------------------------------------------


@dataclass
class Figures:
    """What a scenario did: operations tried, failed and retried (recovered), lost (must be 0)."""

    scenario: str
    numbers: dict[str, Any] = field(default_factory=dict)

    def add(self, key: str, value: Any) -> None:
        self.numbers[key] = value

    def count(self, key: str, by: int = 1) -> None:
        self.numbers[key] = self.numbers.get(key, 0) + by


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Figures]:
    """The scenario's figures, appended to .dockyard/chaos-figures.json and printed at the end."""
    found = Figures(request.node.name)
    started = time.monotonic()
    yield found
    found.add("seconds", round(time.monotonic() - started, 1))
    FIGURES.parent.mkdir(parents=True, exist_ok=True)
    runs: list[Any] = json.loads(FIGURES.read_text()) if FIGURES.is_file() else []
    runs.append({"scenario": found.scenario, "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), **found.numbers})
    FIGURES.write_text(json.dumps(runs[-50:], indent=1))
    print(f"\n[chaos] {found.scenario}: {json.dumps(found.numbers)}")


def core(api_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(api_client)
