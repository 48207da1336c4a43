"""``python -m dockyard_localcluster images [NAME...] [--archive] [--refs]`` (``make images``): build what
is missing and print one line per image, ``name<TAB>reference`` (with ``<TAB>archive`` when asked), or
only the references."""

from __future__ import annotations

import time
from collections.abc import Sequence

from dockyard_localcluster.images.builder import ensure_images
from dockyard_localcluster.images.containerd import archive
from dockyard_localcluster.images.store import log


def main(names: Sequence[str] = (), *, archives: bool = False, refs_only: bool = False) -> int:
    """Build what is missing; print ``name<TAB>reference[<TAB>archive]`` per image (or only the references)."""
    started = time.monotonic()
    refs = ensure_images(names or None)
    for name, ref in refs.items():
        path = archive(ref) if archives else None
        if refs_only:
            print(ref)
        else:
            print(f"{name}\t{ref}" + (f"\t{path}" if path else ""))
    log(f"done in {time.monotonic() - started:.1f}s")
    return 0
