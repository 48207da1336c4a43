"""The checks of the admission webhooks (kopf-free): each reads what the API server holds now (not
kopf's indexes, which may lag behind a status change by a moment: a refusal or a permission must not
depend on that), applies the pure rules of :mod:`dockyard_operator.environments`, and returns a
:class:`Refusal` or None; ``handlers/admission.py`` turns a refusal into kopf's AdmissionError.

- a Tool used by a deployed version cannot be deleted;
- an AppVersion is validated on create (:mod:`dockyard_operator.version_rules`, MCP servers asked through
  :mod:`dockyard_operator.mcp_probe`) and cannot be deleted while deployed;
- an Environment can only link an existing version, names an OIDC client Secret
  (``spec.access.oidc.clientSecretRef``) only when the user writing it may read that Secret, and has a
  ``spec.pii`` that compiles (its custom patterns: CEL cannot compile a regular expression);
- who deployed (and when) comes from the admission request's userInfo, never from the client
  (:func:`deployment_stamp`).
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from dockyard_core import evaluations, kubepaths, pii
from dockyard_core.resources.v1alpha1 import (
    DEPLOY_ACTION_ANNOTATION,
    DEPLOY_REQUEST_ANNOTATION,
    DEPLOYED_AT_ANNOTATION,
    DEPLOYED_BY_ANNOTATION,
)
from dockyard_operator import environments as envs
from dockyard_operator import mcp_probe
from dockyard_operator import version_rules as rules
from dockyard_operator.kube import KubeApi


@dataclass(frozen=True)
class Refusal:
    """Why a request is refused, and the HTTP status of the refusal."""

    message: str
    code: int


async def _read_from_api(
    kube: KubeApi, namespace: str
) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """AppVersions and Environments as the API server has them now."""
    versions = await kube.list_objects("appversions", namespace)
    environments = await kube.list_objects("environments", namespace)
    return versions, [(e["metadata"]["name"], e) for e in environments]


async def pinned_delete_refusal(kube: KubeApi, obj: Mapping[str, Any], pins: str, what: str) -> Refusal | None:
    """A version of something app versions pin in their list ``pins`` (a Tool: ``toolVersions``, a
    KnowledgeBase: ``knowledgeBaseVersions``) linked to an active version (or a draft deployed somewhere) is not
    deleted: 409 naming each holder and its environments (``what``: the kind as the message names it)."""
    namespace, spec = obj["metadata"]["namespace"], obj.get("spec") or {}
    versions, environments = await _read_from_api(kube, namespace)
    apps = await kube.list_objects("apps", namespace)
    holders = envs.pinned_holders(pins, spec.get("name", ""), spec.get("version", ""), versions, environments, apps)
    if not holders:
        return None
    used = "; ".join(
        f"{v if v.startswith('draft of') else f'app version {v}'} (deployed in {', '.join(e)})"
        for v, e in sorted(holders.items())
    )
    return Refusal(
        f"{what} {obj['metadata']['name']} is linked to an active version and cannot be deleted: used by {used}", 409
    )


async def tool_delete_refusal(kube: KubeApi, tool: Mapping[str, Any]) -> Refusal | None:
    """A Tool linked to an active version (or a draft deployed somewhere) is not deleted."""
    return await pinned_delete_refusal(kube, tool, "toolVersions", "tool")


async def appversion_delete_refusal(kube: KubeApi, version: Mapping[str, Any]) -> Refusal | None:
    """An AppVersion deployed in an Environment is not deleted."""
    namespace, spec = version["metadata"]["namespace"], version.get("spec") or {}
    _, environments = await _read_from_api(kube, namespace)
    held = envs.environments_deploying(spec.get("appRef", ""), spec.get("version", ""), environments)
    if not held:
        return None
    return Refusal(
        f"app version {version['metadata']['name']} is deployed in environment(s) {', '.join(held)}: "
        "deploy another version there (or delete those environments) first",
        409,
    )


async def _secret_headers(kube: KubeApi, namespace: str, name: str) -> dict[str, str] | None:
    """The keys and values of a Secret (the headers an MCP server config sends), or None when it is missing."""
    secret = await kube.get("secrets", namespace, name)
    if secret is None:
        return None
    data = secret.get("data") or {}
    return {k: base64.b64decode(v).decode("utf-8", "replace") for k, v in data.items()}


async def may_read_secret(kube: KubeApi, userinfo: Mapping[str, Any], namespace: str, name: str) -> bool:
    """Whether the user of an admission request may ``get`` the Secret (a SubjectAccessReview)."""
    review = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": userinfo.get("username") or "",
            "uid": userinfo.get("uid") or "",
            "groups": list(userinfo.get("groups") or []),
            "extra": {k: list(v) for k, v in (userinfo.get("extra") or {}).items()},
            "resourceAttributes": {"namespace": namespace, "verb": "get", "resource": "secrets", "name": name},
        },
    }
    answer = await kube.http.request("POST", kubepaths.collection("subjectaccessreviews", None), json=review)
    return bool((answer.get("status") or {}).get("allowed"))


async def appversion_create_refusal(
    kube: KubeApi, body: Mapping[str, Any], userinfo: Mapping[str, Any] | None = None
) -> Refusal | None:
    """A new AppVersion names an existing App, agents with existing models, Tools that exist and MCP servers
    that answer and list tools (:func:`dockyard_operator.version_rules.version_problems`). A Secret of
    MCP headers is read, and its values sent to the server, only when the version's author (``userinfo``)
    may read it: a version must not be a way to send a Secret one may not read to a URL one chose."""
    namespace, spec = body["metadata"]["namespace"], dict(body.get("spec") or {})
    tools = {rules.tool_object(t): await kube.get("tools", namespace, rules.tool_object(t))
             for t in spec.get("toolVersions") or []}  # fmt: skip
    models = {
        m["metadata"]["name"]: str((m.get("spec") or {}).get("name") or "")
        for m in await kube.list_objects("modeldeployments", namespace)
        if not m["metadata"].get("deletionTimestamp")
    } if any(a.get("model") for a in spec.get("agents") or []) else {}  # fmt: skip
    secret_names = {s["headersSecretRef"] for s in spec.get("mcpServers") or [] if s.get("headersSecretRef")}
    secrets = {name: await _secret_headers(kube, namespace, name) for name in secret_names}
    unreadable = {
        name
        for name in secret_names
        if secrets[name] is not None and not await may_read_secret(kube, userinfo or {}, namespace, name)
    }
    app_exists = await kube.get("apps", namespace, spec.get("appRef", "")) is not None
    answers = await mcp_probe.list_all(rules.mcp_targets(spec, tools, secrets, unreadable))
    problems = rules.version_problems(
        spec,
        app_exists=app_exists,
        tools=tools,
        models=models,
        secret_headers=secrets,
        mcp=answers,
        unreadable=unreadable,
    )
    return Refusal(rules.refusal_message(problems), 422) if problems else None


async def environment_link_refusal(
    kube: KubeApi, body: Mapping[str, Any], old: Mapping[str, Any] | None
) -> Refusal | None:
    """An Environment that links a version (newly) links an existing AppVersion."""
    spec = body.get("spec") or {}
    version = spec.get("appVersion")
    if not version or (old is not None and (old.get("spec") or {}).get("appVersion") == version):
        return None
    found = await kube.get("appversions", body["metadata"]["namespace"], f"{spec['appRef']}-{version}")
    if found is not None:
        return None
    return Refusal(
        f"spec.appVersion: app {spec['appRef']!r} has no version {version} (create the AppVersion first)", 422
    )


async def environment_promotion_refusal(
    kube: KubeApi, body: Mapping[str, Any], old: Mapping[str, Any] | None
) -> Refusal | None:
    """An Environment with ``spec.promotion`` links a new version only when the version passed its suite
    (:func:`dockyard_core.evaluations.gate_problem`, docs/promotion.md); a rollback (the deploy request of
    the facade's rollback, or the SLO watcher's AutoRollback) is not gated. A canary's version
    (``spec.canary.appVersion``) is gated as well: a canary is a deploy to a share of the sessions."""
    spec = body.get("spec") or {}
    promotion = spec.get("promotion")
    if not promotion:
        return None
    old_spec = (old or {}).get("spec") or {}
    version = spec.get("appVersion")
    if old is not None and old_spec.get("appVersion") == version:
        version = None
    request = str((body["metadata"].get("annotations") or {}).get(DEPLOY_REQUEST_ANNOTATION) or "")
    old_request = (((old or {}).get("metadata") or {}).get("annotations") or {}).get(DEPLOY_REQUEST_ANNOTATION)
    if request.startswith(("Rollback ", "AutoRollback ")) and request != old_request:  # back to a working version
        version = None
    canary = (spec.get("canary") or {}).get("appVersion")
    if canary == (old_spec.get("canary") or {}).get("appVersion"):
        canary = None
    for wanted in (version, canary):
        if wanted:
            problem = await _promotion_problem(kube, body, spec, promotion, str(wanted))
            if problem:
                return Refusal(problem if wanted == version else f"spec.canary: {problem}", 422)
    return None


async def _promotion_problem(
    kube: KubeApi, body: Mapping[str, Any], spec: Mapping[str, Any], promotion: Mapping[str, Any], version: str
) -> str | None:
    namespace, name = body["metadata"]["namespace"], body["metadata"]["name"]
    found = await kube.get("appversions", namespace, f"{spec['appRef']}-{version}")
    summaries = ((found or {}).get("status") or {}).get("evaluations") or []
    before: tuple[str, list[dict[str, Any]]] | None = None
    if promotion.get("after"):
        after = str(promotion["after"])
        for env in await kube.list_objects("environments", namespace):
            env_spec = env.get("spec") or {}
            if env_spec.get("appRef") == spec.get("appRef") and after in (
                env["metadata"]["name"],
                env_spec.get("displayName"),
            ):
                before = (env["metadata"]["name"], list((env.get("status") or {}).get("history") or []))
                break
    return evaluations.gate_problem(
        promotion=promotion, environment=name, version=version, summaries=summaries, before=before
    )


def environment_pii_refusal(body: Mapping[str, Any]) -> Refusal | None:
    """``spec.pii`` compiles (:func:`dockyard_core.pii.spec_problems`): each custom pattern is a regular
    expression that matches something, and the field of each that is not is named."""
    problems = pii.spec_problems((body.get("spec") or {}).get("pii"))
    if not problems:
        return None
    return Refusal("; ".join(f"{field}: {message}" for field, message in problems), 422)


def _oidc_secret(spec: Mapping[str, Any] | None) -> tuple[str | None, str | None]:
    oidc = ((spec or {}).get("access") or {}).get("oidc") or {}
    return oidc.get("clientSecretRef"), oidc.get("issuer")


async def environment_oidc_secret_refusal(
    kube: KubeApi, body: Mapping[str, Any], old: Mapping[str, Any] | None, userinfo: Mapping[str, Any] | None
) -> Refusal | None:
    """The facade sends the ``clientSecret`` of ``spec.access.oidc.clientSecretRef`` to the issuer the
    Environment names: whoever newly names a Secret, or points a named Secret at another issuer, must be
    allowed to ``get`` that Secret themselves (a SubjectAccessReview), else editing an Environment would
    hand any Secret of the namespace to a server of the editor's choosing."""
    secret, issuer = _oidc_secret(body.get("spec"))
    if not secret or (old is not None and _oidc_secret(old.get("spec")) == (secret, issuer)):
        return None
    namespace = body["metadata"]["namespace"]
    if await may_read_secret(kube, userinfo or {}, namespace, secret):
        return None
    user = (userinfo or {}).get("username") or "this user"
    return Refusal(
        f"spec.access.oidc.clientSecretRef: {user} may not get Secret {namespace}/{secret}, whose clientSecret "
        f"the facade would send to the issuer {issuer}; only someone allowed to read that Secret may name it "
        "here (or grant get on it, e.g. a Role with resourceNames)",
        403,
    )


