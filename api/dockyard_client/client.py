"""``DockyardClient`` (sync) and ``AsyncDockyardClient`` (async), on httpx.

    from dockyard_client import DockyardClient
    with DockyardClient("http://127.0.0.1:8080", namespace="default", environment="demo-draft",
                        api_key=open(".dockyard/demo-api-key").read().strip()) as dy:
        job = dy.deploy_tool("weather-1.2.0", is_async=True)
        print(dy.wait_job(job.dock_status_id).status)

The public API (import, deploy, dock status) and deployed-app calls authenticate with an environment's
API key; the management API (apps, versions, environments, keys, usage) with a Kubernetes bearer token.
Every error answer raises a :mod:`dockyard_client.errors` exception carrying the JSON error body.
``AsyncDockyardClient`` is in :mod:`dockyard_client.async_client`; what both share in
:mod:`dockyard_client._base`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
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


class DockyardClient(ClientBase):
    """The synchronous client. Use it as a context manager, or call :meth:`close`."""

    def __init__(
        self,
        url: str,
        *,
        api_key: str | None = None,
        token: str | None = None,
        namespace: str | None = None,
        environment: str | None = None,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        verify: bool | str = True,
    ) -> None:
        super().__init__(url, api_key=api_key, token=token, namespace=namespace, environment=environment)
        self.http = httpx.Client(base_url=self.url, timeout=timeout, transport=transport, verify=verify)

    def __enter__(self) -> DockyardClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def send(self, call: Call) -> Any:
        """Send one call; the decoded JSON answer (None for 204)."""
        try:
            response = self.http.request(call.method, call.path, **self._request_args(call))
        except httpx.TransportError as exc:
            raise TransportError(f"{call.method} {self.url}{call.path}: {exc}") from exc
        return self._answer(response)

    # --- public API: chunked import --------------------------------------------------------------

    def start_import(self, **fields: Any) -> ImportSession:
        """Start an import session (docs/public-api.md, 'The calls'): ``file_name``, ``file_size``, ``total_chunks``,
        ``file_extension``, optional ``file_context``, ``is_adapter`` and ``sha256``."""
        return ImportSession.model_validate(self.send(self.calls.start_import(**fields)))

    def upload_chunk(self, session_id: str, chunk_number: int, data: bytes) -> ChunkReceipt:
        return ChunkReceipt.model_validate(self.send(self.calls.upload_chunk(session_id, chunk_number, data)))

    def import_session(self, session_id: str) -> SessionState:
        return SessionState.model_validate(self.send(self.calls.import_session(session_id)))

    def abort_import(self, session_id: str) -> AbortResult:
        return AbortResult.model_validate(self.send(self.calls.abort_import(session_id)))

    def complete_import(self, session_id: str, sha256: str | None = None) -> JobRecord:
        """Complete the import (docs/public-api.md, 'The calls'); ``sha256`` (Dockyard extension): the file's
        SHA-256, verified by the import job."""
        return JobRecord.model_validate(self.send(self.calls.complete_import(session_id, sha256)))

    # --- public API: deploy and dock status ------------------------------------------------------

    def deploy_model(self, model_id: str, **fields: Any) -> JobRecord:
        """Deploy a model (docs/public-api.md, 'Deploy a model'): ``name``, ``device_type``, ``model_type``
        (openSource|fineTune), optional ``is_deployed_previously``, ``hyper_parameters``, ``scaling_parameters``,
        ``optimization_info`` and, for an adapter, ``base_model``."""
        return JobRecord.model_validate(self.send(self.calls.deploy_model(model_id, **fields)))

    def deploy_tool(self, tool_id: str, *, is_async: bool) -> JobRecord:
        return JobRecord.model_validate(self.send(self.calls.deploy_tool(tool_id, is_async=is_async)))

    def dock_status(self, dock_status_id: str) -> JobRecord:
        return JobRecord.model_validate(self.send(self.calls.dock_status(dock_status_id)))

    def wait_job(
        self,
        dock_status_id: str,
        *,
        timeout: float | None = None,
        interval: float = 1.0,
        on_update: Callable[[JobRecord], None] | None = None,
    ) -> JobRecord:
        """Poll the dock status until the job is SUCCESS or FAILED (or ``timeout`` passes: the last record)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            record = self.dock_status(dock_status_id)
            if on_update is not None:
                on_update(record)
            if record.done or (deadline is not None and time.monotonic() >= deadline):
                return record
            time.sleep(interval)

    # --- deployed-app call -----------------------------------------------------------------------

    def execute(
        self, app_id: str, message: str, *, session_id: str | None = None, user_id: str | None = None
    ) -> ExecuteResult:
        call = self.calls.execute(app_id, message, session_id=session_id, user_id=user_id)
        return ExecuteResult.model_validate(self.send(call))

    def execute_stream(
        self, app_id: str, message: str, *, session_id: str | None = None, user_id: str | None = None
    ) -> Iterator[ServerSentEvent]:
        """The streamed call: events ``agent``, ``tool_call``, ``tool_result``, ``delta`` and finally ``done``
        (its data is the JSON answer). An ``error`` event raises :class:`StreamError`."""
        call = self.calls.execute(app_id, message, session_id=session_id, user_id=user_id, stream=True)
        try:
            with self.http.stream(call.method, call.path, **self._request_args(call)) as response:
                if response.status_code >= 400:
                    response.read()
                    self._answer(response)
                self.last_request_id = response.headers.get(REQUEST_ID_HEADER)
                parser = SSEParser()
                for line in response.iter_lines():
                    event = parser.feed(line)
                    if event is not None:
                        yield stream_event(event, response.status_code, response.headers)
                        if event.event == "done":
                            return
        except httpx.TransportError as exc:
            raise TransportError(f"{call.method} {self.url}{call.path}: {exc}") from exc

    # --- management: apps and versions -----------------------------------------------------------

    def list_apps(self) -> list[App]:
        return items_of(App, self.send(self.calls.list_apps()))

    def get_app(self, app: str) -> App:
        return App.model_validate(self.send(self.calls.get_app(app)))

    def create_app(self, name: str, **draft: Any) -> App:
        return App.model_validate(self.send(self.calls.create_app(name, draft)))

    def update_draft(self, app: str, **draft: Any) -> App:
        return App.model_validate(self.send(self.calls.update_draft(app, draft)))

    def restore_version(self, app: str, version: str) -> App:
        """Overwrite the App's whole draft with a saved version (cannot be undone)."""
        return App.model_validate(self.send(self.calls.restore_version(app, version)))

    def create_version(self, app: str, version: str, name: str, description: str = "", **content: Any) -> AppVersion:
        call = self.calls.create_version(app, version, name, description, **content)
        return AppVersion.model_validate(self.send(call))

    def list_versions(self, app: str) -> list[AppVersion]:
        return items_of(AppVersion, self.send(self.calls.list_versions(app)))

    def get_version(self, app: str, version: str) -> AppVersion:
        return AppVersion.model_validate(self.send(self.calls.get_version(app, version)))

    def delete_version(self, app: str, version: str) -> None:
        self.send(self.calls.delete_version(app, version))

    # --- management: environments ----------------------------------------------------------------

    def create_environment(
        self, app: str, name: str, description: str = "", app_version: str | None = None
    ) -> Environment:
        return Environment.model_validate(self.send(self.calls.create_environment(app, name, description, app_version)))

    def list_environments(self, app: str) -> list[Environment]:
        return items_of(Environment, self.send(self.calls.list_environments(app)))

    def get_environment(self, environment: str) -> Environment:
        return Environment.model_validate(self.send(self.calls.get_environment(environment)))

    def deploy_environment(self, environment: str, version: str) -> Environment:
        return Environment.model_validate(self.send(self.calls.deploy_environment(environment, version)))

    def rollback_environment(self, environment: str, version: str) -> Environment:
        return Environment.model_validate(self.send(self.calls.rollback_environment(environment, version)))

    def change_settings(self, environment: str, settings: dict[str, Any]) -> Environment:
        """A JSON merge patch of the environment's settings (access, widget, rateLimits, configuration)."""
        return Environment.model_validate(self.send(self.calls.change_settings(environment, settings)))

    def delete_environment(self, environment: str) -> DeletedEnvironment:
        return DeletedEnvironment.model_validate(self.send(self.calls.delete_environment(environment)))

    def history(self, environment: str) -> list[HistoryEntry]:
        return self.get_environment(environment).history

    def checklist(self, environment: str) -> list[ChecklistItem]:
        return self.get_environment(environment).checklist

    def usage(self, environment: str, since: str | None = None, until: str | None = None) -> dict[str, Any]:
        """Usage statistics per day and per API key (calls, errors, rate-limited calls, tokens)."""
        found: dict[str, Any] = self.send(self.calls.usage(environment, since, until))
        return found

    def interventions(self, environment: str, limit: int | None = None) -> list[dict[str, Any]]:
        """What guardrails and the PII protection did to the environment's turns, newest first (no values)."""
        found: list[dict[str, Any]] = self.send(self.calls.interventions(environment, limit))["items"]
        return found

    # --- management: API keys --------------------------------------------------------------------

    def test_tool(self, environment: str, tool: str, arguments: dict[str, Any] | None = None) -> ToolTestResult:
        """Test-call a tool of the version active in ``environment`` (``<server>/<tool>`` for an MCP tool)."""
        return ToolTestResult.model_validate(self.send(self.calls.test_tool(environment, tool, arguments or {})))

    def create_api_key(self, environment: str, name: str) -> NewApiKey:
        return NewApiKey.model_validate(self.send(self.calls.create_api_key(environment, name)))

    def list_api_keys(self, environment: str) -> list[ApiKey]:
        return items_of(ApiKey, self.send(self.calls.list_api_keys(environment)))

    def revoke_api_key(self, environment: str, key_id: str) -> None:
        self.send(self.calls.revoke_api_key(environment, key_id))


__all__ = ["DockyardClient"]
