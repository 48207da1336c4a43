"""The operator's tracemalloc profile (memprofile.py): off by default, a report at exit when asked."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = """
import time
from dockyard_operator import memprofile
memprofile.start_from_env(interval=0.05)
held = [bytes(1000) for _ in range(20000)]  # about 20 MiB, allocated on this line
time.sleep(0.5)
"""


def run(env: dict[str, str]) -> None:
    subprocess.run([sys.executable, "-c", SCRIPT], env={**os.environ, **env}, check=True, timeout=60)


def test_the_report_names_the_allocating_line(tmp_path: Path) -> None:
    report = tmp_path / "top.txt"
    run({"DOCKYARD_OPERATOR_TRACEMALLOC": str(report)})
    lines = report.read_text().splitlines()
    assert lines[0].startswith("tracemalloc peak ")
    biggest = lines[2]
    assert "<string>:5" in biggest
    assert float(biggest.split()[0]) > 15


def test_off_without_the_flag(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DOCKYARD_OPERATOR_TRACEMALLOC"}
    subprocess.run([sys.executable, "-c", SCRIPT + "\nimport tracemalloc; assert not tracemalloc.is_tracing()"],
                   env=env, check=True, timeout=60)  # fmt: skip
    assert not list(tmp_path.iterdir())
