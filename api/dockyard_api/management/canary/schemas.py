"""Bodies and answers of the canary calls (docs/promotion.md, "Canary by session")."""

from __future__ import annotations

from typing import Annotated

from pydantic import ConfigDict, Field

from dockyard_api.management.schemas import Body
from dockyard_core.resources.v1alpha1.common import SemVer


class CanaryStart(Body):
    """Start a canary: ``weight`` percent of new sessions start on ``version``; sessions stay on the version
    they started on."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"version": "1.1.0", "weight": 10}]})

    version: SemVer
    weight: Annotated[int, Field(ge=0, le=100)]


class CanaryWeight(Body):
    """Change the running canary's share of new sessions (0 to 100 percent)."""

    model_config = ConfigDict(json_schema_extra={"examples": [{"weight": 50}]})

    weight: Annotated[int, Field(ge=0, le=100)]
