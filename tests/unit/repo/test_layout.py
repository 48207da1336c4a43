"""Architecture rules of the repository layout."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_stdlib_operator_module_still_imports_from_the_repo_root() -> None:
    # `python -c` puts the working directory first on sys.path: the `operator/` folder of the repo
    # must not shadow the standard library's `operator` module.
    code = "import operator, sysconfig; print(operator.__file__); print(operator.itemgetter(1)([0, 42]))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    module_file, value = out.stdout.split()
    assert Path(module_file).parent == Path(__import__("sysconfig").get_paths()["stdlib"])
    assert value == "42"


def test_no_import_package_is_named_operator() -> None:
    assert not (ROOT / "operator" / "__init__.py").exists()
    assert not (ROOT / "api" / "operator").exists()


def test_resource_types_import_neither_kopf_nor_fastapi() -> None:
    code = (
        "import sys, dockyard_core.resources, dockyard_core.devices; "
        "print(sorted(m for m in ('kopf', 'fastapi') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
