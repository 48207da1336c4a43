"""Where a ModelDeployment answers (Contract 1): the base URL of its OpenAI-compatible API.

- ``cluster`` (default): ``ModelDeployment.status.endpoint``, the Service's in-cluster URL that the
  operator writes once the workload exists.
- ``local`` (the local control plane, ``make run``): kwok pods run nothing, so a local runner starts the
  real engine on the host for each model pod and, once the engine is healthy, annotates the pod with
  ``dockyard.dev/local-endpoint: http://127.0.0.1:<port>``; only then does the pod become Ready. The
  resolver picks among the Ready pods that carry the annotation, round robin.

Requests go to ``<base>/v1/chat/completions``.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any, Literal

from dockyard_api.cache import Informer
from dockyard_api.runtime.errors import ModelUnavailableError

MODEL_DEPLOYMENT_LABEL = "dockyard.dev/model-deployment"
"""Label the operator puts on a ModelDeployment's pods (Contract 1)."""
LOCAL_ENDPOINT_ANNOTATION = "dockyard.dev/local-endpoint"
"""Pod annotation of the local engine runner: the engine's base URL on the host, no trailing slash."""

EndpointMode = Literal["cluster", "local"]


def pod_ready(pod: dict[str, Any]) -> bool:
    if (pod.get("metadata") or {}).get("deletionTimestamp"):
        return False
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def local_endpoints(pods: list[dict[str, Any]]) -> list[str]:
    """The local engines' base URLs among ``pods``: Ready pods with the annotation, in a stable order."""
    found = []
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        url = ((pod.get("metadata") or {}).get("annotations") or {}).get(LOCAL_ENDPOINT_ANNOTATION)
        if url and pod_ready(pod):
            found.append(url.rstrip("/"))
    return found


class EndpointResolver:
    """The base URL of a ModelDeployment's OpenAI-compatible API, in ``cluster`` or ``local`` mode."""

    def __init__(self, mode: EndpointMode, deployments: Informer, pods: Informer | None = None) -> None:
        if mode == "local" and pods is None:
            raise ValueError("local mode needs a pod informer")
        self.mode = mode
        self.deployments = deployments
        self.pods = pods
        self._turns: dict[tuple[str, str], Iterator[int]] = {}

    async def base_url(self, namespace: str, name: str) -> str:
        if self.mode == "local":
            return await self._local(namespace, name)
        mdep = await self.deployments.get(namespace, name)
        if mdep is None:
            raise ModelUnavailableError(
                f"ModelDeployment {name!r} does not exist in namespace {namespace!r}",
                {"modelDeployment": name},
            )
        endpoint = (mdep.get("status") or {}).get("endpoint")
        if not endpoint:
            job = (mdep.get("status") or {}).get("job") or {}
            state = f" (dock status {job['status']}: {job.get('message', '')})" if job.get("status") else ""
            raise ModelUnavailableError(
                f"ModelDeployment {name!r} has no endpoint yet{state}", {"modelDeployment": name, "job": job or None}
            )
        return str(endpoint).rstrip("/")

    async def _local(self, namespace: str, name: str) -> str:
        assert self.pods is not None
        urls = local_endpoints(await self.pods.indexed(namespace, name))
        if not urls:
            raise ModelUnavailableError(f"no local engine serves {name}", {"modelDeployment": name, "mode": "local"})
        counter = self._turns.setdefault((namespace, name), itertools.count())
        return urls[next(counter) % len(urls)]
