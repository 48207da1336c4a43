"""Pure logic of Apps, AppVersions and Environments: deployment history, generated URLs and cURL
script, the pre-production checklist, the objects an environment owns, the audit record it leaves
behind, and the dependency checks the admission webhooks make. No kopf, no API calls."""

from __future__ import annotations

import html
import json
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dockyard_core.resources.v1alpha1 import (
    API_VERSION,
    APP_LABEL,
    ENVIRONMENT_LABEL,
    AppVersion,
    ChecklistItem,
    HistoryEntry,
)
from dockyard_core.resources.v1alpha1.tool import tool_deployment_name
from dockyard_core.tooltests import untested, wanted
from dockyard_operator import observability, safeguards
from dockyard_operator.evaluation_items import evaluation_items
from dockyard_operator.knowledge_items import knowledge_item
from dockyard_operator.safeguards import names as _names

DRAFT = "draft"
HISTORY_LIMIT = 100
DETAIL_LIMIT = 1024
"""At most this many characters of a checklist item's detail (ChecklistItem.detail)."""


def desired_version(spec: Mapping[str, Any]) -> str:
    """The version an Environment asks for: its appVersion, or the App's draft."""
    return str(spec.get("appVersion") or DRAFT)


def next_history(
    history: list[HistoryEntry],
    version: str,
    deployed_at: datetime,
    deployed_by: str,
    action: str = "Deploy",
    evaluation_run: str = "",
) -> list[HistoryEntry]:
    """The history after the deployment (version, deployed_at): unchanged when it is already the
    Active entry (level-based: re-running never adds a second entry), else a new Active entry on top
    and every earlier one Previous; an earlier entry that never became healthy is recorded as not
    healthy (it was replaced first). At most HISTORY_LIMIT entries are kept (the oldest go). ``evaluation_run``:
    the version's newest evaluation run in the environment when it was deployed (docs/promotion.md)."""
    if history and history[0].version == version and history[0].deployed_at == deployed_at:
        return history
    if action not in ("Deploy", "Redeploy", "Rollback"):
        action = "Deploy"
    entry = HistoryEntry.model_validate(
        {
            "version": version,
            "deployedAt": deployed_at,
            "deployedBy": deployed_by,
            "status": "Active",
            "action": action,
            "evaluationRun": evaluation_run[:64],
        }
    )
    earlier = [
        h.model_copy(update={"status": "Previous", "healthy": False if h.healthy is None else h.healthy})
        for h in history
    ]
    return [entry, *earlier][:HISTORY_LIMIT]


def record_health(history: list[HistoryEntry], version: str, phase: str) -> list[HistoryEntry]:
    """The Active entry of ``version`` records whether its deployment became healthy: true when the
    environment is Active (and it stays true: a later failure of a version that served is a new
    problem, not a failed deployment), false while it has Failed without having been healthy."""
    if not history or history[0].version != version or history[0].healthy is True:
        return history
    if phase == "Active":
        return [history[0].model_copy(update={"healthy": True}), *history[1:]]
    if phase == "Failed" and history[0].healthy is None:
        return [history[0].model_copy(update={"healthy": False}), *history[1:]]
    return history


@dataclass(frozen=True)
class Urls:
    web_client: str
    api_base: str
    widget_script: str


def urls(public_url: str, namespace: str, environment: str) -> Urls:
    """The environment's own endpoints: its ``{base_url}``, ``{api_base_url}`` and ``{widget_url}`` are all
    ``<public>/e/<namespace>/<environment>`` (docs/apps-environments.md, "Environments")."""
    base = f"{public_url.rstrip('/')}/e/{namespace}/{environment}"
    return Urls(web_client=f"{base}/web/", api_base=base, widget_script=f"{base}/v1/loader.js")


def curl_script(api_base: str, app_id: str) -> str:
    """A ready-to-run cURL call of the deployed app (``curlScript``, docs/apps-environments.md, "Environments");
    the key stays a placeholder."""
    body = json.dumps({"message": "Hello!", "session_id": "session-1", "metadata": {"user_id": "user-1"}})
    return (
        f"curl -sS -X POST {shlex.quote(f'{api_base}/v1/apps/{app_id}/execute')} \\\n"
        '  -H "Authorization: Bearer $DOCKYARD_API_KEY" \\\n'
        '  -H "Content-Type: application/json" \\\n'
        f"  -d {shlex.quote(body)}"
    )


def embed_code(widget_script: str, app_id: str, container_id: str = "dockyard-chat") -> str:
    """The Embed Code (docs/web-client-and-widget.md, "The widget"): a container element and the loader
    script with the app id, and a comment on the two ways to use it: key-less, for the sites in the
    environment's spec.widget.allowedOrigins (short-lived tokens), or with the user's API key inserted
    (SPEC §7), which chats from any site unless allowedOrigins lists some, and which every visitor can read."""
    attr = html.escape
    return (
        f'<div id="{attr(container_id)}"></div>\n'
        f'<script src="{attr(widget_script)}" data-app-id="{attr(app_id)}" data-container="{attr(container_id)}" '
        "async></script>\n"
        "<!-- Two ways to use this snippet:\n"
        "     1. Recommended, no key: list this site's origin in the environment's allowed origins\n"
        "        (spec.widget.allowedOrigins); the widget gets short-lived tokens for the listed sites only.\n"
        "     2. Insert your API key as the attribute data-api-key of the script element: the chat then\n"
        "        works on any site, unless the environment lists allowed origins (then on those only).\n"
        "        A key in a web page can be read by every visitor and works until it is revoked. -->"
    )


