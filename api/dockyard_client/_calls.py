"""The HTTP calls of the facade, built once for the sync and the async client (no I/O here)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import quote

from dockyard_client.errors import ConfigurationError

Auth = Literal["api-key", "bearer-key", "kube", "none"]


@dataclass(frozen=True)
class Call:
    method: str
    path: str
    auth: Auth
    json: Any = None
    params: dict[str, str] | None = None
    data: dict[str, str] | None = None
    files: dict[str, tuple[str, bytes, str]] | None = None
    headers: dict[str, str] = field(default_factory=dict)


def _q(part: str) -> str:
    return quote(part, safe="")


def _drop_none(**fields: Any) -> dict[str, Any]:
    return {k: v for k, v in fields.items() if v is not None}


class Calls:
    """Paths and bodies of every endpoint. ``namespace``/``environment`` locate the public API's
    ``{base_url}`` (``/e/<namespace>/<environment>``, docs/public-api.md) and the management API's namespace."""

    def __init__(self, namespace: str | None, environment: str | None) -> None:
        self.namespace = namespace
        self.environment = environment

    # --- where -----------------------------------------------------------------------------------

    def env_base(self) -> str:
        if not self.namespace or not self.environment:
            raise ConfigurationError(
                "the public API lives under an environment's base URL: set the namespace and environment "
                "(--namespace/--environment, DOCKYARD_NAMESPACE/DOCKYARD_ENVIRONMENT, or a DOCKYARD_URL ending "
                "in /e/<namespace>/<environment>)"
            )
        return f"/e/{_q(self.namespace)}/{_q(self.environment)}"

    def mgmt(self, namespace: str | None = None) -> str:
        ns = namespace or self.namespace
        if not ns:
            raise ConfigurationError("the management API needs a namespace (--namespace or DOCKYARD_NAMESPACE)")
        return f"/api/v1/namespaces/{_q(ns)}"

    def public(self, rest: str) -> str:
        return f"{self.env_base()}/api/public{rest}"

    # --- chunked import (docs/public-api.md, 'Chunked model import') ----------------------------

    def start_import(
        self,
        *,
        file_name: str,
        file_size: int,
        total_chunks: int,
        file_extension: str,
        file_context: str = "model",
        is_adapter: bool = False,
        sha256: str | None = None,
    ) -> Call:
        body = _drop_none(
            fileContext=file_context,
            totalChunks=total_chunks,
            fileExtension=file_extension,
            fileName=file_name,
            fileSize=file_size,
            isAdapter=is_adapter,
            sha256=sha256,
        )
        return Call("POST", self.public("/files/session/start"), "api-key", json=body)

    def upload_chunk(self, session_id: str, chunk_number: int, data: bytes) -> Call:
        return Call(
            "POST",
            self.public(f"/files/session/{_q(session_id)}"),
            "api-key",
            data={"chunkNumber": str(chunk_number)},
            files={"file": (f"chunk-{chunk_number}", data, "application/octet-stream")},
        )

    def import_session(self, session_id: str) -> Call:
        return Call("GET", self.public(f"/files/session/{_q(session_id)}"), "api-key")

    def abort_import(self, session_id: str) -> Call:
        return Call("DELETE", self.public(f"/files/session/{_q(session_id)}"), "api-key")

    def complete_import(self, session_id: str, sha256: str | None = None) -> Call:
        body = {"sha256": sha256} if sha256 else None
        return Call("POST", self.public(f"/files/session/{_q(session_id)}/complete"), "api-key", json=body)

    # --- deploy and dock status (docs/public-api.md, 'Deploy a model' to 'Dock status') ---------

    def deploy_model(
        self,
        model_id: str,
        *,
        name: str,
        device_type: str,
        model_type: str = "openSource",
        is_deployed_previously: bool = False,
        hyper_parameters: dict[str, Any] | None = None,
        scaling_parameters: dict[str, Any] | None = None,
        optimization_info: dict[str, Any] | None = None,
        base_model: str | None = None,
    ) -> Call:
        body = _drop_none(
            name=name,
            isDeployedPreviously=is_deployed_previously,
            hyperParameters=hyper_parameters,
            scalingParameters=scaling_parameters,
            deviceType=device_type,
            optimizationInfo=optimization_info,
            baseModel=base_model,
        )
        return Call(
            "POST",
            self.public(f"/models/{_q(model_id)}/deploy"),
            "api-key",
            json=body,
            params={"modelType": model_type},
        )

    def deploy_tool(self, tool_id: str, *, is_async: bool) -> Call:
        return Call("POST", self.public(f"/tools/{_q(tool_id)}/deploy"), "api-key", json={"isAsync": is_async})

    def dock_status(self, dock_status_id: str) -> Call:
        return Call("GET", self.public(f"/dock-status/{_q(dock_status_id)}"), "api-key")

    # --- deployed-app call (Contract 2) ----------------------------------------------------------

    def execute(
        self,
        app_id: str,
        message: str,
        *,
        session_id: str | None = None,
        user_id: str | None = None,
        stream: bool = False,
    ) -> Call:
        body: dict[str, Any] = {"message": message, "session_id": session_id, "stream": stream}
        if user_id is not None:
            body["metadata"] = {"user_id": user_id}
        headers = {"Accept": "text/event-stream"} if stream else {}
        return Call("POST", f"{self.env_base()}/v1/apps/{_q(app_id)}/execute", "bearer-key", json=body, headers=headers)

    # --- management: apps and versions -----------------------------------------------------------

    def list_apps(self) -> Call:
        return Call("GET", f"{self.mgmt()}/apps", "kube")

    def get_app(self, app: str) -> Call:
        return Call("GET", f"{self.mgmt()}/apps/{_q(app)}", "kube")

    def create_app(self, name: str, draft: dict[str, Any]) -> Call:
        return Call("POST", f"{self.mgmt()}/apps", "kube", json={"name": name, **draft})

    def update_draft(self, app: str, draft: dict[str, Any]) -> Call:
        return Call("PUT", f"{self.mgmt()}/apps/{_q(app)}/draft", "kube", json=draft)

    def restore_version(self, app: str, version: str) -> Call:
        body = {"version": version, "confirm": True}
        return Call("POST", f"{self.mgmt()}/apps/{_q(app)}/restore", "kube", json=body)

    def create_version(
        self,
        app: str,
        version: str,
        name: str,
        description: str = "",
        *,
        agents: list[dict[str, Any]] | None = None,
        tool_versions: list[dict[str, Any]] | None = None,
        mcp_servers: list[dict[str, Any]] | None = None,
    ) -> Call:
        body = _drop_none(
            version=version,
            name=name,
            description=description,
            agents=agents,
            toolVersions=tool_versions,
            mcpServers=mcp_servers,
        )
        return Call("POST", f"{self.mgmt()}/apps/{_q(app)}/versions", "kube", json=body)

    def list_versions(self, app: str) -> Call:
        return Call("GET", f"{self.mgmt()}/apps/{_q(app)}/versions", "kube")

    def get_version(self, app: str, version: str) -> Call:
        return Call("GET", f"{self.mgmt()}/apps/{_q(app)}/versions/{_q(version)}", "kube")

    def delete_version(self, app: str, version: str) -> Call:
        return Call("DELETE", f"{self.mgmt()}/apps/{_q(app)}/versions/{_q(version)}", "kube")

    # --- management: environments, history, rollback, keys, usage --------------------------------

    def create_environment(self, app: str, name: str, description: str = "", app_version: str | None = None) -> Call:
        body = _drop_none(name=name, description=description, appVersion=app_version)
        return Call("POST", f"{self.mgmt()}/apps/{_q(app)}/environments", "kube", json=body)

    def list_environments(self, app: str) -> Call:
        return Call("GET", f"{self.mgmt()}/apps/{_q(app)}/environments", "kube")

    def get_environment(self, environment: str) -> Call:
        return Call("GET", f"{self.mgmt()}/environments/{_q(environment)}", "kube")

    def deploy_environment(self, environment: str, version: str) -> Call:
        return Call("POST", f"{self.mgmt()}/environments/{_q(environment)}/deploy", "kube", json={"version": version})

    def rollback_environment(self, environment: str, version: str) -> Call:
        body = {"version": version, "confirm": True}
        return Call("POST", f"{self.mgmt()}/environments/{_q(environment)}/rollback", "kube", json=body)

    def change_settings(self, environment: str, settings: dict[str, Any]) -> Call:
        path = f"{self.mgmt()}/environments/{_q(environment)}/settings"
        return Call("PATCH", path, "kube", json=settings)

    def delete_environment(self, environment: str) -> Call:
        return Call("DELETE", f"{self.mgmt()}/environments/{_q(environment)}", "kube", params={"confirm": environment})

    def test_tool(self, environment: str, tool: str, arguments: dict[str, Any]) -> Call:
        body = {"tool": tool, "arguments": arguments}
        return Call("POST", f"{self.mgmt()}/environments/{_q(environment)}/tooltests", "kube", json=body)

    def create_api_key(self, environment: str, name: str) -> Call:
        return Call("POST", f"{self.mgmt()}/environments/{_q(environment)}/apikeys", "kube", json={"name": name})

    def list_api_keys(self, environment: str) -> Call:
        return Call("GET", f"{self.mgmt()}/environments/{_q(environment)}/apikeys", "kube")

    def revoke_api_key(self, environment: str, key_id: str) -> Call:
        return Call("DELETE", f"{self.mgmt()}/environments/{_q(environment)}/apikeys/{_q(key_id)}", "kube")

    def usage(self, environment: str, since: str | None = None, until: str | None = None) -> Call:
        params = _drop_none(**{"from": since, "to": until})
        return Call("GET", f"{self.mgmt()}/environments/{_q(environment)}/usage", "kube", params=params or None)

    def interventions(self, environment: str, limit: int | None = None) -> Call:
        params = _drop_none(limit=limit)
        return Call("GET", f"{self.mgmt()}/environments/{_q(environment)}/interventions", "kube", params=params or None)
