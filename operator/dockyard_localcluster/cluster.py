"""Bring the local control plane up and down: a kwokctl binary-runtime cluster on 127.0.0.1.

Real kube-apiserver, etcd, kube-controller-manager and kube-scheduler (built from Go modules by
``build-binaries.sh``), kwok simulating nodes and pod lifecycles through Stage objects, and fake GPU
node pools from the device catalog. Every step is idempotent: ``up()`` on a running cluster only
reconciles stages and node pools.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dockyard_localcluster.nodes import POOL_LABEL, parse_pools, pool_nodes
from dockyard_localcluster.settings import LocalClusterSettings
from dockyard_localcluster.stages import all_stages

POD_CIDR = "10.64.0.0/12"
SERVICE_CIDR = "10.96.0.0/16"
PORT_OPTIONS = (
    "etcdPeerPort",
    "etcdPort",
    "kubeApiserverPort",
    "kwokControllerPort",
    "kubeControllerManagerPort",
    "kubeSchedulerPort",
)
"""kwokctl's options for the ports of the binary runtime's components."""


class ClusterError(RuntimeError):
    """The local control plane could not be built, started or configured."""


def log(message: str) -> None:
    """A progress line on stderr, never an error: a cluster is still deleted when stderr is gone (a pytest
    session interrupted by Ctrl-C is torn down with sys.stderr a closed capture file)."""
    with contextlib.suppress(OSError, ValueError):
        print(f"[dockyard-localcluster] {message}", file=sys.stderr, flush=True)


def ensure_binaries() -> Path:
    """Build (once, cached under ~/.cache/dockyard) and return the directory of the binaries."""
    script = resources.files(__package__).joinpath("build-binaries.sh")
    proc = subprocess.run(["bash", str(script)], stdout=subprocess.PIPE, text=True, check=False)
    if proc.returncode != 0:
        raise ClusterError(f"building the control-plane binaries failed (exit {proc.returncode})")
    return Path(proc.stdout.strip().splitlines()[-1])


def ephemeral_ports(count: int) -> list[int]:
    """``count`` distinct free ports on 127.0.0.1, from the kernel's ephemeral range (all bound at once)."""
    socks = [socket.socket() for _ in range(count)]
    try:
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]
    finally:
        for sock in socks:
            sock.close()


