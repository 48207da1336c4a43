"""The pinned helm binary (built from its Go module beside kubectl) and the chart, for unit and e2e tests."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from dockyard_localcluster.cluster import LocalCluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "dockyard"


def helm_binary() -> Path:
    """``helm`` of the cached control-plane binaries (``make binaries`` builds it once)."""
    path = LocalCluster().bin_dir / "helm"
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing: run `make binaries`")
    return path


@dataclass(frozen=True)
class Helm:
    binary: Path
    kubeconfig: Path | None = None

    def run(self, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.binary), *args]
        if self.kubeconfig is not None:
            cmd += ["--kubeconfig", str(self.kubeconfig)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
        if check and proc.returncode != 0:
            raise AssertionError(f"helm {' '.join(args[:3])} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
        return proc

    def template(
        self,
        release: str = "dockyard",
        namespace: str = "dockyard-system",
        values: Sequence[str] = (),
        extra: Sequence[str] = (),
        check: bool = True,
    ) -> subprocess.CompletedProcess[str]:
        """``helm template``; ``values`` are ``--set`` expressions or ``-f``-able paths (ending ``.yaml``)."""
        args = ["template", release, str(CHART), "--namespace", namespace]
        for value in values:
            args += ["--values", value] if value.endswith(".yaml") else ["--set", value]
        return self.run(*args, *extra, check=check)

    def objects(self, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        return [doc for doc in yaml.safe_load_all(self.template(*args, **kwargs).stdout) if doc]


def find(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = find(objects, kind, name)
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {[o['metadata']['name'] for o in found]}"
    return found[0]
