"""``make run``'s supervisor: Ctrl-C stops Dockyard with exit 0 and one "stopped" line; a crash of the
operator or the facade keeps a non-zero exit and names the process and its log. Real processes: the
supervisor runs in a child process group, as in a terminal, and gets the terminal's SIGINT."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

SCRIPT = """
import os, sys
from pathlib import Path
from dockyard_localcluster.run import spawn, supervise
logs = Path(sys.argv[1])
env = dict(os.environ)
children = [
    spawn("operator", ["-c", sys.argv[2]], env, logs / "operator.log"),
    spawn("facade", ["-c", "import time; time.sleep(120)"], env, logs / "facade.log"),
]
(logs / "pids").write_text(" ".join(str(c.proc.pid) for c in children))
sys.exit(supervise(children, poll=0.1, on_watch=lambda: print("running", flush=True)))
"""
SLEEP = "import time; time.sleep(120)"


def start(tmp_path: Path, operator_code: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", SCRIPT, str(tmp_path), operator_code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the "terminal" of this test
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "running"
    return proc


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_ctrl_c_exits_0_with_one_stopped_line_and_stops_the_children(tmp_path: Path) -> None:
    proc = start(tmp_path, SLEEP)
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    time.sleep(0.3)
    os.killpg(proc.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the foreground process group
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, (out, err)
    lines = [line for line in (out + err).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert "stopped" in lines[0]
    assert "exited" not in out + err
    assert not any(alive(p) for p in pids)


def test_sigterm_stops_the_same_way(tmp_path: Path) -> None:
    proc = start(tmp_path, SLEEP)
    proc.terminate()
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, (out, err)
    assert "stopped" in out


def test_a_crash_keeps_a_non_zero_exit_and_names_the_process_and_its_log(tmp_path: Path) -> None:
    proc = start(tmp_path, "import sys, time; time.sleep(0.5); sys.exit(3)")
    pids = [int(p) for p in (tmp_path / "pids").read_text().split()]
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 3, (out, err)
    assert "the operator exited unexpectedly (exit code 3)" in err
    assert str(tmp_path / "operator.log") in err
    assert "stopped" not in out
    assert not any(alive(p) for p in pids)
