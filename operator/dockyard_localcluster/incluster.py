"""Dockyard installed from its Helm chart into the real-node test bed (docs/real-node.md).

Used by ``make run-incluster`` (:func:`run`) and by the in-cluster tests (tests/incluster). The release
runs the images ``make images`` built (loaded into the node's containerd, ``imagePullPolicy: Never``),
its model store is a hostPath PersistentVolume on the real node (the test bed has no provisioner), and
the facade is reached through a loopback relay whose URL is the release's ``publicUrl``, so every URL
Dockyard generates (web client, widget, cURL script) works from this machine's browser and shell.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from dockyard_localcluster.settings import repo_root
from dockyard_localcluster.testbed.bed import TestBed, log

RELEASE = "dockyard"
NAMESPACE = "dockyard-system"
IMAGES = ("dockyard", "llama-cpp", "ct2-server", "tool")
"""The images a release in the test bed runs: Dockyard itself, its two CPU engines (llama.cpp's
llama-server, Dockyard's CTranslate2 server) and the test tool."""
STORAGE_CLASS = "dockyard-testbed"
RUN_AS = 10001
"""The chart's user and group (podSecurityContext): the model-store directory belongs to them."""


def chart() -> Path:
    return repo_root() / "charts" / "dockyard"


def testbed_values() -> Path:
    return chart() / "ci" / "testbed-values.yaml"


def facade_service(release: str) -> str:
    """The facade Service's name (the chart's ``dockyard.facade.fullname`` for a release whose name
    contains "dockyard"; other names get "<release>-dockyard-api")."""
    return f"{release}-api" if "dockyard" in release else f"{release}-dockyard-api"


def storage_objects(release: str, node: str, path: Path, size: str = "2Gi") -> list[dict[str, Any]]:
    """A StorageClass without provisioner and one hostPath PersistentVolume on ``node`` for the release's
    model-store claim (the chart's ``modelStore.storageClass``)."""
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": STORAGE_CLASS, "labels": {"app.kubernetes.io/part-of": "dockyard-testbed"}},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Retain",
    }
    volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"{release}-model-store", "labels": {"app.kubernetes.io/part-of": "dockyard-testbed"}},
        "spec": {
            "capacity": {"storage": size},
            "accessModes": ["ReadWriteOnce", "ReadWriteMany"],
            "storageClassName": STORAGE_CLASS,
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(path), "type": "Directory"},
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}
                    ]
                }
            },
        },
    }
    return [storage_class, volume]


def helm_args(refs: Mapping[str, str], public_url: str, values: Sequence[Path], sets: Sequence[str] = ()) -> list[str]:
    """``--values``/``--set`` arguments of a release running ``refs`` (logical image name -> reference)."""
    repository, _, tag = refs["dockyard"].rpartition(":")
    args: list[str] = []
    for path in values:
        args += ["--values", str(path)]
    for value in (
        f"image.repository={repository}",
        f"image.tag={tag}",
        f"runtimeCatalog.runtimes.llama-cpp.image={refs['llama-cpp']}",
        f"runtimeCatalog.runtimes.ctranslate2.image={refs['ct2-server']}",
        f"publicUrl={public_url}",
        *sets,
    ):
        args += ["--set", value]
    return args


class Cluster(Protocol):
    """What a release needs of its cluster: the test bed (:class:`TestBed`) has it, and so has the
    in-cluster suite's adapter for kind or any KUBECONFIG (tests/support/installed.py)."""

    @property
    def kubeconfig(self) -> Path: ...

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: str = "30s") -> str: ...

    def forward(self, namespace: str, service: str, port: int, local_port: int = 0) -> int: ...

    def stop_forward(self, namespace: str, service: str, port: int) -> None: ...


