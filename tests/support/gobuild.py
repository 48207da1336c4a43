"""Go programs the tests build once from pinned modules (the OIDC provider, Jaeger, Prometheus): each is built
with ``go build`` into a cache directory named after what pins it, through a temporary sibling that replaces
the target only when the build succeeded, so a build interrupted or run by two workers at once never leaves
a half-written binary behind."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path


def cache_home() -> Path:
    """Where built programs are kept (``DOCKYARD_CACHE``, default ~/.cache/dockyard)."""
    return Path(os.environ.get("DOCKYARD_CACHE", Path.home() / ".cache" / "dockyard"))


def go_build(
    source: Path, packages: list[str], target: Path, *, what: str, timeout: float = 3600, goflags: str = "-mod=readonly"
) -> None:
    """Build ``packages`` of the module in ``source`` into ``target``: a file for one package, a directory of
    binaries when ``target`` is to hold several (then it is replaced whole). ``what`` names the program in the
    error when Go is missing."""
    go = shutil.which("go")
    if go is None:
        raise AssertionError(f"{what} needs Go (go build) to be built once")
    target.parent.mkdir(parents=True, exist_ok=True)
    directory = len(packages) > 1
    partial = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    if directory:
        partial.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [go, "build", "-trimpath", "-o", f"{partial}/" if directory else str(partial), *packages],
        cwd=source, check=True, timeout=timeout, env={**os.environ, "CGO_ENABLED": "0", "GOFLAGS": goflags},
    )  # fmt: skip
    if directory and target.exists():
        shutil.rmtree(target)
    partial.replace(target)
