"""The static checks as part of the suite: `make static-checks` (what `make lint` runs: ruff, ruff format --check,
mypy strict, import-linter's layer contracts) runs here, so that `make test` runs them on one pytest-xdist
worker while the others run the rest of the suite. The Makefile stays the one definition of the checks."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_the_static_checks_pass() -> None:
    make = shutil.which("make")
    if make is None:
        pytest.fail("make is not installed: it runs the static checks (Makefile, target static-checks)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    proc = subprocess.run(
        [make, "--no-print-directory", "-C", str(ROOT), "static-checks"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
        check=False,
    )
    output = f"{proc.stdout[-8000:]}\n{proc.stderr[-4000:]}"
    assert proc.returncode == 0, f"make static-checks failed (exit {proc.returncode}):\n{output}"
