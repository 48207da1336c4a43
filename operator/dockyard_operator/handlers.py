"""kopf handlers of the Dockyard operator. Handlers stay thin: they call pure builders."""

from __future__ import annotations

from typing import Any

import kopf

from dockyard_api.kube import api_client
from dockyard_operator import health
from dockyard_operator.settings import OperatorSettings


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config = OperatorSettings()
    settings.posting.level = 20  # INFO and above become Kubernetes Events on the objects
    settings.persistence.finalizer = "dockyard.dev/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="dockyard.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(prefix="dockyard.dev")
    memo.config = config
    memo.api = api_client(config.kubeconfig)
    memo.health = health.HealthState(api=memo.api)
    await health.start(memo.health, config.health_host, config.health_port)
    memo.health.started.set()


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    if "health" in memo:
        await health.stop(memo.health)
    if "api" in memo:
        memo.api.close()
