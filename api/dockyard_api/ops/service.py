"""What the probes ask: whether the Kubernetes API server answers, and its version."""

from __future__ import annotations

import asyncio

from dockyard_core.errors import NotReadyError
from dockyard_core.kubeclient import AsyncKube


async def kubernetes_version(kube: AsyncKube, timeout: float) -> str:
    """The API server's version (``GET /version``); :class:`NotReadyError` (503) when it does not answer
    within ``timeout`` seconds, or answers an error."""
    try:
        info = await asyncio.wait_for(kube.request("GET", "/version"), timeout)
    except Exception as exc:  # any failure to reach the API server means "not ready"
        raise NotReadyError("the Kubernetes API server is not reachable", details=str(exc)) from exc
    return str(info.get("gitVersion"))
