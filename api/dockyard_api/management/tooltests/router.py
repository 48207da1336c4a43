"""Management: tool test calls (HTTP only; the logic is
:class:`~dockyard_api.management.tooltests.service.ToolTestService`)."""

from __future__ import annotations

from fastapi import APIRouter

from dockyard_api.deps import EnvName, NamespaceParam, ToolTestsDep
from dockyard_api.management.tooltests.schemas import TestedTools, ToolTestAnswer, ToolTestCall

router = APIRouter(prefix="/api/v1/namespaces/{namespace}", tags=["environments and API keys"])


@router.post(
    "/environments/{environment}/tooltests",
    summary="Test-call one tool of the version active in the environment; the outcome is recorded",
    description="Calls the tool the way the runtime calls it for an agent (an HTTP tool at its ToolDeployment's "
    "endpoint, an MCP tool `<server>/<tool>` through the MCP SDK) with `arguments`, validated first against the "
    "tool's JSON Schema (422 naming `body.arguments.<field>`; an unknown tool: 404 naming `body.tool`). The "
    "caller needs `create` on `environments/tooltests` (editor and admin roles). 200 whether the call passed "
    "or failed (`passed`); recorded in `status.toolTests` of the AppVersion (the App for the draft), read by the "
    'checklist item "Tools deployed and tested", with an Event on the Environment and on the version.',
)
async def test_tool(
    namespace: NamespaceParam, environment: EnvName, body: ToolTestCall, tooltests: ToolTestsDep
) -> ToolTestAnswer:
    return await tooltests.test_tool(namespace, environment, body)


@router.get(
    "/environments/{environment}/tooltests",
    summary="The tools of the version active in the environment and their recorded test calls there",
    response_model_exclude_unset=True,
)
async def list_tools(namespace: NamespaceParam, environment: EnvName, tooltests: ToolTestsDep) -> TestedTools:
    return await tooltests.list_tools(namespace, environment)
