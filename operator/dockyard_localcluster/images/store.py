"""podman's image list, read once per run (one ``podman images`` call) and updated as images are built or
tagged, the cache directory of ``make images`` (``~/.cache/dockyard/images``: build logs, archives, the
lock) and the ``[images]`` log line every step writes to stderr."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from dockyard_localcluster.podman import cache_root, podman, podman_text


def log(message: str) -> None:
    print(f"[images] {message}", file=sys.stderr, flush=True)


def images_dir() -> Path:
    path = cache_root() / "images"
    path.mkdir(parents=True, exist_ok=True)
    return path


class Store:
    """podman's images, read once (one ``podman images`` call) and updated as images are built."""

    def __init__(self) -> None:
        self.ids: dict[str, str] = {}
        for image in json.loads(podman_text("images", "--format", "json") or "[]"):
            for name in image.get("Names") or []:
                self.ids[name] = image["Id"]

    def id_of(self, ref: str) -> str | None:
        return self.ids.get(ref)

    def refresh(self, ref: str) -> str:
        image_id = podman_text("image", "inspect", "--format", "{{.Id}}", ref)
        self.ids[ref] = image_id
        return image_id

    def tag(self, ref: str, *aliases: str) -> None:
        """Point the aliases at ref's image (skipping those already there)."""
        image_id = self.id_of(ref) or self.refresh(ref)
        stale = [alias for alias in aliases if self.ids.get(alias) != image_id]
        if stale:
            podman("tag", ref, *stale)
            for alias in stale:
                self.ids[alias] = image_id