def tool_deployments(env: Mapping[str, Any], content: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The ToolDeployments an environment owns: one per tool version of what it deploys."""
    meta = env["metadata"]
    owner = {
        "apiVersion": API_VERSION,
        "kind": "Environment",
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    out = []
    for ref in content.get("toolVersions") or []:
        out.append(
            {
                "apiVersion": API_VERSION,
                "kind": "ToolDeployment",
                "metadata": {
                    "name": tool_deployment_name(meta["name"], ref["name"], ref["version"]),
                    "namespace": meta["namespace"],
                    "labels": {
                        ENVIRONMENT_LABEL: meta["name"],
                        APP_LABEL: env["spec"]["appRef"],
                        "app.kubernetes.io/managed-by": "dockyard",
                    },
                    "ownerReferences": [owner],
                },
                "spec": {"toolRef": f"{ref['name']}-{ref['version']}", "isAsync": True},
            }
        )
    return out


def checklist(
    *,
    content: Mapping[str, Any] | None,
    tool_jobs: Mapping[str, str | None],
    key_count: int,
    version_found: bool,
    rate_limits: Mapping[str, Any] | None = None,
    tested: ToolTesting | None = None,
    pii: Mapping[str, Any] | None = None,
    evaluations: Sequence[Mapping[str, Any]] = (),
    knowledge_bases: Mapping[str, Mapping[str, Any] | None] | None = None,
    observed: observability.Observed | None = None,
) -> list[ChecklistItem]:
    """The pre-production checklist (docs/apps-environments.md, "Pre-production checklist"): computed where
    the cluster tells, Manual where it cannot.

    ``tool_jobs``: ToolDeployment name -> dock status of its latest job (None: none yet).
    ``rate_limits``: the Environment's ``spec.rateLimits``.
    ``tested``: the recorded tool test calls of the version and this environment's deployments of its tools.
    ``pii``: the Environment's ``spec.pii`` (None: PII protection not configured).
    ``evaluations``: the version's ``status.evaluations`` (the Testing items and "Agents tested" read the
    newest run in this environment: :mod:`dockyard_operator.evaluation_items`).
    ``knowledge_bases``: the KnowledgeBases the version pins, by object name (None: missing;
    :mod:`dockyard_operator.knowledge_items`).
    ``observed``: what the Monitoring items read (:mod:`dockyard_operator.observability`; None: nothing
    configured, no usage).
    """
    content = content or {}
    servers = content.get("mcpServers") or []
    items: list[ChecklistItem] = []

    def add(category: str, item: str, state: str, detail: str) -> None:
        items.append(
            ChecklistItem.model_validate(
                {"category": category, "item": item, "state": state, "detail": _fit(detail, DETAIL_LIMIT)}
            )
        )

    evaluated = evaluation_items(
        content, evaluations, tested.environment if tested else "", tested.version if tested else DRAFT
    )
    add("Configuration", "Agents tested", *evaluated["Agents tested"])
    add("Configuration", "Tools deployed and tested", *_tools_item(content, tool_jobs, version_found, tested))
    add(
        "Configuration",
        "Knowledge bases connected and indexed",
        *knowledge_item(content, knowledge_bases or {}, version_found),
    )
    add("Configuration", "Guardrails enabled", *safeguards.guardrails_item(content, version_found))
    add("Configuration", "PII protection configured", *safeguards.pii_item(pii))
    for item in ("Diagnostics pass", "Key flows tested", "Edge cases tested", "Error handling tested"):
        add("Testing", item, *evaluated[item])
    add(
        "Security",
        "API keys generated",
        "Done" if key_count else "NotDone",
        f"{key_count} active key(s)" if key_count else "generate a key: POST .../apikeys",
    )
    add("Security", "Access controls", "Manual", "who may manage the app is Kubernetes RBAC (dockyard roles)")
    add("Security", "Sensitive data protected", *safeguards.sensitive_item(servers, pii))
    limits = [
        f"{value} {unit}"
        for value, unit in (
            ((rate_limits or {}).get("requestsPerMinute"), "requests per minute per API key"),
            ((rate_limits or {}).get("tokensPerDay"), "tokens per day"),
        )
        if value
    ]
    add(
        "Security",
        "Rate limits set",
        "Done" if limits else "NotDone",
        "spec.rateLimits: " + ", ".join(limits)
        if limits
        else "set spec.rateLimits (requestsPerMinute, tokensPerDay) to limit calls of the deployed app",
    )
    watched = observed or observability.Observed(observability.MonitoringFacts(), "", "", None, None, None)
    for item, (state, detail) in observability.monitoring_items(watched).items():
        add("Monitoring", item, state, detail)
    return items


MANUAL: dict[str, str] = {}
"""What would compute each item Dockyard cannot compute yet (docs/apps-environments.md): none left; "Access
controls" stays Manual (who may manage the app is Kubernetes RBAC, decided outside Dockyard)."""


