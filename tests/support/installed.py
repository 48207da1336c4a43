"""Dockyard installed from its chart into a cluster whose pods really run: the in-cluster suite's switch.

``DOCKYARD_INCLUSTER`` picks the cluster (docs/real-node.md, "One switch for the e2e suite"):
  ``testbed`` (default)  the real-node test bed (one real CPU node in its own network namespace beside
                         kwok's GPU pools), brought up when it is not running and taken down at the end
                         when this session brought it up; images loaded into its containerd;
  ``kind``               the kind cluster of KUBECONFIG (name DOCKYARD_KIND_NAME, default ``dockyard``),
                         images loaded with ``kind load image-archive`` (needs Docker and kind; not
                         exercised in Dockyard's CI);
  ``existing``           the cluster KUBECONFIG names, whose nodes pull the images from
                         DOCKYARD_IMAGE_REGISTRY (pushed there beforehand, docs/install.md).
In kind and existing clusters one node must stand for a g5.xlarge (its instance-type label and an
``nvidia.com/gpu`` to give) as the test bed's real node does (docs/real-node.md).

In every mode the suite reaches the installed Dockyard only: the facade through a loopback forward (the
test bed's relay, or ``kubectl port-forward``), the cluster through the API server. Nothing of Dockyard
runs in the test process.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dockyard_localcluster import images
from dockyard_localcluster.incluster import IMAGES, Release, bed_release, facade_service, testbed_values
from dockyard_localcluster.podman import podman
from dockyard_localcluster.testbed.bed import TestBed


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@dataclass
class Installed:
    """A release of the chart and what the tests need around it."""

    release: Release
    kubectl_binary: str
    node: str | None
    """The node where the g5.xlarge model pods run (the test bed's real node); None: not checked."""
    load: Any = None
    """Loads image references into the cluster's nodes (None: the nodes pull them)."""
    upgrades: int = 0

    @property
    def url(self) -> str:
        return self.release.url

    @property
    def refs(self) -> dict[str, str]:
        return self.release.refs

    @property
    def namespace(self) -> str:
        return self.release.namespace

    @property
    def name(self) -> str:
        return self.release.release

    def kubectl(self, *args: str, check: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [self.kubectl_binary, "--kubeconfig", str(self.release.cluster.kubeconfig), *args],
            capture_output=True, text=True, input=input, check=False, timeout=300,
        )  # fmt: skip
        if check and proc.returncode != 0:
            raise AssertionError(f"kubectl {' '.join(args[:4])} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    def pods(self, component: str) -> list[dict[str, Any]]:
        """The running (not terminating) pods of one component of the release."""
        selector = f"app.kubernetes.io/instance={self.name},app.kubernetes.io/component={component}"
        out = self.kubectl("-n", self.namespace, "get", "pods", "-l", selector, "-o", "json").stdout
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return [p for p in items if not p["metadata"].get("deletionTimestamp")]

    def upgrade_to_changed_image(self) -> str:
        """``helm upgrade`` to a new Dockyard image: the built one plus a label (a new image ID, the same
        software), loaded like the others. Returns its reference."""
        self.upgrades += 1
        base = self.refs["dockyard"]
        ref = f"{base}-upgrade{self.upgrades}"
        containerfile = f"FROM {base}\nLABEL dev.dockyard.test-upgrade={self.upgrades}\n"
        podman("build", "--pull=never", "-t", ref, "-f", "-", str(Path(__file__).parent), input=containerfile.encode())
        if self.load is not None:
            self.load([ref])
        self.release.upgrade({**self.refs, "dockyard": ref})
        return ref


@contextmanager
def installed() -> Iterator[Installed]:
    mode = os.environ.get("DOCKYARD_INCLUSTER", "testbed")
    if mode == "testbed":
        yield from _testbed()
    elif mode in ("kind", "existing"):
        yield from _kubeconfig_cluster(mode)
    else:
        raise RuntimeError(f"DOCKYARD_INCLUSTER must be testbed, kind or existing, not {mode!r}")


def _testbed() -> Iterator[Installed]:
    bed = TestBed()
    started_here = not bed.is_running()
    bed.up()
    try:
        refs = bed.load_images(IMAGES)
        release = bed_release(bed, refs, free_port())
        release.install()

        def load(new_refs: list[str]) -> None:
            images.load_into_containerd("ctr", str(bed.layout.containerd_socket), new_refs)

        installed = Installed(release, str(bed.bin_dir / "kubectl"), bed.layout.node_name, load)
        try:
            yield installed
        finally:
            save_logs(installed)
            if not os.environ.get("DOCKYARD_KEEP_RELEASE"):
                release.uninstall()
    finally:
        if started_here and not os.environ.get("DOCKYARD_KEEP_TESTBED"):
            bed.down()


def save_logs(installed: Installed) -> None:
    """The release's pods' logs (operator, facade) into DOCKYARD_INCLUSTER_LOGS (default: a directory in
    the system's temp dir), for a failure to be explained after the release is gone."""
    directory = Path(os.environ.get("DOCKYARD_INCLUSTER_LOGS") or Path(tempfile.gettempdir()) / "dockyard-incluster")
    directory.mkdir(parents=True, exist_ok=True)
    for component in ("operator", "api"):
        for pod in installed.pods(component):
            name = pod["metadata"]["name"]
            out = installed.kubectl("-n", installed.namespace, "logs", name, "--tail=2000", check=False)
            (directory / f"{name}.log").write_text(out.stdout + out.stderr)
    print(f"[in-cluster] the release's pod logs: {directory}", file=sys.stderr)


# --- kind or any cluster of KUBECONFIG ----------------------------------------------------------------


@dataclass
class KubeconfigCluster:
    """incluster.Cluster for a cluster given by KUBECONFIG: ``kubectl port-forward`` for the facade,
    restarted when it ends (a rolled pod ends it)."""

    kubeconfig: Path
    kubectl_binary: str
    forwards: dict[str, tuple[threading.Event, threading.Thread]] = field(default_factory=dict)

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: str = "30s") -> str:
        cmd = [self.kubectl_binary, f"--kubeconfig={self.kubeconfig}", f"--request-timeout={timeout}", *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"kubectl {' '.join(args[:3])} failed: {proc.stderr.strip()}")
        return proc.stdout

    def forward(self, namespace: str, service: str, port: int, local_port: int = 0) -> int:
        local = local_port or free_port()
        stop = threading.Event()
        argv = [self.kubectl_binary, f"--kubeconfig={self.kubeconfig}", "-n", namespace, "port-forward",
                f"svc/{service}", f"{local}:{port}", "--address=127.0.0.1"]  # fmt: skip

        def keep() -> None:
            while not stop.is_set():
                proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                while proc.poll() is None and not stop.is_set():
                    time.sleep(0.5)
                if proc.poll() is None:
                    proc.terminate()
                    proc.wait(timeout=10)
                stop.wait(1)

        thread = threading.Thread(target=keep, daemon=True)
        thread.start()
        self.forwards[f"{namespace}/{service}:{port}"] = (stop, thread)
        return local

    def stop_forward(self, namespace: str, service: str, port: int) -> None:
        found = self.forwards.pop(f"{namespace}/{service}:{port}", None)
        if found is not None:
            found[0].set()
            found[1].join(timeout=15)


def _kubeconfig_cluster(mode: str) -> Iterator[Installed]:
    path = os.environ.get("KUBECONFIG")
    if not path:
        raise RuntimeError(f"DOCKYARD_INCLUSTER={mode} needs KUBECONFIG (the cluster to install into)")
    kubectl = shutil.which("kubectl") or "kubectl"
    cluster = KubeconfigCluster(Path(path), kubectl)
    if mode == "kind":
        refs = images.ensure_images(list(IMAGES))
        kind_name = os.environ.get("DOCKYARD_KIND_NAME", "dockyard")

        def load(new_refs: list[str]) -> None:
            for ref in new_refs:
                archive = images.archive(ref)
                subprocess.run(["kind", "load", "image-archive", str(archive), "--name", kind_name], check=True)

        load(list(refs.values()))
        sets = ["image.pullPolicy=IfNotPresent"]
    else:
        registry = os.environ.get("DOCKYARD_IMAGE_REGISTRY")
        if not registry:
            raise RuntimeError("DOCKYARD_INCLUSTER=existing needs DOCKYARD_IMAGE_REGISTRY (where the images are)")
        local = images.ensure_images(list(IMAGES))
        refs = {name: f"{registry.rstrip('/')}/{ref.removeprefix('localhost/')}" for name, ref in local.items()}
        load = None
        sets = ["image.pullPolicy=IfNotPresent"]
    sets += ["modelStore.storageClass=", "modelStore.accessMode=ReadWriteOnce"]
    release = Release(cluster, refs, free_port(), helm_binary=shutil.which("helm") or "helm",
                      values=[testbed_values()], sets=sets)  # fmt: skip
    release.install()
    installed = Installed(release, kubectl, None, load)
    try:
        yield installed
    finally:
        save_logs(installed)
        if not os.environ.get("DOCKYARD_KEEP_RELEASE"):
            release.uninstall()
        cluster.stop_forward(release.namespace, facade_service(release.release), 80)
