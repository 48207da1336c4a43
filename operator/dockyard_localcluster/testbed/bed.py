"""The test bed: a real node beside kwok's GPU pools, all inside one network namespace.

:class:`TestBed` brings up etcd, kube-apiserver, kube-controller-manager, kube-scheduler, containerd,
kubelet, kube-proxy and kwok in the namespace ``dockyard-<name>`` (docs/real-node.md), CoreDNS as a
Deployment, and reaches the API server from the host through a loopback relay only.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from dockyard_core.devices import GPU_RESOURCE
from dockyard_localcluster import images
from dockyard_localcluster.cluster import LocalCluster, Provisioner, ensure_binaries
from dockyard_localcluster.podman import cache_root
from dockyard_localcluster.stages import all_stages
from dockyard_localcluster.testbed import addons, config, host, pki, relay
from dockyard_localcluster.testbed.config import APISERVER_PORT, Layout

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
NODE = ("containerd", "kubelet", "kube-proxy", "kwok")
STOP_ORDER = ("kwok", "kube-proxy", "kubelet", "containerd", "kube-scheduler", "kube-controller-manager")
IMAGES = ("pause", "coredns")


class TestBedError(RuntimeError):
    """The test bed could not be brought up, reached or torn down."""


def log(message: str) -> None:
    print(f"[dockyard-testbed] {message}", file=sys.stderr, flush=True)


class TestBedSettings(BaseSettings):
    """How the test bed is named and shaped (``DOCKYARD_TESTBED_*``)."""

    model_config = SettingsConfigDict(env_prefix="DOCKYARD_TESTBED_", extra="ignore")

    name: str = Field(default="tb", pattern=r"^[a-z0-9]{1,8}$", description="netns dockyard-<name>")
    work_dir: Path | None = Field(default=None, description="state (default ~/.cache/dockyard/testbed/<name>)")
    api_port: int = Field(default=0, ge=0, le=65535, description="loopback port of the API relay (0: any)")
    nodes_per_type: int = Field(default=1, ge=0, description="kwok nodes per device type (not g5.xlarge)")
    wait_seconds: int = Field(default=240, ge=10)


class TestBed:
    """One test bed; every method is safe to call again (``up`` reuses a running test bed)."""

    __test__ = False  # not a pytest class

    def __init__(self, settings: TestBedSettings | None = None) -> None:
        self.settings = settings or TestBedSettings()
        work = self.settings.work_dir or cache_root() / "testbed" / self.settings.name
        self.layout = Layout(self.settings.name, work)
        self._bin: Path | None = None

    # -- paths and clients -----------------------------------------------------------------------
    @property
    def bin_dir(self) -> Path:
        if self._bin is None:
            self._bin = ensure_binaries()
        return self._bin

    @property
    def kubeconfig(self) -> Path:
        """The host's admin kubeconfig: https://127.0.0.1:<relay port>."""
        return self.layout.kubeconfig

    @property
    def netns_kubeconfig(self) -> Path:
        """The admin kubeconfig for clients run inside the namespace (https://127.0.0.1:16443)."""
        return self.layout.component_kubeconfig("admin")

    @property
    def device_catalog(self) -> Path:
        """The device catalog file Dockyard needs here (DOCKYARD_DEVICE_CATALOG; see addons)."""
        return self.layout.work / "device-catalog.yaml"

    @property
    def last_logs(self) -> Path:
        """Where :meth:`down` moves the daemons' logs (the work dir itself is removed)."""
        return self.layout.work.with_name(f"{self.settings.name}.last-logs")

    @property
    def helm_values(self) -> Path:
        return self.layout.work / "helm-values.yaml"

    def netns_command(self, argv: Sequence[str]) -> list[str]:
        """``argv`` run inside the test bed's network namespace (``nsenter --net=...``)."""
        return host.in_netns(self.layout, argv)

    def run_in_netns(self, argv: Sequence[str], *, input: str | None = None, check: bool = True) -> str:
        proc = subprocess.run(self.netns_command(argv), input=input, capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise TestBedError(f"{' '.join(argv[:4])} ... failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def kubectl(self, *args: str, input: str | None = None, check: bool = True, timeout: str = "30s") -> str:
        """kubectl from the host, through the relay."""
        cmd = [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", f"--request-timeout={timeout}", *args]
        proc = subprocess.run(cmd, input=input, capture_output=True, text=True, check=False)
        if check and proc.returncode != 0:
            raise TestBedError(f"kubectl {' '.join(args[:3])} ... failed: {proc.stderr.strip() or proc.stdout.strip()}")
        return proc.stdout

    def apply(self, objects: Sequence[dict[str, Any]]) -> None:
        self.kubectl(
            "apply", "--server-side", "--force-conflicts", "--field-manager=dockyard-testbed", "-f", "-",
            input=yaml.safe_dump_all(list(objects), sort_keys=False),
        )  # fmt: skip

    # -- state -----------------------------------------------------------------------------------
    def _state(self) -> dict[str, Any]:
        try:
            data: dict[str, Any] = json.loads(self.layout.state_file.read_text())
            return data
        except (OSError, ValueError):
            return {}

    def _save_state(self, **values: Any) -> None:
        state = {**self._state(), **values}
        self.layout.work.mkdir(parents=True, exist_ok=True)
        self.layout.state_file.write_text(json.dumps(state, indent=2) + "\n")

    def api_ready(self) -> bool:
        if not self.kubeconfig.is_file() or host.recorded_pid(self.layout, "relay-api") is None:
            return False
        proc = subprocess.run(
            [str(self.bin_dir / "kubectl"), f"--kubeconfig={self.kubeconfig}", "--request-timeout=5s",
             "get", "--raw", "/readyz"],
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        return proc.returncode == 0 and proc.stdout.strip() == "ok"

    def is_running(self) -> bool:
        names = ("holder", *CONTROL_PLANE, *NODE)
        return all(host.recorded_pid(self.layout, n) is not None for n in names) and self.api_ready()

    def status(self) -> dict[str, Any]:
        state = self._state()
        return {
            "name": self.settings.name,
            "netns": self.layout.netns if host.netns_exists(self.layout) else None,
            "work_dir": str(self.layout.work),
            "processes": {n: host.recorded_pid(self.layout, n) for n in host.recorded_names(self.layout)},
            "api_ready": self.api_ready(),
            "api_port": state.get("api_port"),
            "kubeconfig": str(self.kubeconfig),
            "forwards": state.get("forwards", {}),
            "up_seconds": state.get("up_seconds"),
        }

    # -- relays ----------------------------------------------------------------------------------
    def _relay(self, key: str, target: list[str], port: int) -> int:
        """A loopback relay (recorded as ``relay-<key>``) into the namespace; ``target`` is its
        ``--target``/``--service`` arguments. Returns the loopback port; reused while it runs."""
        name = f"relay-{key}"
        ready = self.layout.work / "relays" / f"{key}.port"
        if host.recorded_pid(self.layout, name) is not None and ready.is_file():
            return int(ready.read_text())
        ready.parent.mkdir(parents=True, exist_ok=True)
        ready.unlink(missing_ok=True)
        # relay.py needs only the standard library: run as a script, it works whatever sys.path is
        argv = [sys.executable, relay.__file__, f"--netns={self.layout.netns_path}", f"--port={port}",
                f"--ready={ready}", *target]  # fmt: skip
        pid = host.spawn(self.layout, name, argv)
        deadline = time.monotonic() + 20
        while not ready.is_file():
            if host.recorded_pid(self.layout, name) != pid or time.monotonic() > deadline:
                host.stop(self.layout, name)
                raise TestBedError(f"relay {key} did not start; see {self.layout.logs / (name + '.log')}")
            time.sleep(0.05)
        return int(ready.read_text())

    @staticmethod
    def _forward_key(namespace: str, service: str, port: int) -> str:
        return f"svc-{namespace}-{service}-{port}"

    def forward(self, namespace: str, service: str, port: int, local_port: int = 0) -> int:
        """A loopback port on the host (``local_port``, or any free one) relayed to ``service``'s
        ClusterIP:``port``, connected from inside the namespace. The ClusterIP is asked of the API
        server per connection (cached 5 s), so the Service may be created later or re-created. Reused
        while it runs; stopped by :meth:`stop_forward` or :meth:`down`."""
        key = self._forward_key(namespace, service, port)
        args = [f"--service={namespace}/{service}:{port}", f"--api=https://127.0.0.1:{APISERVER_PORT}",
                f"--pki={self.layout.pki}"]  # fmt: skip
        local = self._relay(key, args, local_port)
        if local_port and local != local_port:
            raise TestBedError(f"{namespace}/{service}:{port} is forwarded to {local} already, not {local_port}")
        self._save_state(forwards={**self._state().get("forwards", {}), f"{namespace}/{service}:{port}": local})
        return local

    def stop_forward(self, namespace: str, service: str, port: int) -> None:
        host.stop(self.layout, f"relay-{self._forward_key(namespace, service, port)}", timeout=2)
        forwards = self._state().get("forwards", {})
        forwards.pop(f"{namespace}/{service}:{port}", None)
        self._save_state(forwards=forwards)

    # -- bring-up --------------------------------------------------------------------------------
    def _write_files(self, pause_image: str) -> None:
        lay = self.layout
        specs = pki.testbed_specs(lay.node_name, config.NODE_IP, config.KUBERNETES_SERVICE_IP)
        pki.ensure_pki(lay.pki, specs)
        ca = (lay.pki / "ca.crt").read_bytes()
        inside = f"https://127.0.0.1:{APISERVER_PORT}"
        users = {"admin": "admin", "controller-manager": "controller-manager", "scheduler": "scheduler",
                 "kubelet": "kubelet", "kube-proxy": "kube-proxy", "kwok": "kwok"}  # fmt: skip
        files: dict[Path, str] = {}
        for component, stem in users.items():
            cert, key = (lay.pki / f"{stem}.crt").read_bytes(), (lay.pki / f"{stem}.key").read_bytes()
            kc = config.kubeconfig(inside, ca, cert, key, stem)
            files[lay.component_kubeconfig(component)] = yaml.safe_dump(kc, sort_keys=False)
        files.update(config.component_files(lay, pause_image, all_stages(self.bin_dir.parent / "kwok-stages")))
        files[self.device_catalog] = yaml.safe_dump(addons.DEVICE_CATALOG_OVERRIDE, sort_keys=False)
        files[self.helm_values] = yaml.safe_dump(addons.helm_values(), sort_keys=False)
        for path, text in files.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            if not path.is_file() or path.read_text() != text:
                path.write_text(text)

    def _write_host_kubeconfig(self, port: int) -> None:
        p = self.layout.pki
        kc = config.kubeconfig(
            f"https://127.0.0.1:{port}", (p / "ca.crt").read_bytes(), (p / "admin.crt").read_bytes(),
            (p / "admin.key").read_bytes(), "admin",
        )  # fmt: skip
        self.kubeconfig.write_text(yaml.safe_dump(kc, sort_keys=False))
        self.kubeconfig.chmod(0o600)

    def _daemon(self, holder: int, name: str, argv: list[str]) -> None:
        if host.recorded_pid(self.layout, name) is None:
            env = {"PATH": f"{self.bin_dir}:{PATH}", "HOME": str(Path.home())}
            host.spawn(self.layout, name, host.in_daemon_namespaces(holder, argv), env)

    def _wait(self, what: str, check: Any, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout or self.settings.wait_seconds)
        while not check():
            if time.monotonic() > deadline:
                raise TestBedError(f"{what} within {timeout or self.settings.wait_seconds}s; logs: {self.layout.logs}")
            time.sleep(0.5)

    def load_images(self, names: Sequence[str]) -> dict[str, str]:
        """Build (cached) and import into the node's containerd the images named (images.NAMES);
        returns name -> reference. Pods use them with ``imagePullPolicy: Never`` (or IfNotPresent)."""
        refs = images.ensure_images(list(names))
        self.load_refs(list(refs.values()))
        return refs

    def load_refs(self, refs: Sequence[str]) -> None:
        """Import podman images (by reference, e.g. ``localhost/...:tag``) into the node's containerd."""
        images.load_into_containerd("ctr", str(self.layout.containerd_socket), list(refs))

    def up(self) -> None:
        """Bring the test bed up, or reuse it when it runs. Idempotent."""
        started = time.monotonic()
        if self.is_running():
            log(f"test bed {self.settings.name!r} already running")
            self._configure_node()
            return
        lay, b = self.layout, self.bin_dir
        if host.recorded_pid(lay, "holder") is None and (host.netns_exists(lay) or host.recorded_names(lay)):
            log("a stale test bed (its namespace holder is gone): tearing it down first")
            self.down()
        lay.work.mkdir(parents=True, exist_ok=True)
        refs = images.ensure_images(list(IMAGES))  # waits while another process holds the images lock
        log(f"images ready at {time.monotonic() - started:.1f}s")
        self._write_files(refs["pause"])
        host.create_netns(lay)
        holder = host.start_holder(lay)
        host.create_cgroups(lay)
        log(f"namespace {lay.netns}; starting the control plane")
        self._daemon(holder, "etcd", [str(b / "etcd"), *config.etcd_args(lay)])
        self._daemon(holder, "kube-apiserver", [str(b / "kube-apiserver"), *config.apiserver_args(lay)])
        port = self._relay("api", [f"--target=127.0.0.1:{APISERVER_PORT}"],
                           self._state().get("api_port") or self.settings.api_port)  # fmt: skip
        self._save_state(api_port=port)
        self._write_host_kubeconfig(port)
        self._wait("the API server was not ready", self.api_ready)
        log(f"API server ready at {time.monotonic() - started:.1f}s (127.0.0.1:{port} on the host)")
        cm = [str(b / "kube-controller-manager"), *config.controller_manager_args(lay)]
        self._daemon(holder, "kube-controller-manager", cm)
        self._daemon(holder, "kube-scheduler", [str(b / "kube-scheduler"), *config.scheduler_args(lay)])
        self._daemon(holder, "containerd", ["containerd", f"--config={lay.containerd / 'config.toml'}"])
        self._wait("containerd did not open its socket", lay.containerd_socket.exists, 60)
        images.load_into_containerd("ctr", str(lay.containerd_socket), list(refs.values()))
        self._daemon(holder, "kubelet", [str(b / "kubelet"), *config.kubelet_args(lay)])
        self._daemon(holder, "kube-proxy", [str(b / "kube-proxy"), *config.kube_proxy_args(lay)])
        self._daemon(holder, "kwok", [str(b / "kwok"), *config.kwok_args(lay)])
        self._wait(f"node {lay.node_name} was not Ready", self._node_ready)
        log(f"node {lay.node_name} Ready at {time.monotonic() - started:.1f}s")
        self._configure_node()
        self.apply(addons.coredns_objects(refs["coredns"], lay.node_name))
        Provisioner(LocalCluster(), self.kubeconfig).ensure_nodes(
            addons.kwok_pools(self.settings.nodes_per_type), 0, self.settings.wait_seconds
        )
        wait = f"--timeout={self.settings.wait_seconds}s"
        self.kubectl("-n", "kube-system", "rollout", "status", "deployment/coredns", wait, timeout="0")
        elapsed = round(time.monotonic() - started, 1)
        self._save_state(up_seconds=elapsed)
        log(f"test bed up in {elapsed}s; KUBECONFIG={self.kubeconfig}")

    def _node_ready(self) -> bool:
        out = self.kubectl("get", "node", self.layout.node_name, "-o",
                           'jsonpath={.status.conditions[?(@.type=="Ready")].status}', check=False)  # fmt: skip
        return out.strip() == "True"

    def _configure_node(self) -> None:
        """The real node's g5.xlarge labels and its ``nvidia.com/gpu`` capacity (re-applied: the kubelet
        zeroes extended resources when it re-registers)."""
        node = self.layout.node_name
        self.kubectl("patch", "node", node, "--type=merge", "-p", json.dumps(addons.real_node_metadata_patch()))
        self.kubectl("patch", "node", node, "--subresource=status", "--type=json", "-p",
                     json.dumps(addons.gpu_capacity_patch()))  # fmt: skip
        path = "jsonpath={.status.allocatable." + GPU_RESOURCE.replace(".", "\\.") + "}"
        self._wait(
            f"the kubelet did not advertise {GPU_RESOURCE}",
            lambda: self.kubectl("get", "node", node, "-o", path, check=False).strip() == str(addons.REAL_NODE_GPUS),
            60,
        )

    # -- teardown --------------------------------------------------------------------------------
    def down(self) -> None:
        """Stop everything, remove the namespace, cgroups, /run/containerd and the work dir (the logs go to
        :attr:`last_logs`)."""
        started = time.monotonic()
        lay = self.layout
        for name in host.recorded_names(lay):
            if name.startswith("relay-"):
                host.stop(lay, name, timeout=2)
        for name in STOP_ORDER:
            host.stop(lay, name)
        host.kill_all(host.cgroup_pids(lay))  # the pods' containers
        for name in ("kube-apiserver", "etcd"):
            host.stop(lay, name)
        problems = host.teardown(lay)
        if problems:
            raise TestBedError(f"teardown left: {'; '.join(problems)}")
        if lay.logs.is_dir():  # kept for a post-mortem, outside the work dir; replaced by the next down()
            shutil.rmtree(self.last_logs, ignore_errors=True)
            shutil.move(lay.logs, self.last_logs)
        if lay.work.exists():  # rm -rf: several times faster than shutil.rmtree on image snapshots
            subprocess.run(["rm", "-rf", "--one-file-system", "--", str(lay.work)], check=False)
            if lay.work.exists():
                raise TestBedError(f"could not remove {lay.work}")
        log(f"test bed {self.settings.name!r} down in {time.monotonic() - started:.1f}s")
