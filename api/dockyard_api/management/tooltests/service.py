"""Tool test calls: an app owner calls one tool of the version active in an environment, the way the
runtime calls it for an agent, and the outcome is recorded (docs/apps-environments.md, "Tool test calls").

Who may: the calling user must be allowed to ``get`` the Environment (read as the caller: RBAC) and to
``create`` the virtual subresource ``environments/tooltests`` (a SubjectAccessReview; the chart's editor
and admin roles grant it, the viewer role does not). The record is then written by Dockyard itself (the
facade holds ``appversions/status`` and ``apps/status``; no user writes status): the newest call per
environment and tool in ``status.toolTests`` of the AppVersion, or of the App for the draft, which the
checklist item "Tools deployed and tested" reads. An Event ToolTested (ToolTestFailed) on the Environment
and on the App or AppVersion names who called what and how it went; the API server's audit log has the
status write.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from dockyard_api.auth import Authenticator
from dockyard_api.events import record_event
from dockyard_api.management.base import CallerService
from dockyard_api.management.tooltests.schemas import TestedTool, TestedTools, ToolTestAnswer, ToolTestCall
from dockyard_api.runtime.service import AppRuntime
from dockyard_api.runtime.tooltest import argument_errors, tool_under_test
from dockyard_core import tooltests
from dockyard_core.errors import ConflictError, InvalidError
from dockyard_core.repository import Repositories
from dockyard_core.resources.v1alpha1 import AppVersion
from dockyard_core.resources.v1alpha1.app import AppContent, ToolTest

RESULT_LIMIT = 4096
ATTEMPTS = 5


class ToolTestService(CallerService):
    """Tool test calls of one caller."""

    def __init__(self, repos: Repositories, auth: Authenticator, runtime: AppRuntime) -> None:
        super().__init__(repos, auth)
        self.runtime = runtime

    async def test_tool(self, namespace: str, environment: str, body: ToolTestCall) -> ToolTestAnswer:
        env = await self.environment(namespace, environment)
        await self.auth.require(
            self.user, verb="create", namespace=namespace, resource="environments", subresource="tooltests"
        )
        rt = self.runtime
        tool = await tool_under_test(
            rt.lookup, rt.mcp, rt.models.http(), rt.limits, namespace, env.metadata.name or environment, body.tool
        )
        errors = argument_errors(tool.schema, body.arguments)
        if errors:
            shown = "; ".join(f"{e['field']}: {e['message']}" for e in errors[:3])
            raise InvalidError(f"the arguments do not match the parameters of {tool.tool}: {shown}", errors)
        started = time.monotonic()
        result = await tool.call(body.arguments)
        record = ToolTest(
            environment=env.metadata.name or environment,
            tool=tool.tool,
            tool_version=tool.tool_version,
            app_version=tool.app_version,
            target=tool.target,
            revision=tool.revision,
            passed=result.ok,
            at=datetime.now(UTC).replace(microsecond=0),
            by=self.user.username[:253],
            duration_ms=round((time.monotonic() - started) * 1000),
            error="" if result.ok else tooltests.short_error(result.content),
        )
        recorded_on = await self._record(namespace, env.spec.app_ref, record)
        outcome = "passed" if result.ok else f"failed: {record.error}"
        what = f"{tool.tool}" + (f" {tool.tool_version}" if tool.tool_version else "")
        message = (
            f"tool test call of {what} in {record.environment} (version {record.app_version}) by "
            f"{record.by}: {outcome} ({record.duration_ms} ms)"
        )
        reason, kind = ("ToolTested", "Normal") if result.ok else ("ToolTestFailed", "Warning")
        await record_event(self.repos.kube, env.to_manifest(), reason=reason, message=message, type_=kind)
        return ToolTestAnswer(
            environment=record.environment,
            app_version=record.app_version,
            tool=record.tool,
            tool_version=record.tool_version,
            target=record.target,
            passed=record.passed,
            result=result.content[:RESULT_LIMIT],
            error=record.error,
            at=record.at,
            by=record.by,
            duration_ms=record.duration_ms,
            recorded_on=recorded_on,
        )

    async def list_tools(self, namespace: str, environment: str) -> TestedTools:
        """The tools of the version active in the environment with their recorded test calls there (read as
        the caller)."""
        env = await self.environment(namespace, environment)
        version = env.status.active_version or env.spec.app_version or "draft"
        name = env.metadata.name or environment
        content: AppContent
        if version == "draft":
            app = await self.repos.apps.get(namespace, env.spec.app_ref)
            content, tests = app.spec, app.status.tool_tests
        else:
            found = await self.repos.app_versions.get(namespace, AppVersion.object_name(env.spec.app_ref, version))
            content, tests = found.spec, found.status.tool_tests
        here = [t for t in tests if t.environment == name and t.app_version == version]

        def of(prefix: str) -> list[ToolTest]:
            return [t for t in here if t.tool == prefix or t.tool.startswith(prefix + "/")]

        named: dict[str, list[str]] = {}
        for agent in content.agents:
            for ref in agent.mcp_tools or []:
                server, _, tool = ref.partition("/")
                if tool not in named.setdefault(server, []):
                    named[server].append(tool)
        items: list[TestedTool] = []
        for t in content.tool_versions:
            pinned = await self.repos.tools.find(namespace, f"{t.name}-{t.version}")
            kind = "mcpTool" if pinned is not None and pinned.spec.mcp is not None else "tool"
            items.append(
                TestedTool(
                    name=t.name, kind=kind, version=t.version, named_tools=named.get(t.name, []), tests=of(t.name)
                )
            )
        items += [
            TestedTool(name=s.name, kind="mcpServer", named_tools=named.get(s.name, []), tests=of(s.name))
            for s in content.mcp_servers
        ]
        return TestedTools(environment=name, app_version=version, items=items)

    async def _record(self, namespace: str, app: str, record: ToolTest) -> str:
        """Add ``record`` to the status.toolTests of the App (draft) or AppVersion, as Dockyard, guarded by
        the resourceVersion read (another record written meanwhile: read again)."""
        entry = record.model_dump(mode="json", by_alias=True, exclude_defaults=False)
        draft = record.app_version == "draft"
        repo = self.dockyard.apps if draft else self.dockyard.app_versions
        name = app if draft else AppVersion.object_name(app, record.app_version)
        for _ in range(ATTEMPTS):
            holder = await repo.objects.get(namespace, name)
            current = (holder.get("status") or {}).get("toolTests") or []
            try:
                patched = await repo.objects.merge(
                    namespace,
                    name,
                    {"status": {"toolTests": tooltests.with_record(current, entry)}},
                    resource_version=holder["metadata"]["resourceVersion"],
                    sub="status",
                )
            except ConflictError:
                continue
            kind = "App" if draft else "AppVersion"
            await record_event(
                self.repos.kube,
                patched,
                reason="ToolTested" if record.passed else "ToolTestFailed",
                message=f"tool test call of {record.tool} in {record.environment} by {record.by}: "
                + ("passed" if record.passed else f"failed: {record.error}"),
                type_="Normal" if record.passed else "Warning",
            )
            return f"{kind} {name}"
        raise ConflictError(f"the tool test call could not be recorded on {name}: it kept changing; call again")
