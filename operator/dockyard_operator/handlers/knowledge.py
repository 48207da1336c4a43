"""kopf handlers of KnowledgeBases (docs/knowledge-bases.md): each event (and a timer, for a run waiting
on its embedding model) reconciles the version (``reconcile/knowledgebase.py``: start an indexing run when
its documents or a reindex request moved); a failed indexing Job is reported on its KnowledgeBase; the
admission webhooks refuse deleting a version an active AppVersion pins, and an AppVersion pinning a
KnowledgeBase that does not exist."""

from __future__ import annotations

from typing import Any

import kopf

from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import KB_LABEL, VERSION
from dockyard_operator import knowledge_rules
from dockyard_operator.context import Context
from dockyard_operator.handlers.admission import IGNORE_FAILURES, _refuse
from dockyard_operator.handlers.events import post_events
from dockyard_operator.reconcile.knowledgebase import job_finished, reconcile_knowledge_base
from dockyard_operator.settings import operator_settings

SETTINGS = operator_settings()


@kopf.on.event(GROUP, VERSION, "knowledgebases")
async def knowledge_base_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if type == "DELETED":
        return
    ctx: Context = memo.ctx
    async with ctx.lock(body["metadata"]["uid"]):
        fresh = await ctx.kube.get("knowledgebases", body["metadata"]["namespace"], body["metadata"]["name"])
        if fresh is not None:
            post_events(body, await reconcile_knowledge_base(ctx, fresh))


@kopf.timer(GROUP, VERSION, "knowledgebases", interval=SETTINGS.knowledge_interval_seconds, idle=5)
async def knowledge_base_timer(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    ctx: Context = memo.ctx
    async with ctx.lock(body["metadata"]["uid"]):
        fresh = await ctx.kube.get("knowledgebases", body["metadata"]["namespace"], body["metadata"]["name"])
        if fresh is not None:
            post_events(body, await reconcile_knowledge_base(ctx, fresh))


@kopf.on.event("batch", "v1", "jobs", labels={KB_LABEL: kopf.PRESENT})
async def indexing_job_event(type: str | None, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    if type in ("MODIFIED", "ADDED"):
        ctx: Context = memo.ctx
        await job_finished(ctx.kube, body)


@kopf.on.validate(
    GROUP, VERSION, "knowledgebases", id="validate-knowledgebase", operations=["DELETE"],
    ignore_failures=IGNORE_FAILURES,
)  # fmt: skip
async def validate_knowledge_base(body: kopf.Body, memo: kopf.Memo, **kw: Any) -> None:
    ctx: Context = memo.ctx
    _refuse(await knowledge_rules.kb_delete_refusal(ctx.kube, kw.get("old") or body))


@kopf.on.validate(
    GROUP, VERSION, "appversions", id="validate-appversion-knowledge", operations=["CREATE"],
    ignore_failures=IGNORE_FAILURES,
)  # fmt: skip
async def validate_appversion_knowledge(body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    ctx: Context = memo.ctx
    _refuse(await knowledge_rules.appversion_kb_refusal(ctx.kube, body))
