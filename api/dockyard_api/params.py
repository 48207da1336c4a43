"""The facade's path parameters, each defined once with the patterns and lengths of :mod:`dockyard_core`.

Routers take them through :mod:`dockyard_api.deps`, which re-exports them. A Kubernetes object name is a
DNS-1123 label (namespaces, App names) or subdomain (the other objects' names) exactly as the custom
resources' schemas have it; nothing here retypes a pattern core has.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Path

from dockyard_core.apikeys import KEY_ID_PATTERN
from dockyard_core.resources.v1alpha1.common import (
    DNS_LABEL_MAX_LENGTH,
    DNS_LABEL_PATTERN,
    DNS_SUBDOMAIN_MAX_LENGTH,
    DNS_SUBDOMAIN_PATTERN,
    SEMVER_PATTERN,
)

NamespaceParam = Annotated[str, Path(min_length=1, max_length=DNS_LABEL_MAX_LENGTH, pattern=DNS_LABEL_PATTERN)]
"""A namespace (a DNS label)."""
AppName = Annotated[str, Path(min_length=1, max_length=DNS_LABEL_MAX_LENGTH, pattern=DNS_LABEL_PATTERN)]
"""An App's name in the management API and the console (a DNS label)."""
EnvName = Annotated[str, Path(min_length=1, max_length=DNS_SUBDOMAIN_MAX_LENGTH, pattern=DNS_SUBDOMAIN_PATTERN)]
"""An Environment's name (a DNS subdomain): the management API's ``{environment}`` and the ``{environment}``
of the public API's and deployed apps' ``/e/{namespace}/{environment}`` prefix."""
AppId = Annotated[str, Path(min_length=1, max_length=DNS_SUBDOMAIN_MAX_LENGTH, pattern=DNS_SUBDOMAIN_PATTERN)]
"""The app of a deployed-app call (``/e/{namespace}/{environment}/v1/apps/{app_id}/...``)."""
VersionParam = Annotated[str, Path(pattern=SEMVER_PATTERN, max_length=32)]
KnowledgeBaseName = Annotated[str, Path(min_length=1, max_length=DNS_LABEL_MAX_LENGTH, pattern=DNS_LABEL_PATTERN)]
"""A knowledge base's name (KnowledgeBase spec.name), as agents list it (docs/knowledge-bases.md)."""
DocumentName = Annotated[str, Path(min_length=1, max_length=253, description="a document's name in a knowledge base")]
"""An AppVersion's version, MAJOR.MINOR.PATCH."""
KeyId = Annotated[str, Path(pattern=KEY_ID_PATTERN)]
"""An API key's public id."""
ModelId = Annotated[
    str,
    Path(
        alias="modelId",
        min_length=1,
        max_length=DNS_SUBDOMAIN_MAX_LENGTH,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="The model's id (the name of its Model object), e.g. llama-3-8b-instruct",
        examples=["llama-3-8b-instruct"],
    ),
]
"""A model's ``modelId``: the name of its Model object (public deploy, model downloads)."""
ToolId = Annotated[
    str,
    Path(
        alias="toolId",
        min_length=1,
        max_length=DNS_SUBDOMAIN_MAX_LENGTH,
        pattern=DNS_SUBDOMAIN_PATTERN,
        description="The tool version's id (<name>-<version>, the name of its Tool object), e.g. weather-1.2.0",
        examples=["weather-1.2.0"],
    ),
]
"""A tool version's ``toolId``: the name of its Tool object."""
SessionId = Annotated[str, Path(description="sessionId returned by the start call", max_length=128)]
"""An import session's ``sessionId``."""
DockStatusId = Annotated[str, Path(min_length=1, max_length=128)]
"""A dock job's ``dockStatusId`` (a label value; an id that no label could hold is simply not found)."""
RunId = Annotated[
    str, Path(min_length=1, max_length=64, pattern=r"^[0-9a-f]{1,64}$", description="an evaluation run's id")
]
"""An evaluation run's id (docs/promotion.md)."""
