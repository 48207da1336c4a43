"""PLACEHOLDER (branch ``import``): the lead's API-key authentication replaces this whole module when
the branch is merged. It only provides the agreed interface so that the public routers can be written:

- ``EnvironmentCaller``: who calls a public endpoint (namespace, environment, app, key id);
- ``public_caller``: the dependency validating ``x-api-key`` for ``/e/{namespace}/{environment}/...``;
- ``PublicCaller = Annotated[EnvironmentCaller, Depends(public_caller)]``.

This placeholder accepts ANY non-empty key (401 without one). It must not ship.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Header, Path

from dockyard_api.errors import DockyardError


class Unauthorized(DockyardError):
    status_code = 401
    code = "unauthorized"


@dataclass(frozen=True)
class EnvironmentCaller:
    namespace: str
    environment: str
    app: str
    key_id: str


async def public_caller(
    namespace: Annotated[str, Path(description="namespace of the environment")],
    environment: Annotated[str, Path(description="name of the environment")],
    x_api_key: Annotated[str | None, Header(description="an API key of the environment")] = None,
) -> EnvironmentCaller:
    if not x_api_key:
        raise Unauthorized("the x-api-key header is missing")
    return EnvironmentCaller(namespace=namespace, environment=environment, app="", key_id="placeholder")


PublicCaller = Annotated[EnvironmentCaller, Depends(public_caller)]
