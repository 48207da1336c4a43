"""``AsyncDockyardClient``: the same calls as :class:`~dockyard_client.client.DockyardClient`, as
coroutines on an ``httpx.AsyncClient``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx

from dockyard_client._base import REQUEST_ID_HEADER, ClientBase, items_of, stream_event
from dockyard_client._calls import Call
from dockyard_client.errors import TransportError
from dockyard_client.models import (
    AbortResult,
    ApiKey,
    App,
    AppVersion,
    ChecklistItem,
    ChunkReceipt,
    DeletedEnvironment,
    Environment,
    ExecuteResult,
    HistoryEntry,
    ImportSession,
    JobRecord,
    NewApiKey,
    SessionState,
    ToolTestResult,
)
from dockyard_client.sse import ServerSentEvent, SSEParser


class AsyncDockyardClient(ClientBase):
    """The asynchronous client: the same methods as :class:`DockyardClient`, as coroutines."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        token: str | None = None,
        namespace: str | None = None,
        environment: str | None = None,
        timeout: float = 60.0,
        transport: httpx.AsyncBaseTransport | None = None,
        verify: bool | str = True,
    ) -> None:
        super().__init__(url, api_key=api_key, token=token, namespace=namespace, environment=environment)
        self.http = httpx.AsyncClient(base_url=self.url, timeout=timeout, transport=transport, verify=verify)

    async def __aenter__(self) -> AsyncDockyardClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def send(self, call: Call) -> Any:
        try:
            response = await self.http.request(call.method, call.path, **self._request_args(call))
        except httpx.TransportError as exc:
            raise TransportError(f"{call.method} {self.url}{call.path}: {exc}") from exc
        return self._answer(response)

    async def start_import(self, **fields: Any) -> ImportSession:
        return ImportSession.model_validate(await self.send(self.calls.start_import(**fields)))

    async def upload_chunk(self, session_id: str, chunk_number: int, data: bytes) -> ChunkReceipt:
        return ChunkReceipt.model_validate(await self.send(self.calls.upload_chunk(session_id, chunk_number, data)))

    async def import_session(self, session_id: str) -> SessionState:
        return SessionState.model_validate(await self.send(self.calls.import_session(session_id)))

    async def abort_import(self, session_id: str) -> AbortResult:
        return AbortResult.model_validate(await self.send(self.calls.abort_import(session_id)))

    async def complete_import(self, session_id: str, sha256: str | None = None) -> JobRecord:
        return JobRecord.model_validate(await self.send(self.calls.complete_import(session_id, sha256)))

    async def deploy_model(self, model_id: str, **fields: Any) -> JobRecord:
        return JobRecord.model_validate(await self.send(self.calls.deploy_model(model_id, **fields)))

    async def deploy_tool(self, tool_id: str, *, is_async: bool) -> JobRecord:
        return JobRecord.model_validate(await self.send(self.calls.deploy_tool(tool_id, is_async=is_async)))

    async def dock_status(self, dock_status_id: str) -> JobRecord:
        return JobRecord.model_validate(await self.send(self.calls.dock_status(dock_status_id)))

    async def wait_job(
        self,
        dock_status_id: str,
        *,
        timeout: float | None = None,
        interval: float = 1.0,
        on_update: Callable[[JobRecord], None] | None = None,
    ) -> JobRecord:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            record = await self.dock_status(dock_status_id)
            if on_update is not None:
                on_update(record)
            if record.done or (deadline is not None and time.monotonic() >= deadline):
                return record
            await asyncio.sleep(interval)

    async def execute(
        self, app_id: str, message: str, *, session_id: str | None = None, user_id: str | None = None
    ) -> ExecuteResult:
        call = self.calls.execute(app_id, message, session_id=session_id, user_id=user_id)
        return ExecuteResult.model_validate(await self.send(call))

    async def execute_stream(
        self, app_id: str, message: str, *, session_id: str | None = None, user_id: str | None = None
    ) -> AsyncIterator[ServerSentEvent]:
        call = self.calls.execute(app_id, message, session_id=session_id, user_id=user_id, stream=True)
        try:
            async with self.http.stream(call.method, call.path, **self._request_args(call)) as response:
                if response.status_code >= 400:
                    await response.aread()
                    self._answer(response)
                self.last_request_id = response.headers.get(REQUEST_ID_HEADER)
                parser = SSEParser()
                async for line in response.aiter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield stream_event(event, response.status_code, response.headers)
                        if event.event == "done":
                            return
        except httpx.TransportError as exc:
            raise TransportError(f"{call.method} {self.url}{call.path}: {exc}") from exc

    async def list_apps(self) -> list[App]:
        return items_of(App, await self.send(self.calls.list_apps()))

    async def get_app(self, app: str) -> App:
        return App.model_validate(await self.send(self.calls.get_app(app)))

    async def create_app(self, name: str, **draft: Any) -> App:
        return App.model_validate(await self.send(self.calls.create_app(name, draft)))

    async def update_draft(self, app: str, **draft: Any) -> App:
        return App.model_validate(await self.send(self.calls.update_draft(app, draft)))

    async def restore_version(self, app: str, version: str) -> App:
        return App.model_validate(await self.send(self.calls.restore_version(app, version)))

    async def create_version(
        self, app: str, version: str, name: str, description: str = "", **content: Any
    ) -> AppVersion:
        call = self.calls.create_version(app, version, name, description, **content)
        return AppVersion.model_validate(await self.send(call))

    async def list_versions(self, app: str) -> list[AppVersion]:
        return items_of(AppVersion, await self.send(self.calls.list_versions(app)))

    async def get_version(self, app: str, version: str) -> AppVersion:
        return AppVersion.model_validate(await self.send(self.calls.get_version(app, version)))

    async def delete_version(self, app: str, version: str) -> None:
        await self.send(self.calls.delete_version(app, version))

    async def create_environment(
        self, app: str, name: str, description: str = "", app_version: str | None = None
    ) -> Environment:
        return Environment.model_validate(
            await self.send(self.calls.create_environment(app, name, description, app_version))
        )

    async def list_environments(self, app: str) -> list[Environment]:
        return items_of(Environment, await self.send(self.calls.list_environments(app)))

    async def get_environment(self, environment: str) -> Environment:
        return Environment.model_validate(await self.send(self.calls.get_environment(environment)))

    async def deploy_environment(self, environment: str, version: str) -> Environment:
        return Environment.model_validate(await self.send(self.calls.deploy_environment(environment, version)))

    async def rollback_environment(self, environment: str, version: str) -> Environment:
        return Environment.model_validate(await self.send(self.calls.rollback_environment(environment, version)))

    async def change_settings(self, environment: str, settings: dict[str, Any]) -> Environment:
        """A JSON merge patch of the environment's settings (access, widget, rateLimits, configuration)."""
        return Environment.model_validate(await self.send(self.calls.change_settings(environment, settings)))

    async def delete_environment(self, environment: str) -> DeletedEnvironment:
        return DeletedEnvironment.model_validate(await self.send(self.calls.delete_environment(environment)))

    async def history(self, environment: str) -> list[HistoryEntry]:
        return (await self.get_environment(environment)).history

    async def checklist(self, environment: str) -> list[ChecklistItem]:
        return (await self.get_environment(environment)).checklist

    async def usage(self, environment: str, since: str | None = None, until: str | None = None) -> dict[str, Any]:
        found: dict[str, Any] = await self.send(self.calls.usage(environment, since, until))
        return found

    async def interventions(self, environment: str, limit: int | None = None) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = (await self.send(self.calls.interventions(environment, limit)))["items"]
        return found

    async def test_tool(self, environment: str, tool: str, arguments: dict[str, Any] | None = None) -> ToolTestResult:
        """Test-call a tool of the version active in ``environment`` (``<server>/<tool>`` for an MCP tool)."""
        return ToolTestResult.model_validate(await self.send(self.calls.test_tool(environment, tool, arguments or {})))

    async def create_api_key(self, environment: str, name: str) -> NewApiKey:
        return NewApiKey.model_validate(await self.send(self.calls.create_api_key(environment, name)))

    async def list_api_keys(self, environment: str) -> list[ApiKey]:
        return items_of(ApiKey, await self.send(self.calls.list_api_keys(environment)))

    async def revoke_api_key(self, environment: str, key_id: str) -> None:
        await self.send(self.calls.revoke_api_key(environment, key_id))
