"""Management: evaluation runs (HTTP only; the logic is
:class:`~dockyard_api.management.evaluations.service.EvaluationService`; docs/promotion.md)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, status

from dockyard_api.deps import EnvName, EvaluationsDep, NamespaceParam, RunId
from dockyard_api.management.evaluations.schemas import EvaluationRunList, EvaluationRunView, EvaluationStart

router = APIRouter(prefix="/api/v1/namespaces/{namespace}", tags=["environments and API keys"])


@router.post(
    "/environments/{environment}/evaluations",
    status_code=status.HTTP_202_ACCEPTED,
    summary="Run a version's evaluation suite against the environment (in the background)",
    description="Runs the suite (`spec.evaluations`) of `version` (absent: the active version; another version "
    "runs in a shadow of the environment: its configuration, none of its sessions or usage) through the "
    "runtime, guardrails included. 202 with the run's id and state `running`; poll GET .../evaluations/{run}. "
    "409 while another run of the environment is running, or when the version has no suite. The caller needs "
    "`create` on `environments/evaluations` (editor and admin roles).",
    response_model_exclude_unset=True,
)
async def start_run(
    namespace: NamespaceParam, environment: EnvName, body: EvaluationStart, evaluations: EvaluationsDep
) -> EvaluationRunView:
    return await evaluations.start(namespace, environment, body)


@router.get(
    "/environments/{environment}/evaluations",
    summary="The environment's newest evaluation runs (without per-case results)",
    response_model_exclude_unset=True,
)
async def list_runs(
    namespace: NamespaceParam,
    environment: EnvName,
    evaluations: EvaluationsDep,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> EvaluationRunList:
    return await evaluations.list(namespace, environment, limit)


@router.get(
    "/environments/{environment}/evaluations/{run}",
    summary="One evaluation run: progress, per-case results, and the diff against the previous run",
    description="`wait` (seconds, at most 60): answer once the run is no longer running, or after that long.",
    response_model_exclude_unset=True,
)
async def get_run(
    namespace: NamespaceParam,
    environment: EnvName,
    run: RunId,
    evaluations: EvaluationsDep,
    wait: Annotated[float, Query(ge=0, le=60)] = 0,
) -> EvaluationRunView:
    if wait:
        return await evaluations.wait(namespace, environment, run, wait)
    return await evaluations.get(namespace, environment, run)
