"""The answers of the facade's probes (docs/install.md: liveness ``/healthz``, readiness ``/readyz``)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field


class Liveness(BaseModel):
    """``GET /healthz``: the process serves requests."""

    status: Literal["ok"] = "ok"


class Readiness(BaseModel):
    """``GET /readyz``: the Kubernetes API server answers (503 ``not_ready`` otherwise)."""

    status: Literal["ok"] = "ok"
    kubernetes: str = Field(description="the API server's version (gitVersion)")
