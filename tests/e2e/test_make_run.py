"""``make run`` (issue 19): Ctrl-C stops Dockyard with exit 0 and one "stopped" line.

In a module of its own: no other operator of the test session may run meanwhile (``make run`` starts its
own, which imports and deploys the demo model; two operators would both run that import job).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.support.cluster import E2ECluster
from tests.support.runners import free_port


@pytest.mark.timeout(600)
def test_make_run_stops_on_ctrl_c_with_exit_0_and_one_stopped_line(cluster: E2ECluster, crds: None) -> None:
    """``python -m dockyard_localcluster run`` (what ``make run`` runs), interrupted as a terminal does it."""
    env = dict(
        os.environ,
        DOCKYARD_API_PORT=str(free_port()),
        DOCKYARD_OPERATOR_HEALTH_PORT=str(free_port()),
        DOCKYARD_DEMO_TOOL_PORT=str(free_port()),
    )
    proc = subprocess.Popen([sys.executable, "-m", "dockyard_localcluster", "run"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)  # fmt: skip
    try:
        _interrupted_as_a_terminal_does(proc)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        # the demo's model deployment holds a g5.xlarge GPU of the shared test cluster: give it back
        kubectl = [cluster.kubectl, "--kubeconfig", str(cluster.kubeconfig), "-n", "default"]
        subprocess.run([*kubectl, "delete", "modeldeployments", "--all", "--wait=false"], check=False)
        subprocess.run(
            [*kubectl, "wait", "--for=delete", "pod", "-l", "dockyard.dev/model-deployment", "--timeout=120s"],
            check=False,
            capture_output=True,
        )


def _interrupted_as_a_terminal_does(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 280
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.startswith("Press Ctrl-C"):
            break
    assert any("Dockyard is running" in line for line in lines), "".join(lines)
    link = next((line.split()[-1] for line in lines if line.strip().startswith("console sign-in:")), "")
    assert "/console/signin#token=" in link, "".join(lines)  # the demo editor's token, in the URL fragment
    with urllib.request.urlopen(link.split("#")[0], timeout=10) as page:  # the console answers
        assert "Sign in to the Dockyard console" in page.read().decode()
    os.killpg(proc.pid, signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0, rest
    after = [line for line in rest.splitlines() if line.strip()]
    assert len(after) == 1, after
    assert after[0].startswith("Dockyard stopped")