@dataclass
class Release:
    """One release of the chart, its facade on ``127.0.0.1:port`` (a forward of its Service)."""

    cluster: Cluster
    refs: dict[str, str]
    port: int
    helm_binary: str
    values: list[Path] = field(default_factory=list)
    sets: list[str] = field(default_factory=list)
    storage: Callable[[], None] | None = None
    """Makes the model store's volume ready before an install (the test bed has no provisioner)."""
    release: str = RELEASE
    namespace: str = NAMESPACE

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def helm(self, *args: str, check: bool = True, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        cmd = [self.helm_binary, "--kubeconfig", str(self.cluster.kubeconfig), *args]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout)
        if check and proc.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args[:3])} failed ({proc.returncode}):\n{proc.stderr}{proc.stdout}")
        return proc

    def install(self, timeout: float = 480) -> None:
        """``helm upgrade --install`` and wait until both components are rolled out and the facade answers
        /readyz through the forward."""
        if self.storage is not None:
            self.storage()
        args = helm_args(self.refs, self.url, self.values, self.sets)
        self.helm("upgrade", "--install", self.release, str(chart()), "--namespace", self.namespace,
                  "--create-namespace", *args)  # fmt: skip
        # a forward left by an earlier release (kept with DOCKYARD_KEEP_RELEASE) names another port
        self.cluster.stop_forward(self.namespace, facade_service(self.release), 80)
        self.cluster.forward(self.namespace, facade_service(self.release), 80, self.port)
        self.wait_rolled_out(timeout)

    def upgrade(self, refs: dict[str, str], timeout: float = 480) -> None:
        """``helm upgrade`` to other images (the release's other values kept)."""
        self.refs = refs
        args = helm_args(refs, self.url, self.values, self.sets)
        self.helm("upgrade", self.release, str(chart()), "--namespace", self.namespace, *args)
        self.wait_rolled_out(timeout)

    @staticmethod
    def deployment_name(release: str, component: str) -> str:
        """The chart's Deployment of ``component`` (operator, api) in ``release``."""
        base = release if "dockyard" in release else f"{release}-dockyard"
        return f"{base}-{component}"

    def deployment(self, component: str) -> str:
        return self.deployment_name(self.release, component)

    def wait_rolled_out(self, timeout: float) -> None:
        for component in ("operator", "api"):
            self.cluster.kubectl(
                "-n", self.namespace, "rollout", "status", f"deployment/{self.deployment(component)}",
                f"--timeout={int(timeout)}s", timeout="0",
            )  # fmt: skip
        self.wait_ready(timeout)

    def wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        last: object = None
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/readyz", timeout=3) as resp:
                    if resp.status == 200:
                        return
                    last = resp.status
            except OSError as exc:
                last = exc
            time.sleep(1)
        raise RuntimeError(f"the facade at {self.url} is not ready after {timeout:.0f}s (last: {last!r})")

    def uninstall(self) -> None:
        self.helm("uninstall", self.release, "--namespace", self.namespace, "--wait", "--timeout", "180s", check=False)
        self.cluster.stop_forward(self.namespace, facade_service(self.release), 80)


def bed_storage(bed: TestBed, release: str = RELEASE) -> Callable[[], None]:
    """A fresh hostPath model-store volume on the real node, owned by the chart's user, unless the
    release's claim is bound to it already (an upgrade)."""

    def prepare() -> None:
        name = f"{release}-model-store"
        directory = bed.layout.work / "volumes" / name
        found = bed.kubectl("get", "pv", name, "-o", "json", "--ignore-not-found")
        if found.strip():
            if json.loads(found).get("status", {}).get("phase") in ("Bound", "Available"):
                return
            bed.kubectl("delete", "pv", name, "--wait=true")  # Released: its claim is gone
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)
        os.chown(directory, RUN_AS, RUN_AS)
        directory.chmod(0o770)
        bed.apply(storage_objects(release, bed.layout.node_name, directory))

    return prepare


def bed_release(bed: TestBed, refs: dict[str, str], port: int, release: str = RELEASE) -> Release:
    """A release in the test bed: its values file, the device catalog that fits the real node, the
    hostPath model store."""
    return Release(
        bed,
        refs,
        port,
        helm_binary=str(bed.bin_dir / "helm"),
        values=[testbed_values(), bed.helm_values],
        storage=bed_storage(bed, release),
        release=release,
    )


def run(bed: TestBed | None = None) -> int:
    """``make run-incluster``: the test bed up, the images built and loaded, the chart installed, the
    facade on 127.0.0.1:8080 (DOCKYARD_API_PORT), the demo App with its model and tool; until Ctrl-C,
    which uninstalls the release (the test bed keeps running: ``make testbed-down`` removes it)."""
    from dockyard_core.kubeconfig import api_client
    from dockyard_localcluster.demo import ensure_demo, ensure_demo_model

    bed = bed or TestBed()
    bed.up()
    refs = bed.load_images(IMAGES)
    port = int(os.environ.get("DOCKYARD_API_PORT", "8080"))
    release = bed_release(bed, refs, port)
    log(f"installing {chart()} as {release.namespace}/{release.release}")
    release.install()
    state = repo_root() / ".dockyard" / "incluster"
    state.mkdir(parents=True, exist_ok=True)
    with api_client(str(bed.kubeconfig)) as api:
        demo = ensure_demo(api, state, release.url)
        model = ensure_demo_model(api, demo, state, release.url, tool_image=refs["tool"])
    key_line = f"  demo API key:        {demo.new_key or 'in ' + str(demo.key_file)}\n"
    print(
        "\nDockyard is running in the test bed's cluster (installed from charts/dockyard).\n"
        f"  facade (public API): {release.url}   (OpenAPI: /docs; relayed to Service "
        f"{release.namespace}/{facade_service(release.release)})\n"
        f"  pods:                kubectl -n {release.namespace} get pods -o wide\n"
        f"  demo app:            App {demo.namespace}/demo, environment {demo.environment}\n"
        f"  demo model:          ModelDeployment {demo.namespace}/{model} (llama-server in a pod on the real node)\n"
        f"  demo base URL:       {demo.base_url}\n"
        f"{key_line}"
        f"  kubectl:             export KUBECONFIG={bed.kubeconfig}\n"
        "Press Ctrl-C to uninstall Dockyard (the test bed keeps running; `make testbed-down` removes it).",
        flush=True,
    )
    stopped: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: stopped.append(signum)) for sig in
                (signal.SIGINT, signal.SIGTERM)}  # fmt: skip
    try:
        while not stopped:
            time.sleep(0.5)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    release.uninstall()
    print("Dockyard uninstalled (the test bed keeps running; `make testbed-down` removes it).", flush=True)
    return 0
