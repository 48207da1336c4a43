"""The admission webhooks of Tools, AppVersions and Environments (kopf serves them; the checks are the
pure ones of :mod:`dockyard_operator.environments`, on what the API server holds now).

- a Tool used by a deployed version cannot be deleted;
- an AppVersion is validated on create and cannot be deleted while deployed;
- an Environment can only link an existing version;
- who deployed (and when) comes from the admission request's userInfo, never from the client.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf

from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import (
    DEPLOY_ACTION_ANNOTATION,
    DEPLOY_REQUEST_ANNOTATION,
    DEPLOYED_AT_ANNOTATION,
    DEPLOYED_BY_ANNOTATION,
    VERSION,
)
from dockyard_operator import environments as envs
from dockyard_operator.context import Context
from dockyard_operator.kube import KubeApi


def _kube(memo: Any) -> KubeApi:
    ctx: Context = memo.ctx
    return ctx.kube


IGNORE_FAILURES = False
"""failurePolicy Fail, locally (the configurations the operator writes itself) as in the chart's default:
while no operator answers, the writes the webhooks check are refused rather than let through unchecked.
The trade-off is documented in docs/reliability.md ("Admission webhooks fail closed")."""


async def _read_from_api(memo: Any, namespace: str) -> tuple[list[dict[str, Any]], list[tuple[str, dict[str, Any]]]]:
    """AppVersions and Environments as the API server has them now (not the indexes, which may lag
    behind a status change by a moment: a refusal or a permission must not depend on that)."""
    kube = _kube(memo)
    versions = await kube.list_objects("appversions", namespace)
    environments = await kube.list_objects("environments", namespace)
    return versions, [(e["metadata"]["name"], e) for e in environments]


@kopf.on.validate(GROUP, VERSION, "tools", id="validate-tool", operations=["DELETE"], ignore_failures=IGNORE_FAILURES)
async def validate_tool(body: kopf.Body, memo: Any, **kw: Any) -> None:
    tool = kw.get("old") or body
    namespace, spec = tool["metadata"]["namespace"], tool.get("spec") or {}
    versions, environments = await _read_from_api(memo, namespace)
    apps = await _kube(memo).list_objects("apps", namespace)
    holders = envs.tool_holders(spec.get("name", ""), spec.get("version", ""), versions, environments, apps)
    if holders:
        used = "; ".join(
            f"{v if v.startswith('draft of') else f'app version {v}'} (deployed in {', '.join(e)})"
            for v, e in sorted(holders.items())
        )
        raise kopf.AdmissionError(
            f"tool {tool['metadata']['name']} is linked to an active version and cannot be deleted: used by {used}",
            code=409,
        )


@kopf.on.validate(
    GROUP, VERSION, "appversions", id="validate-appversion", operations=["CREATE", "DELETE"],
    ignore_failures=IGNORE_FAILURES,
)  # fmt: skip
async def validate_appversion(body: kopf.Body, memo: Any, **kw: Any) -> None:
    if kw.get("operation") == "DELETE":
        version = kw.get("old") or body
        namespace, spec = version["metadata"]["namespace"], version.get("spec") or {}
        _, environments = await _read_from_api(memo, namespace)
        held = envs.environments_deploying(spec.get("appRef", ""), spec.get("version", ""), environments)
        if held:
            raise kopf.AdmissionError(
                f"app version {version['metadata']['name']} is deployed in environment(s) {', '.join(held)}: "
                "deploy another version there (or delete those environments) first",
                code=409,
            )
        return
    kube = _kube(memo)
    namespace, spec = body["metadata"]["namespace"], dict(body.get("spec") or {})
    tools = {f"{t['name']}-{t['version']}" for t in spec.get("toolVersions") or []}
    models = {a["model"] for a in spec.get("agents") or [] if a.get("model")}
    tool_exists = {t: await kube.get("tools", namespace, t) is not None for t in tools}
    model_exists = {m: await kube.get("modeldeployments", namespace, m) is not None for m in models}
    app_exists = await kube.get("apps", namespace, spec.get("appRef", "")) is not None
    problems = envs.version_problems(spec, tool_exists=tool_exists, model_exists=model_exists, app_exists=app_exists)
    if problems:
        raise kopf.AdmissionError("the version is not valid: " + "; ".join(problems), code=422)


@kopf.on.validate(
    GROUP, VERSION, "environments", id="validate-environment", operations=["CREATE", "UPDATE"],
    ignore_failures=IGNORE_FAILURES,
)  # fmt: skip
async def validate_environment(body: kopf.Body, memo: Any, **kw: Any) -> None:
    spec = body.get("spec") or {}
    version = spec.get("appVersion")
    old = kw.get("old")
    if not version or (old is not None and (old.get("spec") or {}).get("appVersion") == version):
        return
    found = await _kube(memo).get("appversions", body["metadata"]["namespace"], f"{spec['appRef']}-{version}")
    if found is None:
        raise kopf.AdmissionError(
            f"spec.appVersion: app {spec['appRef']!r} has no version {version} (create the AppVersion first)", code=422
        )


@kopf.on.mutate(
    GROUP, VERSION, "environments", id="mutate-environment", operations=["CREATE", "UPDATE"],
    ignore_failures=IGNORE_FAILURES,
)  # fmt: skip
def stamp_deployment(body: kopf.Body, userinfo: kopf.UserInfo, patch: kopf.Patch, **kw: Any) -> None:
    """Who deployed, when, and what it was: from the request's userInfo when the linked version changes
    or a new deploy request comes (a redeploy of the same version); otherwise the recorded values are
    kept (a client cannot rewrite them)."""
    old = kw.get("old")
    notes = dict(body["metadata"].get("annotations") or {})
    old_notes: dict[str, Any] = dict(old["metadata"].get("annotations") or {}) if old is not None else {}
    for key, value in deployment_stamp(
        operation=str(kw.get("operation") or ""),
        old=old,
        body=body,
        notes=notes,
        old_notes=old_notes,
        username=str(userinfo.get("username") or ""),
        now=datetime.now(UTC),
    ).items():
        patch.metadata.annotations[key] = value


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
        elif requested and str(request).split(" ", 1)[0] == "Rollback":
            action = "Rollback"
        else:
            action = "Deploy"
        return {
            DEPLOYED_BY_ANNOTATION: username,
            # microseconds: two deployments in one second are two history entries
            DEPLOYED_AT_ANNOTATION: now.isoformat(timespec="microseconds").replace("+00:00", "Z"),
            DEPLOY_ACTION_ANNOTATION: action,
        }
    return {key: old_notes.get(key) for key in STAMPED if notes.get(key) != old_notes.get(key)}
