"""``/healthz``, ``/readyz`` and ``/metrics`` (Prometheus) for the operator, served by aiohttp inside kopf's event loop.

Liveness: the event loop answers. Readiness: kopf's startup handlers finished and the Kubernetes
API server answers ``/version``.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from aiohttp import web

from dockyard_core.kubeclient import AsyncKube
from dockyard_operator import monitoring


@dataclass
class HealthState:
    api: AsyncKube
    """The operator's one async Kubernetes client."""
    started: asyncio.Event = field(default_factory=asyncio.Event)
    runner: web.AppRunner | None = None
    timeout_seconds: float = 2.0


def build_app(state: HealthState) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def readyz(_: web.Request) -> web.Response:
        if not state.started.is_set():
            return web.json_response({"status": "starting"}, status=503)
        try:
            info = await asyncio.wait_for(state.api.request("GET", "/version"), state.timeout_seconds)
        except Exception as exc:  # any failure to reach the API server means "not ready"
            return web.json_response({"status": "api-unreachable", "error": str(exc)}, status=503)
        return web.json_response({"status": "ok", "kubernetes": info.get("gitVersion")})

    async def metrics(_: web.Request) -> web.Response:
        body, content_type = monitoring.exposition()
        return web.Response(body=body, headers={"Content-Type": content_type})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


async def start(state: HealthState, host: str, port: int) -> None:
    runner = web.AppRunner(build_app(state), access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port).start()
    state.runner = runner


async def stop(state: HealthState) -> None:
    if state.runner is not None:
        await state.runner.cleanup()
        state.runner = None
