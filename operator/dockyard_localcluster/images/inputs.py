"""What some images are built from but podman does not build: llama.cpp's ``llama-server`` binary
(build-llama-server.sh, beside this package, compiles and caches it), Kubernetes' pause.c from the Go
module cache (compiled with ``gcc -static``) and CoreDNS installed once per version from the Go module
proxy; with the versions of Kubernetes, pause, CoreDNS and llama-cpp-python they are built for."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from pathlib import Path

from dockyard_localcluster.images.store import log
from dockyard_localcluster.podman import cache_root

KUBE_VERSION = "1.36.3"
PAUSE_VERSION = "3.10.2"
COREDNS_VERSION = "v1.14.2"
"""The CoreDNS that kubeadm v1.36 installs (cmd/kubeadm/app/constants: CoreDNSVersion)."""
LLAMA_CPP_PYTHON_VERSION = os.environ.get("DOCKYARD_LLAMA_CPP_PYTHON_VERSION", "0.3.36")


def llama_server_context() -> Path:
    """A directory holding only llama.cpp's ``llama-server`` binary (the ``llama-server`` build context),
    the one build-llama-server.sh compiles (idempotent: a cached binary means nothing is built)."""
    script = Path(__file__).parent.parent / "build-llama-server.sh"  # beside the images package
    proc = subprocess.run(
        ["bash", str(script)],
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "DOCKYARD_LLAMA_CPP_PYTHON_VERSION": LLAMA_CPP_PYTHON_VERSION},
    )
    directory = Path(proc.stdout.strip().splitlines()[-1])
    binary = directory / "llama-server"
    if not binary.is_file():
        raise RuntimeError(f"build-llama-server.sh made no {binary}")
    return directory


def go_env(name: str) -> str:
    return subprocess.run(["go", "env", name], check=True, capture_output=True, text=True).stdout.strip()


def pause_source() -> Path:
    path = Path(go_env("GOMODCACHE")) / f"k8s.io/kubernetes@v{KUBE_VERSION}/build/pause/linux/pause.c"
    if not path.is_file():
        log(f"go mod download k8s.io/kubernetes@v{KUBE_VERSION} (for pause.c)")
        subprocess.run(
            ["go", "mod", "download", f"k8s.io/kubernetes@v{KUBE_VERSION}"],
            check=True,
            env={**os.environ, "GOFLAGS": "-modcacherw", "GOTOOLCHAIN": "local"},
            cwd=tempfile.gettempdir(),
        )
    return path


def build_pause(source: Path, out: Path) -> None:
    subprocess.run(
        ["gcc", "-Os", "-Wall", "-Werror", "-static", "-s", f"-DVERSION=v{PAUSE_VERSION}", "-o", str(out), str(source)],
        check=True,
    )


def coredns_binary() -> Path:
    """CoreDNS built once per version from the Go module proxy, cached like build-binaries.sh's binaries."""
    directory = cache_root() / f"coredns-{COREDNS_VERSION}"
    binary = directory / "coredns"
    if binary.is_file():
        return binary
    directory.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    log(f"coredns {COREDNS_VERSION}: go install from the module proxy (CGO_ENABLED=0; minutes when cold)")
    jobs = os.environ.get("DOCKYARD_GO_JOBS") or str(os.cpu_count() or 1)
    with tempfile.TemporaryDirectory(dir=directory, prefix=".build-") as gobin:
        subprocess.run(
            [
                "nice",
                "go",
                "install",
                "-p",
                jobs,
                "-trimpath",
                "-ldflags",
                "-s -w",
                f"github.com/coredns/coredns@{COREDNS_VERSION}",
            ],
            check=True,
            cwd=tempfile.gettempdir(),
            env={**os.environ, "GOBIN": gobin, "CGO_ENABLED": "0", "GOFLAGS": "-modcacherw", "GOTOOLCHAIN": "local"},
        )
        Path(gobin, "coredns").rename(binary)
    log(f"coredns {COREDNS_VERSION}: built in {time.monotonic() - started:.0f}s")
    return binary
