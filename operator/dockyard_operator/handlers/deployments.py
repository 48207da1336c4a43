"""kopf handlers of ModelDeployments and ToolDeployments. Handlers stay thin: the reconciles
(``reconcile/modeldeployment.py``, ``reconcile/tooldeployment.py``) and the pure builders do the work.
In-memory views keep what the reconcilers read (kopf's indexes of Nodes, Models and Tools; the
workloads' Deployments and Pods in :mod:`dockyard_operator.workloads`), rebuilt from the API on every
start, so observing 1,000 rollouts costs no API reads.

ModelDeployments and ToolDeployments are reconciled by a :class:`~dockyard_operator.workqueue.WorkQueue`
each: the watch events of the object, of its Deployment and Pods (:mod:`dockyard_operator.workloads`),
and of its Model or Tool only trigger a reconcile, which the queue coalesces and serialises per object.
No kopf timer runs per object, so kopf needs no finalizer on them and writes no bookkeeping to them.

kopf does not watch ModelDeployments: :mod:`dockyard_operator.model_deployments` lists and watches them and
hands each to the listeners registered here with :func:`on_model_deployment` (the work queue and the
autoscalers below, the Environments in ``environments.py``), as kopf called its ``on.event`` handlers.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import kopf

from dockyard_core.devices import GPU_RESOURCE, INSTANCE_TYPE_LABEL
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION
from dockyard_operator import tracing
from dockyard_operator.context import Context, Views, snapshot
from dockyard_operator.handlers.events import post_event, post_events
from dockyard_operator.kube import Conflict, Gone
from dockyard_operator.scaling import autoscaler_loop, autoscaling_enabled
from dockyard_operator.scheduling import parse_quantity
from dockyard_operator.workqueue import Body, ObjectKey, Outcome, WorkQueue, key_of

# --- indexes (the workloads' Deployments and Pods: dockyard_operator.workloads) -----------------------


@kopf.index("", "v1", "nodes", labels={INSTANCE_TYPE_LABEL: kopf.PRESENT})
async def node_capacity(labels: kopf.Labels, status: kopf.Status, **_: Any) -> Any:
    """Per instance type: each node's allocatable resources, in base units."""
    allocatable = status.get("allocatable") or {}
    wanted = ("cpu", "memory", GPU_RESOURCE)
    return {labels[INSTANCE_TYPE_LABEL]: {r: parse_quantity(allocatable[r]) for r in wanted if r in allocatable}}