TEST_HOW = "test-call each: dockyard tool test, POST .../environments/{env}/tooltests or the console's Test"


@dataclass(frozen=True)
class ToolTesting:
    """What the item "Tools deployed and tested" reads besides the version: where it is deployed and tested."""

    environment: str
    version: str
    tests: Sequence[Mapping[str, Any]]
    """The version's (or the draft App's) status.toolTests."""
    revisions: Mapping[str, str]
    """ToolDeployment name -> its uid (dockyard_core.tooltests.revision)."""


def _tools_item(
    content: Mapping[str, Any], tool_jobs: Mapping[str, str | None], version_found: bool, tested: ToolTesting | None
) -> tuple[str, str]:
    """The item "Tools deployed and tested": Done only when every tool of the version is deployed (its
    ToolDeployment SUCCESS) and has a passing test call recorded against its current deployment in this
    environment (dockyard_core.tooltests: HTTP tools, the MCP tools the agents name, and each MCP server
    whose tools no agent names); otherwise NotDone, naming what is not deployed and what is untested."""
    wants = wanted(content, tested.environment if tested else "", tested.revisions if tested else {})
    if not tool_jobs and not wants:
        return ("Done" if version_found else "NotDone"), "the version uses no tools"
    failing = sorted(n for n, s in tool_jobs.items() if s != "SUCCESS")
    missing = untested(wants, tested.tests, tested.environment, tested.version) if tested else [w.label for w in wants]
    if not failing and not missing:
        return "Done", f"{len(wants)} tool(s) deployed and tested: a passing test call recorded for each"
    parts = [f"not deployed (not SUCCESS): {_names(failing)}"] if failing else []
    if missing:
        parts.append(f"no passing test call against the current deployment: {_names(missing)} ({TEST_HOW})")
    return "NotDone", "; ".join(parts)


def _fit(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --- dependency checks (admission webhooks) ----------------------------------------------------------


def version_object(app: str, version: str) -> str:
    return AppVersion.object_name(app, version)


def environments_deploying(app: str, version: str, environments: Iterable[tuple[str, Mapping[str, Any]]]) -> list[str]:
    """Environments (by name) that deploy ``version`` of ``app``: linked in spec or still active."""
    held = []
    for name, env in environments:
        spec, st = env.get("spec") or {}, env.get("status") or {}
        if spec.get("appRef") != app:
            continue
        if spec.get("appVersion") == version or st.get("activeVersion") == version:
            held.append(name)
    return sorted(held)


def pinned_holders(
    pins: str,
    name: str,
    version: str,
    versions: Iterable[Mapping[str, Any]],
    environments: Sequence[tuple[str, Mapping[str, Any]]],
    apps: Iterable[Mapping[str, Any]] = (),
) -> dict[str, list[str]]:
    """What holds version ``version`` of ``name`` pinned in the app content's list ``pins`` (``toolVersions``,
    ``knowledgeBaseVersions``), each with the environments deploying it: AppVersion object names of deployed
    versions that pin it, and ``draft of app <name>`` for an App whose draft pins it while an environment
    serves that draft (the draft environment does)."""

    def pinned(spec: Mapping[str, Any]) -> bool:
        return (name, version) in {(t.get("name"), t.get("version")) for t in spec.get(pins) or []}

    holders: dict[str, list[str]] = {}
    for app_version in versions:
        spec = app_version.get("spec") or {}
        if not pinned(spec):
            continue
        envs = environments_deploying(spec.get("appRef", ""), spec.get("version", ""), environments)
        if envs:
            holders[version_object(spec.get("appRef", ""), spec.get("version", ""))] = envs
    for app in apps:
        app_name = (app.get("metadata") or {}).get("name", "")
        if not pinned(app.get("spec") or {}):
            continue
        serving = sorted(
            env_name
            for env_name, env in environments
            if (env.get("spec") or {}).get("appRef") == app_name
            and (
                not (env.get("spec") or {}).get("appVersion") or (env.get("status") or {}).get("activeVersion") == DRAFT
            )
        )
        if serving:
            holders[f"draft of app {app_name}"] = serving
    return holders


def tool_holders(
    tool_name: str,
    tool_version: str,
    versions: Iterable[Mapping[str, Any]],
    environments: Sequence[tuple[str, Mapping[str, Any]]],
    apps: Iterable[Mapping[str, Any]] = (),
) -> dict[str, list[str]]:
    """What holds the tool (:func:`pinned_holders` of ``toolVersions``)."""
    return pinned_holders("toolVersions", tool_name, tool_version, versions, environments, apps)
