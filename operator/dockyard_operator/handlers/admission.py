"""The admission webhooks of Tools, AppVersions and Environments: kopf serves them, the kopf-free checks
of :mod:`dockyard_operator.admission` decide (on what the API server holds now), and a refusal becomes
kopf's AdmissionError."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import kopf

from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION
from dockyard_operator import admission
from dockyard_operator.admission import Refusal, deployment_stamp
from dockyard_operator.context import Context
from dockyard_operator.kube import KubeApi


def _kube(memo: Any) -> KubeApi:
    ctx: Context = memo.ctx
    return ctx.kube


def _refuse(refusal: Refusal | None) -> None:
    if refusal is not None:
        raise kopf.AdmissionError(refusal.message, code=refusal.code)


IGNORE_FAILURES = False
"""failurePolicy Fail, locally (the configurations the operator writes itself) as in the chart's default:
while no operator answers, the writes the webhooks check are refused rather than let through unchecked.
The trade-off is documented in docs/reliability.md ("Admission webhooks fail closed")."""


@kopf.on.validate(GROUP, VERSION, "tools", id="validate-tool", operations=["DELETE"], ignore_failures=IGNORE_FAILURES)
async def validate_tool(body: kopf.Body, memo: Any, **kw: Any) -> None:
    _refuse(await admission.tool_delete_refusal(_kube(memo), kw.get("old") or body))


@kopf.on.validate(
    GROUP, VERSION, "appversions", id="validate-appversion", operations=["CREATE", "DELETE"],
    ignore_failures=IGNORE_FAILURES,
)  # fmt: skip
async def validate_appversion(body: kopf.Body, memo: Any, userinfo: kopf.UserInfo, **kw: Any) -> None:
    if kw.get("operation") == "DELETE":
        _refuse(await admission.appversion_delete_refusal(_kube(memo), kw.get("old") or body))
    else:
        _refuse(await admission.appversion_create_refusal(_kube(memo), body, userinfo))


@kopf.on.validate(
    GROUP, VERSION, "environments", id="validate-environment", operations=["CREATE", "UPDATE"],
    ignore_failures=IGNORE_FAILURES,
)  # fmt: skip
async def validate_environment(body: kopf.Body, memo: Any, userinfo: kopf.UserInfo, **kw: Any) -> None:
    _refuse(admission.environment_pii_refusal(body))
    _refuse(await admission.environment_link_refusal(_kube(memo), body, kw.get("old")))
    _refuse(await admission.environment_promotion_refusal(_kube(memo), body, kw.get("old")))
    _refuse(await admission.environment_oidc_secret_refusal(_kube(memo), body, kw.get("old"), userinfo))


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
