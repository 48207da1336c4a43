"""The Debian bookworm base of the Python images: ``localhost/dockyard-base:bookworm-<key>``, made by
mmdebstrap (minbase, python3 and the few packages the Dockerfile needs) from this machine's own apt
sources and imported into podman; its key is the hash of those sources, so it is built again only when
they change. The Dockerfile receives it as ``PYTHON_IMAGE``."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

from dockyard_localcluster.images.keys import content_key
from dockyard_localcluster.images.store import Store, images_dir, log
from dockyard_localcluster.podman import podman

BASE_IMAGE = "localhost/dockyard-base"
BASE_SUITE = "bookworm"
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates", "tzdata", "libgomp1")
"""python3 (3.11) and venv for the Dockerfile's /opt/dockyard; libgomp1 for llama.cpp's OpenMP threads."""
APT_SOURCES = ("/etc/apt/sources.list", "/etc/apt/sources.list.d")
APT_CONF = Path("/etc/apt/apt.conf.d/99artifact-registry")


def apt_source_files() -> list[Path]:
    files: list[Path] = []
    for entry in map(Path, APT_SOURCES):
        if entry.is_file():
            files.append(entry)
        elif entry.is_dir():
            files.extend(sorted(p for p in entry.iterdir() if p.suffix in (".list", ".sources") and p.is_file()))
    return [p for p in files if p.read_text().strip()]


def base_key() -> str:
    sources = {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in apt_source_files()}
    if APT_CONF.is_file():
        sources[str(APT_CONF)] = hashlib.sha256(APT_CONF.read_bytes()).hexdigest()
    return content_key(
        recipe="mmdebstrap --variant=minbase",
        build_args={"suite": BASE_SUITE, "include": ",".join(BASE_PACKAGES)},
        extra=sources,
    )[:12]


def ensure_base(store: Store) -> str:
    """The Debian base (``localhost/dockyard-base:bookworm-<key>``), built by mmdebstrap when missing."""
    ref = f"{BASE_IMAGE}:{BASE_SUITE}-{base_key()}"
    if store.id_of(ref):
        return ref
    if not shutil.which("mmdebstrap"):
        raise RuntimeError("mmdebstrap is required for the base image (apt-get install mmdebstrap)")
    started = time.monotonic()
    log(f"base: mmdebstrap {BASE_SUITE} ({', '.join(BASE_PACKAGES)}) from this machine's apt sources")
    with tempfile.TemporaryDirectory(dir=images_dir(), prefix=".base-") as work:
        rootfs = Path(work) / "rootfs.tar"
        command = [
            "mmdebstrap",
            "--quiet",
            "--variant=minbase",
            f"--include={','.join(BASE_PACKAGES)}",
            # no apt lists or caches in the image; docs and locales are not needed
            "--dpkgopt=path-exclude=/usr/share/doc/*",
            "--dpkgopt=path-include=/usr/share/doc/*/copyright",
            "--dpkgopt=path-exclude=/usr/share/man/*",
            "--dpkgopt=path-exclude=/usr/share/locale/*",
            "--customize-hook=rm -rf $1/var/lib/apt/lists/* $1/var/cache/apt/*",
        ]
        if APT_CONF.is_file():
            command.append(f"--aptopt={APT_CONF}")
        command += [BASE_SUITE, str(rootfs), *map(str, apt_source_files())]
        subprocess.run(["nice", *command], check=True)
        podman(
            "import",
            "--change",
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            "--change",
            "ENV LANG=C.UTF-8",
            "--change",
            'CMD ["/bin/bash"]',
            str(rootfs),
            ref,
        )
    store.refresh(ref)
    log(f"base: built {ref} in {time.monotonic() - started:.0f}s")
    return ref
