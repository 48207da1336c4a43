"""A real Prometheus for the tests: ``prometheus`` and ``promtool`` of github.com/prometheus/prometheus at the
version pinned in ``tests/support/prometheus/go.mod`` (module v0.316.0 is Prometheus 3.16.0), built with
``go build`` on first use into ``~/.cache/dockyard/prometheus-<module version>/`` (without the web UI's
assets: the tests use its HTTP API only), and run on a free loopback port.

Building takes minutes once (the module cache and the binaries stay in ~/.cache and ~/go); CI builds it once
per runner. ``DOCKYARD_PROMETHEUS_DIR`` names a directory holding both binaries instead.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import yaml

from tests.support.gobuild import cache_home, go_build
from tests.support.runners import free_port

SOURCE = Path(__file__).resolve().parent / "prometheus"
MODULE = "github.com/prometheus/prometheus"


def version() -> str:
    """The pinned module version (go.mod's require line)."""
    found = re.search(rf"^\s*{re.escape(MODULE)} (v\S+)", (SOURCE / "go.mod").read_text(), re.MULTILINE)
    assert found, "tests/support/prometheus/go.mod requires no github.com/prometheus/prometheus"
    return found.group(1)


def binaries() -> Path:
    """The directory holding ``prometheus`` and ``promtool``, built once per pinned version."""
    given = os.environ.get("DOCKYARD_PROMETHEUS_DIR")
    if given:
        return Path(given)
    target = cache_home() / f"prometheus-{version()}"
    if not (target / "prometheus").exists() or not (target / "promtool").exists():
        go_build(
            SOURCE,
            [f"{MODULE}/cmd/prometheus", f"{MODULE}/cmd/promtool"],
            target,
            what="the Prometheus of the tests",
            goflags="-mod=readonly -buildvcs=false",
        )
    return target


def promtool(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(binaries() / "promtool"), *args], cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


@dataclass(frozen=True)
class RunningPrometheus:
    url: str
    log: Path

    def get(self, path: str, **params: str) -> dict[str, Any]:
        resp = httpx.get(self.url + path, params=params, timeout=10)
        resp.raise_for_status()
        data: dict[str, Any] = resp.json()["data"]
        return data

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts pending or firing now (``/api/v1/alerts``)."""
        found: list[dict[str, Any]] = self.get("/api/v1/alerts")["alerts"]
        return found

    def query(self, expr: str) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.get("/api/v1/query", query=expr)["result"]
        return result


@contextmanager
def run_prometheus(
    workdir: Path,
    *,
    scrape: dict[str, Sequence[str]],
    rule_files: Sequence[Path] = (),
    interval: str = "1s",
    alertmanagers: Sequence[str] = (),
    port: int | None = None,
) -> Iterator[RunningPrometheus]:
    """Prometheus on 127.0.0.1 scraping ``scrape`` (job name -> ``host:port`` targets, path /metrics) every
        ``interval``, evaluating ``rule_files`` as often, and sending alerts to ``alertmanagers`` (``host:port``);
    on ``port`` (default: a free one)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config: dict[str, Any] = {
        "global": {"scrape_interval": interval, "evaluation_interval": interval, "scrape_timeout": interval},
        "rule_files": [str(p) for p in rule_files],
        "scrape_configs": [
            {"job_name": job, "static_configs": [{"targets": list(targets)}]} for job, targets in scrape.items()
        ],
    }
    if alertmanagers:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": list(alertmanagers)}]}]}
    (workdir / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = port or free_port()
    log = workdir / "prometheus.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [
                str(binaries() / "prometheus"),
                f"--config.file={workdir / 'prometheus.yml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
                "--web.enable-lifecycle",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"Prometheus did not start: {log.read_text()[-3000:]}")
            time.sleep(0.2)
        yield RunningPrometheus(url, log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