STAMPED = (DEPLOYED_BY_ANNOTATION, DEPLOYED_AT_ANNOTATION, DEPLOY_ACTION_ANNOTATION)


def deployment_stamp(
    *,
    operation: str,
    old: Any,
    body: Any,
    notes: dict[str, Any],
    old_notes: dict[str, Any],
    username: str,
    now: datetime,
) -> dict[str, Any]:
    """The annotations the mutating webhook sets (pure: unit-tested)."""
    version = (body.get("spec") or {}).get("appVersion")
    created = operation == "CREATE" or old is None
    version_changed = created or (old.get("spec") or {}).get("appVersion") != version
    request = notes.get(DEPLOY_REQUEST_ANNOTATION)
    requested = bool(request) and request != old_notes.get(DEPLOY_REQUEST_ANNOTATION)
    if version_changed or requested:
        if not version_changed:
            action = "Redeploy"
        elif requested and str(request).split(" ", 1)[0] in ("Rollback", "Promote", "AutoRollback"):
            action = str(request).split(" ", 1)[0]
        else:
            action = "Deploy"
        return {
            DEPLOYED_BY_ANNOTATION: username,
            # microseconds: two deployments in one second are two history entries
            DEPLOYED_AT_ANNOTATION: now.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            DEPLOY_ACTION_ANNOTATION: action,
        }
    return {key: old_notes.get(key) for key in STAMPED if notes.get(key) != old_notes.get(key)}