@kopf.index(GROUP, VERSION, "models")
async def models(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    return {(namespace or "", name): snapshot(body)}


@kopf.index(GROUP, VERSION, "tools")
async def tools(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    return {(namespace or "", name): snapshot(body)}


def _views(ctx: Context, kw: dict[str, Any]) -> Views:
    assert ctx.workloads is not None  # built at start-up (handlers/lifecycle.py)
    return Views(
        deployments=ctx.workloads.deployments,
        pods=ctx.workloads.pods,
        nodes=kw["node_capacity"],
        models=kw["models"],
        tools=kw["tools"],
    )


# --- ModelDeployments and ToolDeployments ------------------------------------------------------------


async def reconcile_queued(ctx: Context, reconcile: Any, body: Body) -> Outcome:
    """Run one queued reconcile; a conflict or a vanished object is an outcome, not an error."""
    assert ctx.views is not None  # set before the watches that queue objects start (_start)
    assert ctx.workloads is not None
    if not ctx.workloads.synced:  # after a start: not before the workloads' first list is in
        await ctx.workloads.wait_synced()
    with tracing.object_span(f"reconcile {body.get('kind')}", body) as span:
        try:
            outcome: Outcome = await reconcile(ctx, body, ctx.views)
            post_events(body, outcome.events)
        except Conflict:  # the object changed meanwhile: its watch event brings the new version, and a reconcile
            tracing.result(span, "conflict")
            return Outcome(result="conflict")
        except Gone:  # deleted meanwhile (or its namespace): its DELETED event forgets it
            tracing.result(span, "gone")
            return Outcome(result="gone")
        except Exception:
            tracing.result(span, "error")
            raise
        tracing.result(span, outcome.result)
        return outcome


def _start(memo: kopf.Memo, kw: dict[str, Any]) -> None:
    """Once kopf's indexes are filled (kopf calls no handler before every indexed kind's initial listing
    is in): capture them, and start the watches whose events queue reconciles that read them."""
    ctx: Context = memo.ctx
    if ctx.views is not None:
        return
    ctx.indexes = {name: index for name, index in kw.items() if isinstance(index, kopf.Index)}
    ctx.views = _views(ctx, kw)  # kopf's indexes are live mappings: capture them once
    # Started here, inside kopf's processing of an event: the tasks of the lists + watches, and the
    # reconciles their events start, inherit the context kopf posts Events from (kopf.info/warn).
    assert ctx.workloads is not None
    ctx.workloads.start()
    memo.model_deployments.start()


# Any cluster that can run a ModelDeployment has Nodes, and kopf watches them anyway (node_capacity): the
# first event of one after kopf's indexes are filled starts the watches (a ToolDeployment's, a Model's or
# a Tool's does too, whichever comes first). Afterwards the filter keeps kopf from calling it at all.
@kopf.on.event("", "v1", "nodes", when=lambda memo, **_: memo.ctx.views is None)
async def indexes_filled(memo: kopf.Memo, **kw: Any) -> None:
    _start(memo, kw)


ModelDeploymentListener = Callable[[kopf.Memo, Body, bool], None]
MODEL_DEPLOYMENT_LISTENERS: list[ModelDeploymentListener] = []
"""What hears of each ModelDeployment (``listener(memo, body, deleted)``), in order of registration (as
kopf called its handlers): the watch is not kopf's (:mod:`dockyard_operator.model_deployments`)."""


def on_model_deployment(listener: ModelDeploymentListener) -> ModelDeploymentListener:
    """Register a listener of the ModelDeployment watch (the way ``@kopf.on.event`` registered a handler)."""
    MODEL_DEPLOYMENT_LISTENERS.append(listener)
    return listener


def model_deployment_changed(memo: kopf.Memo, body: Body, deleted: bool) -> None:
    """One ModelDeployment listed, added, modified or deleted: every listener hears of it."""
    for listener in MODEL_DEPLOYMENT_LISTENERS:
        listener(memo, body, deleted)


def _watch(memo: kopf.Memo, queue: WorkQueue, body: Body, deleted: bool) -> None:
    if deleted:  # children go with their owner (garbage collection)
        queue.forget(body)
        memo.ctx.forget(body["metadata"]["uid"])
    else:
        queue.observe(body)


# Every watch event of the object (creation, any change, the listing after a start or a lost watch)
# queues a reconcile: level-based, and no handler-progress bookkeeping is written back to the objects.
@on_model_deployment
def model_deployment_event(memo: kopf.Memo, body: Body, deleted: bool) -> None:
    _watch(memo, memo.mdeps, body, deleted)
    key = key_of(body)
    autoscalers: dict[ObjectKey, asyncio.Task[None]] = memo.autoscalers
    if deleted:
        if (task := autoscalers.pop(key, None)) is not None:
            task.cancel()
    elif autoscaling_enabled(body.get("spec") or {}) and (key not in autoscalers or autoscalers[key].done()):
        autoscalers[key] = asyncio.create_task(autoscaler_loop(memo.mdeps, key, memo.ctx, memo.http, post_event))


@kopf.on.event(GROUP, VERSION, "tooldeployments")
async def tool_deployment_event(event: kopf.RawEvent, memo: kopf.Memo, body: kopf.Body, **kw: Any) -> None:
    _start(memo, kw)
    _watch(memo, memo.tdeps, body, event["type"] == "DELETED")


# A Model or Tool that appears, becomes ReadyToDeploy or changes: queue the deployments of its namespace.
@kopf.on.event(GROUP, VERSION, "models")
async def model_event(namespace: str | None, memo: kopf.Memo, **kw: Any) -> None:
    _start(memo, kw)
    memo.mdeps.trigger_all(memo.mdeps.keys(namespace or ""), "model")


@kopf.on.event(GROUP, VERSION, "tools")
async def tool_event(namespace: str | None, memo: kopf.Memo, **kw: Any) -> None:
    _start(memo, kw)
    memo.tdeps.trigger_all(memo.tdeps.keys(namespace or ""), "tool")
