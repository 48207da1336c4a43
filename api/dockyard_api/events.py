"""Kubernetes Events written by the facade, so that ``kubectl describe`` explains what it did."""

from __future__ import annotations

import contextlib
import uuid
from datetime import UTC, datetime
from typing import Any

from dockyard_core.errors import DockyardError
from dockyard_core.kubeclient import AsyncKube
from dockyard_core.repository import Objects


async def record_event(
    kube: AsyncKube, obj: dict[str, Any], *, reason: str, message: str, type_: str = "Normal"
) -> None:
    """Best effort: an Event that cannot be written never fails the request that caused it."""
    meta = obj["metadata"]
    stamp = datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta["namespace"]},
        "involvedObject": {
            "apiVersion": obj.get("apiVersion"),
            "kind": obj.get("kind"),
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta.get("uid"),
        },
        "reason": reason,
        "message": message[:1024],
        "type": type_,
        "source": {"component": "dockyard-facade"},
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }
    with contextlib.suppress(DockyardError, OSError):
        await Objects(kube, "events", "Event").create(meta["namespace"], event)
