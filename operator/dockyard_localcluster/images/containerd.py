"""Images into containerd without a registry: an oci-archive of each image (``podman save``), cached by
image ID under ``~/.cache/dockyard/images/archives``, the manifest digest it holds, and ``ctr images
import`` of the archives a containerd does not already hold at the same digest."""

from __future__ import annotations

import json
import re
import subprocess
import tarfile
import time
from collections.abc import Iterable
from pathlib import Path

from dockyard_localcluster.images.store import images_dir, log
from dockyard_localcluster.podman import podman, podman_text


def _safe(ref: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", ref)


def archive(ref: str) -> Path:
    """An oci-archive of the image (its name inside is ``ref``), cached by image ID under
    ``~/.cache/dockyard/images/archives/<id>/``; older archives of the same reference are removed."""
    image_id = podman_text("image", "inspect", "--format", "{{.Id}}", ref)
    root = images_dir() / "archives"
    path = root / image_id[:24] / f"{_safe(ref)}.oci.tar"
    if path.is_file():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.unlink(missing_ok=True)
    podman("save", "--format", "oci-archive", "-o", str(partial), ref)
    partial.rename(path)
    # archives of the same reference, or of images podman no longer holds, are stale
    ids = podman_text("images", "--all", "--quiet", "--no-trunc").split()
    live = {image_id.removeprefix("sha256:")[:24] for image_id in ids}
    for other in root.glob("*/*.oci.tar"):
        if other != path and (other.name == path.name or other.parent.name not in live):
            other.unlink()
    for directory in root.iterdir():
        if directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
    return path


def archive_manifest_digest(path: Path) -> str:
    """The digest of the manifest an oci-archive's index.json names (what containerd records on import)."""
    with tarfile.open(path) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ValueError(f"{path} has no index.json")
        index = json.load(member)
    return str(index["manifests"][0]["digest"])


def containerd_images(ctr: Path | str, address: str, namespace: str = "k8s.io") -> dict[str, str]:
    """Reference -> digest of the images a containerd holds."""
    out = subprocess.run(
        [str(ctr), "-a", address, "-n", namespace, "images", "ls"], check=True, capture_output=True, text=True
    ).stdout
    images: dict[str, str] = {}
    for line in out.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 3 and fields[2].startswith("sha256:"):
            images[fields[0]] = fields[2]
    return images


def load_into_containerd(ctr: Path | str, address: str, refs: Iterable[str], namespace: str = "k8s.io") -> None:
    """Import the images into a containerd (``ctr images import`` of their oci-archives), skipping those it
    already has under the same reference at the same digest."""
    have = containerd_images(ctr, address, namespace)
    for ref in refs:
        started = time.monotonic()
        path = archive(ref)
        digest = archive_manifest_digest(path)
        if have.get(ref) == digest:
            log(f"containerd: {ref} already there ({digest[:19]})")
            continue
        subprocess.run(
            [str(ctr), "-a", address, "-n", namespace, "images", "import", str(path)],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        log(f"containerd: imported {ref} in {time.monotonic() - started:.1f}s")
