"""Management: usage statistics of a deployed app's environment (calls, errors, rate-limited calls,
model tokens) per UTC day and per API key, from the conversation database. The statistics outlive
the environment (docs/conversation-store.md, 'Usage statistics'), so a deleted environment still answers.

Authorisation: the caller (a Kubernetes user) needs ``get`` on ``environments`` in the namespace,
checked with a SubjectAccessReview (the environment itself may be gone).
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Query

from dockyard_api.deps import Auth, ConversationDb, EnvName, KubeUser, NamespaceParam
from dockyard_core.errors import InvalidError

router = APIRouter(prefix="/api/v1/namespaces/{namespace}", tags=["environments and API keys"])

MAX_DAYS = 366


@router.get(
    "/environments/{environment}/usage",
    summary="Usage statistics of an environment per day and per API key (kept after the environment is deleted)",
)
async def environment_usage(
    namespace: NamespaceParam,
    environment: EnvName,
    user: KubeUser,
    auth: Auth,
    store: ConversationDb,
    since: Annotated[
        date | None, Query(alias="from", description="first UTC day (YYYY-MM-DD); default: 29 days before to")
    ] = None,
    until: Annotated[date | None, Query(alias="to", description="last UTC day (YYYY-MM-DD); default: today")] = None,
) -> dict[str, Any]:
    await auth.require(user, verb="get", namespace=namespace, resource="environments")
    until = until or datetime.now(UTC).date()
    if since is None:
        if until < date.min + timedelta(days=29):
            raise InvalidError("to is too early", [{"field": "query.to", "message": "before year 1 plus 29 days"}])
        since = until - timedelta(days=29)
    if since > until:
        raise InvalidError("from must not be after to", [{"field": "query.from", "message": "after to"}])
    if (until - since).days >= MAX_DAYS:
        raise InvalidError(f"at most {MAX_DAYS} days at once", [{"field": "query.from", "message": "range too long"}])
    report = await store.usage(namespace=namespace, environment=environment, since=since, until=until)
    return report.view()
