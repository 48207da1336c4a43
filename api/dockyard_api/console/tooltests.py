"""The console's Tools page of an environment: the tools of the version active there (HTTP tools of
toolVersions, MCP Tools, MCP servers) with their recorded test calls, and a Test per tool (arguments as
JSON, the tool's answer shown) that calls the tool test service (docs/apps-environments.md, "Tool test
calls") as the signed-in person; a refusal is shown next to the field it names (arguments, tool)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from pydantic import ValidationError

from dockyard_api.console import views
from dockyard_api.console.common import Ctx, context, form, page, render
from dockyard_api.deps import EnvName, NamespaceParam
from dockyard_api.management.tooltests.schemas import ToolTestCall
from dockyard_core.errors import DockyardError

routes = APIRouter(include_in_schema=False)


def call_errors(message: str, details: Any) -> views.FormErrors:
    """A refused test call's errors next to the form's fields: ``arguments`` (``body.arguments...``: where
    in the arguments, and why) and ``tool`` (``body.tool``); the rest on top."""
    errors = views.FormErrors()
    causes = details if isinstance(details, list) else [details] if isinstance(details, dict) else []
    for cause in causes:
        field = str(cause.get("field") or "") if isinstance(cause, dict) else ""
        if field.startswith("body.arguments"):
            where = field.removeprefix("body.arguments").lstrip(".")
            errors.add("arguments", f"{where}: {cause.get('message') or message}" if where else str(
                cause.get("message") or message))  # fmt: skip
        elif field == "body.tool":
            errors.add("tool", message if not cause.get("message") or cause is details else str(cause["message"]))
    if not errors:
        errors.add(None, message)
    return errors


def parse_arguments(text: str) -> tuple[dict[str, Any] | None, str | None]:
    """The arguments form field as a JSON object, or why it is not one."""
    try:
        value = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        return None, f"not JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
    if not isinstance(value, dict):
        return None, 'must be a JSON object, e.g. {"city": "Oslo"}'
    return value, None


async def _tools_view(
    ctx: Ctx, environment: str, status_code: int = 200, *, sent: dict[str, Any] | None = None,
    errors: views.FormErrors | None = None, answer: dict[str, Any] | None = None,
) -> Response:  # fmt: skip
    env = (await ctx.services.environments.get_environment(ctx.namespace, environment)).wire()
    listed = (await ctx.services.tooltests.list_tools(ctx.namespace, environment)).wire()
    return render(
        ctx, "environment_tools.html", status_code, env=env, tools=listed["items"], appVersion=listed["appVersion"],
        sent=sent or {}, errors=errors or views.FormErrors(), answer=answer,
    )  # fmt: skip


@routes.get("/ns/{namespace}/environments/{environment}/tools", response_class=HTMLResponse)
@page
async def tools_page(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    ctx = await context(request, namespace)
    return await _tools_view(ctx, environment)


@routes.post("/ns/{namespace}/environments/{environment}/tools/test", response_class=HTMLResponse)
@page
async def tool_test(request: Request, namespace: NamespaceParam, environment: EnvName) -> Response:
    ctx = await context(request, namespace)
    given = await form(ctx)
    sent = {k: str(given.get(k) or "") for k in ("target", "mcpTool", "arguments")}
    mcp = given.get("kind") in ("mcpServer", "mcpTool")
    name = sent["target"] + (f"/{sent['mcpTool'].strip()}" if mcp else "")
    arguments, problem = parse_arguments(sent["arguments"])
    if problem is not None:
        errors = views.FormErrors()
        errors.add("arguments", problem)
        return await _tools_view(ctx, environment, 422, sent=sent, errors=errors)
    try:
        body = ToolTestCall(tool=name, arguments=arguments or {})
    except ValidationError as exc:
        errors = views.FormErrors()
        for err in exc.errors():
            errors.add("tool" if err["loc"][:1] == ("tool",) else "arguments", str(err["msg"]))
        return await _tools_view(ctx, environment, 422, sent=sent, errors=errors)
    try:
        done = await ctx.services.tooltests.test_tool(namespace, environment, body)
    except DockyardError as error:
        errors = call_errors(error.message, error.details)
        return await _tools_view(ctx, environment, error.status_code, sent=sent, errors=errors)
    return await _tools_view(ctx, environment, sent=sent, answer=done.wire())
