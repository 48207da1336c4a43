"""What the facade answers, as typed objects. Unknown fields are kept (``model_extra``), so a newer
facade does not break an older client."""

from __future__ import annotations

from typing import Any

from pydantic import AliasChoices, BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

TERMINAL = frozenset({"SUCCESS", "FAILED"})


class _Answer(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True, alias_generator=to_camel)


# --- public API -----------------------------------------------------------------------------------------


class ImportSession(_Answer):
    """The answer of the start call (docs/public-api.md, 'The calls')."""

    session_id: str
    model_id: str
    expiration_date: str


class ChunkReceipt(_Answer):
    chunk_number: int
    session_id: str


class ReceivedChunk(_Answer):
    chunk_number: int
    size: int


class SessionState(_Answer):
    """``GET .../files/session/{sessionId}``: what arrived, to resume an upload."""

    session_id: str
    model_id: str
    state: str
    expiration_date: str | None = None
    file_size: int
    total_chunks: int
    received_chunks: list[ReceivedChunk] = Field(default_factory=list)
    received_bytes: int = 0
    missing_chunks: list[int] = Field(default_factory=list)
    dock_status_id: str | None = Field(default=None, validation_alias=AliasChoices("dockStatusId", "dock-statusId"))

    def missing(self) -> list[int]:
        """Every chunk number that has not arrived (``missingChunks`` of the answer may be shortened)."""
        have = {c.chunk_number for c in self.received_chunks}
        return [n for n in range(self.total_chunks) if n not in have]


class AbortResult(_Answer):
    session_id: str
    model_id: str
    freed_bytes: int = 0


class JobRecord(_Answer):
    """The job record (docs/public-api.md, 'Dock status'). The id is read from ``dockStatusId`` or its second
    spelling ``dock-statusId``."""

    dock_status_id: str = Field(validation_alias=AliasChoices("dockStatusId", "dock-statusId"))
    model_id: str | None = None
    tool_id: str | None = None
    job_type: str
    action: str
    status: str
    reason: str = ""
    message: str = ""
    start_time: str | None = None
    completion_time: str | None = None
    deployment_name: str | None = None
    name: str | None = None
    """A model deployment's name as the deploy call gave it (e.g. Llama 3 8B); deployment_name is its object."""

    @property
    def done(self) -> bool:
        return self.status in TERMINAL

    @property
    def succeeded(self) -> bool:
        return self.status == "SUCCESS"

    def as_dict(self) -> dict[str, Any]:
        """The record with both spellings of the id, as the facade sends it."""
        out = self.model_dump(by_alias=True, exclude_none=True)
        out["dock-statusId"] = self.dock_status_id
        return out


# --- deployed-app call (Contract 2) ------------------------------------------------------------------


class Tokens(BaseModel):
    model_config = ConfigDict(extra="allow")
    input: int = 0
    output: int = 0


class ExecuteResult(BaseModel):
    """The answer of ``POST {api_base_url}/v1/apps/{app_id}/execute`` (and the ``done`` event)."""

    model_config = ConfigDict(extra="allow")
    response: str
    session_id: str
    agent: str | None = None
    tools_used: list[str] = Field(default_factory=list)
    tokens: Tokens = Field(default_factory=Tokens)
    message_id: str | None = None


# --- management API -----------------------------------------------------------------------------------


class App(_Answer):
    name: str
    namespace: str
    display_name: str | None = None
    description: str = ""
    agents: list[dict[str, Any]] = Field(default_factory=list)
    tool_versions: list[dict[str, Any]] = Field(default_factory=list)
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)
    restored_from: str | None = None
    created_at: str | None = None


class AppVersion(_Answer):
    app: str
    version: str
    name: str | None = None
    description: str = ""
    agents: list[dict[str, Any]] = Field(default_factory=list)
    tool_versions: list[dict[str, Any]] = Field(default_factory=list)
    mcp_servers: list[dict[str, Any]] = Field(default_factory=list)
    deployed_in: list[Any] = Field(default_factory=list)
    object_name: str | None = None
    created_at: str | None = None


class HistoryEntry(_Answer):
    version: str
    deployed_at: str | None = None
    deployed_by: str | None = None
    status: str


class ChecklistItem(_Answer):
    category: str
    item: str
    state: str
    detail: str = ""


class Environment(_Answer):
    name: str
    object_name: str
    namespace: str
    app: str | None = None
    description: str = ""
    app_version: str | None = None
    active_version: str | None = None
    phase: str | None = None
    web_client_url: str | None = None
    api_base_url: str | None = None
    widget_script_url: str | None = None
    app_id: str | None = None
    curl_script: str | None = None
    history: list[HistoryEntry] = Field(default_factory=list)
    checklist: list[ChecklistItem] = Field(default_factory=list)
    conditions: list[dict[str, Any]] = Field(default_factory=list)
    configuration: dict[str, Any] = Field(default_factory=dict)
    access: dict[str, Any] = Field(default_factory=dict)
    """Who may open the web client page: ``{"webClient": ...}``."""
    widget: dict[str, Any] = Field(default_factory=dict)
    """The widget's allowed origins, token lifetime and limits."""
    rate_limits: dict[str, Any] | None = None
    """Limits on calls of the deployed app; None: none."""


class DeletedEnvironment(_Answer):
    deleted: str
    audit_record: str | None = None
    message: str = ""


class ToolTestResult(_Answer):
    """A tool test call's outcome (recorded by the facade; the checklist reads it)."""

    environment: str
    app_version: str
    tool: str
    tool_version: str = ""
    target: str = ""
    passed: bool
    result: str = ""
    error: str = ""
    at: str | None = None
    by: str = ""
    duration_ms: int = 0
    recorded_on: str = ""


class ApiKey(_Answer):
    id: str
    name: str
    prefix: str
    environment: str
    created_at: str | None = None
    created_by: str | None = None
    last_used_at: str | None = None


class NewApiKey(ApiKey):
    key: str
    """The key itself: the facade shows it once, never again."""