class LocalCluster:
    """One kwokctl cluster named by the settings, with its own kubeconfig and work dir."""

    def __init__(self, settings: LocalClusterSettings | None = None) -> None:
        self.settings = settings or LocalClusterSettings()
        self._bin: Path | None = None

    # -- plumbing --------------------------------------------------------------------------------
    @property
    def bin_dir(self) -> Path:
        if self._bin is None:
            self._bin = ensure_binaries()
        return self._bin

    @property
    def stage_dir(self) -> Path:
        return self.bin_dir.parent / "kwok-stages"

    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["KWOK_WORKDIR"] = str(self.settings.kwok_workdir)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        env["KUBECONFIG"] = str(self.settings.kubeconfig)
        return env

    def run(
        self, args: Sequence[str], *, input: str | None = None, check: bool = True, quiet: bool = False
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(list(args), input=input, env=self.env(), text=True, capture_output=True, check=False)
        if check and proc.returncode != 0:
            raise ClusterError(f"{' '.join(args[:4])} ... failed: {proc.stderr.strip() or proc.stdout.strip()}")
        if not quiet and proc.stderr.strip() and proc.returncode != 0:
            log(proc.stderr.strip())
        return proc

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> str:
        cmd = [str(self.bin_dir / "kubectl"), "--kubeconfig", str(self.settings.kubeconfig), *args]
        return self.run(cmd, input=input, check=check).stdout

    def kwokctl(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return self.run([str(self.bin_dir / "kwokctl"), "--name", self.settings.cluster_name, *args], check=check)

    # -- state -----------------------------------------------------------------------------------
    def exists(self) -> bool:
        out = self.run([str(self.bin_dir / "kwokctl"), "get", "clusters"], check=False).stdout
        return self.settings.cluster_name in out.split()

    def is_ready(self) -> bool:
        if not self.settings.kubeconfig.is_file():
            return False
        proc = self.run(
            [
                str(self.bin_dir / "kubectl"),
                "--kubeconfig",
                str(self.settings.kubeconfig),
                "--request-timeout=5s",
                "get",
                "--raw",
                "/readyz",
            ],
            check=False,
            quiet=True,
        )
        return proc.returncode == 0 and proc.stdout.strip() == "ok"

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not self.is_ready():
            if time.monotonic() > deadline:
                raise ClusterError(f"the API server did not become ready within {timeout:.0f}s")
            time.sleep(0.5)

    # -- lifecycle -------------------------------------------------------------------------------
    def component_ports(self) -> dict[str, int]:
        """The ports a new cluster's components get: kwokctl's own choice (none given here) unless
        ``ephemeral_ports``; ``apiserver_port`` when set."""
        ports: dict[str, int] = {}
        if self.settings.ephemeral_ports:
            ports = dict(zip(PORT_OPTIONS, ephemeral_ports(len(PORT_OPTIONS)), strict=True))
        if self.settings.apiserver_port:
            ports["kubeApiserverPort"] = self.settings.apiserver_port
        return ports

    def kwokctl_config(self, ports: Mapping[str, int] | None = None) -> dict[str, Any]:
        b = self.bin_dir
        options: dict[str, Any] = {
            "runtime": "binary",
            "bindAddress": "127.0.0.1",
            "kubeApiserverBinary": str(b / "kube-apiserver"),
            "kubeControllerManagerBinary": str(b / "kube-controller-manager"),
            "kubeSchedulerBinary": str(b / "kube-scheduler"),
            "kwokControllerBinary": str(b / "kwok"),
            "etcdBinary": str(b / "etcd"),
            "kubectlBinary": str(b / "kubectl"),
            "enableCRDs": ["Stage"],
        }
        options.update(self.component_ports() if ports is None else ports)
        return {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokctlConfiguration",
            "options": options,
            "componentsPatches": [
                {"name": "etcd", "extraArgs": [{"key": "unsafe-no-fsync", "value": "true"}]},
                # Room for benchmarks: 1,000+ nodes and thousands of pods and Services created at once
                # (the defaults give 256 Service IPs and 256 pod IPs).
                {"name": "kwok-controller", "extraArgs": [{"key": "cidr", "value": POD_CIDR}]},
                {
                    "name": "kube-apiserver",
                    "extraArgs": [
                        {"key": "service-cluster-ip-range", "value": SERVICE_CIDR},
                        {"key": "max-requests-inflight", "value": "800"},
                        {"key": "max-mutating-requests-inflight", "value": "400"},
                    ],
                },
                {
                    "name": "kube-controller-manager",
                    "extraArgs": [{"key": "kube-api-qps", "value": "500"}, {"key": "kube-api-burst", "value": "1000"}],
                },
                {
                    "name": "kube-scheduler",
                    "extraArgs": [{"key": "kube-api-qps", "value": "500"}, {"key": "kube-api-burst", "value": "1000"}],
                },
            ],
        }

    def create(self) -> None:
        s = self.settings
        s.state_dir.mkdir(parents=True, exist_ok=True)
        config = s.state_dir / "kwokctl.yaml"
        config.write_text(yaml.safe_dump(self.kwokctl_config(), sort_keys=False))
        log(f"creating cluster {s.cluster_name!r} (kwokctl, binary runtime, 127.0.0.1)")
        self.kwokctl(
            "create",
            "cluster",
            "--config",
            str(config),
            "--kubeconfig",
            str(s.kubeconfig),
            "--wait",
            f"{s.wait_seconds}s",
        )

    def up(self) -> None:
        """Start (or reuse) the cluster, then reconcile stages and GPU node pools. Idempotent."""
        started = time.monotonic()
        if self.is_ready():
            log("cluster already running")
        elif self.exists():
            log("cluster exists but is not serving: starting it")
            if self.kwokctl("start", "cluster", check=False).returncode != 0:
                log("start failed: re-creating the cluster")
                self.down()
                self.create()
        else:
            self.create()
        self.wait_ready(self.settings.wait_seconds)
        self.apply_stages()
        self.ensure_nodes()
        log(f"cluster ready in {time.monotonic() - started:.1f}s; KUBECONFIG={self.settings.kubeconfig}")

    def down(self) -> None:
        if self.exists():
            log(f"deleting cluster {self.settings.cluster_name!r}")
            self.kwokctl("delete", "cluster")
        shutil.rmtree(self.settings.kwok_workdir / "clusters" / self.settings.cluster_name, ignore_errors=True)
        self.settings.kubeconfig.unlink(missing_ok=True)

    # -- contents --------------------------------------------------------------------------------
    def provisioner(self) -> Provisioner:
        return Provisioner(self, self.settings.kubeconfig)

    def apply_stages(self) -> None:
        self.provisioner().apply_stages(self.stage_dir, self.settings.pod_ready_delay_ms)

    def ensure_nodes(self) -> None:
        pools = parse_pools(self.settings.node_pools, self.settings.nodes_per_type)
        self.provisioner().ensure_nodes(pools, self.settings.cpu_nodes, self.settings.wait_seconds)


class Provisioner:
    """Puts kwok stages and fake GPU node pools into a cluster that runs kwok (local or kind)."""

    def __init__(self, tools: LocalCluster, kubeconfig: Path) -> None:
        self.tools = tools
        self.kubeconfig = kubeconfig

    def kubectl(self, *args: str, input: str | None = None) -> str:
        cmd = [str(self.tools.bin_dir / "kubectl"), "--kubeconfig", str(self.kubeconfig), *args]
        return self.tools.run(cmd, input=input).stdout

    def apply(self, objects: Sequence[dict[str, Any]]) -> None:
        if objects:
            doc = yaml.safe_dump_all(objects, sort_keys=False)
            self.kubectl(
                "apply",
                "--server-side",
                "--force-conflicts",
                "--field-manager=dockyard-localcluster",
                "-f",
                "-",
                input=doc,
            )

    def apply_stages(self, stage_dir: Path, pod_ready_delay_ms: int = 0) -> None:
        self.kubectl("wait", "--for=condition=Established", "crd/stages.kwok.x-k8s.io", "--timeout=60s")
        self.apply(all_stages(stage_dir, pod_ready_delay_ms))

    def ensure_nodes(self, pools: Mapping[str, int], cpu_nodes: int, wait_seconds: int) -> None:
        wanted = pool_nodes(pools, cpu_nodes)
        names = {n["metadata"]["name"] for n in wanted}
        existing = json.loads(self.kubectl("get", "nodes", "-l", POOL_LABEL, "-o", "json"))["items"]
        have = {n["metadata"]["name"] for n in existing}
        extra = sorted(have - names)
        if extra:
            log(f"removing {len(extra)} nodes no longer in the pools")
            self.kubectl("delete", "node", "--wait=false", *extra)
        missing = [n for n in wanted if n["metadata"]["name"] not in have]
        for start in range(0, len(missing), 250):
            # Node creation accepts status (capacity/allocatable); kwok's node-initialize keeps it.
            self.kubectl("create", "-f", "-", input=yaml.safe_dump_all(missing[start : start + 250]))
        if missing:
            gpu_pools = sum(1 for v in pools.values() if v)
            log(f"created {len(missing)} fake nodes; {len(wanted)} in {gpu_pools} GPU pools + {cpu_nodes} CPU nodes")
        if wanted:
            self.wait_nodes_ready(len(wanted), wait_seconds)

    def wait_nodes_ready(self, count: int, wait_seconds: int) -> None:
        """One list per poll (``kubectl wait`` watches 1,000 nodes one after another)."""
        deadline = time.monotonic() + wait_seconds
        template = '{range .items[*]}{.status.conditions[?(@.type=="Ready")].status}{"\\n"}{end}'
        while True:
            out = self.kubectl("get", "nodes", "-l", POOL_LABEL, "-o", f"jsonpath={template}")
            ready = out.split().count("True")
            if ready >= count:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"only {ready} of {count} nodes became Ready within {wait_seconds}s")
            time.sleep(0.5)
