"""kopf handlers of the Dockyard operator. Handlers stay thin: reconcile.py and the pure builders do
the work. Indexes keep in-memory views of what the reconcilers read (rebuilt from the API by kopf
on every start), so observing 1,000 rollouts costs no API reads.

ModelDeployments and ToolDeployments are reconciled by a :class:`~dockyard_operator.workqueue.WorkQueue`
each: the watch events of the object, of its Deployment and Pods, and of its Model or Tool only
trigger a reconcile, which the queue coalesces and serialises per object. No kopf timer runs per
object, so kopf needs no finalizer on them and writes no bookkeeping to them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import tempfile
from functools import partial
from pathlib import Path
from typing import Any, cast

import httpx
import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dockyard_core.devices import GPU_RESOURCE, INSTANCE_TYPE_LABEL
from dockyard_core.kubeclient import AsyncKube, KubeError
from dockyard_core.kubeconfig import api_client
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION
from dockyard_operator import health
from dockyard_operator.assess import parse_quantity
from dockyard_operator.builders import COMPONENT_LABEL, MANAGED_BY
from dockyard_operator.importer import Importer, import_in_flight, is_upload
from dockyard_operator.kube import Conflict, Kube
from dockyard_operator.reconcile import (
    API_CONCURRENCY,
    Context,
    Views,
    reconcile_model_deployment,
    reconcile_tool_deployment,
    snapshot,
)
from dockyard_operator.runtimes import load_catalog
from dockyard_operator.scaling import autoscaler_loop, autoscaling_enabled
from dockyard_operator.settings import OperatorSettings, operator_settings
from dockyard_operator.webhook_tls import self_signed
from dockyard_operator.workqueue import Body, ObjectKey, Outcome, WorkQueue, key_of

SETTINGS = operator_settings()  # intervals are fixed when the handlers are registered

WATCH_ONLY = frozenset(
    {
        ("v1", "Pod"),
        ("apps/v1", "Deployment"),
        ("v1", "Node"),
        (f"{GROUP}/{VERSION}", "ModelDeployment"),
        (f"{GROUP}/{VERSION}", "ToolDeployment"),
        (f"{GROUP}/{VERSION}", "Tool"),
    }
)
"""Kinds with only index and on-event handlers here (no create/update/resume/delete handler): kopf needs
no diff base of them (tests/unit/test_handlers.py keeps this true)."""


class DiffBaseOfChangeHandled(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation diff base, built only for kinds that have change handlers.

    kopf builds an object's "essence" (a deep copy without metadata and status) on every watch event,
    to detect changes for create/update handlers. For the kinds of :data:`WATCH_ONLY` nothing uses it,
    and copying every Pod, Deployment and ModelDeployment update was an eighth of the operator's CPU
    while 200 deployments rolled out."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        if (body.get("apiVersion"), body.get("kind")) in WATCH_ONLY:
            return cast(kopf.BodyEssence, {})
        return super().build(body=body, extra_fields=extra_fields)


MANAGED: dict[str, Any] = {
    "app.kubernetes.io/managed-by": MANAGED_BY,
    COMPONENT_LABEL: kopf.PRESENT,
}


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config = SETTINGS
    settings.posting.level = logging.INFO  # INFO and above also become Kubernetes Events
    # kopf adds it where a timer runs (Models while an import is in flight, Environments) and removes it
    # where none does: from ModelDeployments and ToolDeployments that earlier versions gave one.
    settings.persistence.finalizer = "dockyard.dev/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="dockyard.dev")
    settings.persistence.diffbase_storage = DiffBaseOfChangeHandled(
        prefix="dockyard.dev", key="last-handled-configuration"
    )
    settings.watching.server_timeout = 300
    memo.api = api_client(config.kubeconfig)
    # Requests queue for a connection without a deadline (as they queued for a thread before); the
    # connection and every read are bounded. A total deadline failed thousands of reconciles that
    # waited for a connection while 1,500 ModelDeployments started at once (bench.scale).
    http = AsyncKube(config.kubeconfig, max_connections=API_CONCURRENCY, timeout=30.0, wait_for_connection=True)
    ctx = Context(settings=config, kube=Kube(memo.api, http), catalog=load_catalog(config.runtime_catalog))
    memo.ctx = ctx
    memo.mdeps = WorkQueue(
        "ModelDeployment", partial(_reconcile, ctx, reconcile_model_deployment), max_concurrent=API_CONCURRENCY
    )
    memo.tdeps = WorkQueue(
        "ToolDeployment", partial(_reconcile, ctx, reconcile_tool_deployment), max_concurrent=API_CONCURRENCY
    )
    memo.autoscalers = {}
    memo.http = httpx.AsyncClient(timeout=config.metrics_timeout_seconds)
    memo.importer = Importer(config, memo.ctx.kube)
    memo.importer.start_garbage_collection(config.model_gc_interval_seconds, config.model_gc_grace_seconds)
    _webhook_server(settings, memo, config)
    memo.health = health.HealthState(api=memo.api)
    await health.start(memo.health, config.health_host, config.health_port)
    memo.health.started.set()


WEBHOOK_CONFIGURATION = "dockyard.dev"


def _webhook_server(settings: kopf.OperatorSettings, memo: kopf.Memo, config: OperatorSettings) -> None:
    """Serve the admission webhooks (apps.py). Local runs: a self-signed certificate and webhook
    configurations the operator writes itself; in a cluster the chart provides both."""
    host = config.webhook_url_host or config.webhook_host
    certfile, keyfile, cafile = config.webhook_certfile, config.webhook_keyfile, None
    if not certfile:
        memo.webhook_dir = tempfile.mkdtemp(prefix="dockyard-webhook-")
        cert, key = self_signed(Path(memo.webhook_dir), host)
        certfile, keyfile, cafile = str(cert), str(key), str(cert)
    settings.admission.server = kopf.WebhookServer(
        addr=config.webhook_host,
        port=config.webhook_port,
        host=host,
        certfile=certfile,
        pkeyfile=keyfile,
        cafile=cafile,
    )
    if config.webhook_managed:
        settings.admission.managed = WEBHOOK_CONFIGURATION


@kopf.on.login()
def login(**kwargs: Any) -> kopf.ConnectionInfo | None:
    """In-cluster service account, else the kubeconfig of ``DOCKYARD_OPERATOR_KUBECONFIG`` / ``KUBECONFIG``
    (read now, not when the kubernetes library was imported)."""
    config = SETTINGS
    if config.kubeconfig:
        os.environ["KUBECONFIG"] = config.kubeconfig
    info: kopf.ConnectionInfo | None = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    return info


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    for task in memo.get("autoscalers", {}).values():
        task.cancel()
    for queue in ("mdeps", "tdeps"):
        if queue in memo:
            await memo[queue].close()
    if "health" in memo:
        await health.stop(memo.health)
    if "ctx" in memo:
        await memo.ctx.kube.http.aclose()
    if "http" in memo:
        await memo.http.aclose()
    if "importer" in memo:
        await memo.importer.close()
    if SETTINGS.webhook_managed and "api" in memo:
        # a stopped local operator leaves no webhook behind that would slow or block other clients
        admission = client.AdmissionregistrationV1Api(memo.api)
        for delete in (
            admission.delete_validating_webhook_configuration,
            admission.delete_mutating_webhook_configuration,
        ):
            with contextlib.suppress(ApiException):
                delete(WEBHOOK_CONFIGURATION)
    if "webhook_dir" in memo:
        shutil.rmtree(memo.webhook_dir, ignore_errors=True)
    if "api" in memo:
        memo.api.close()


# --- indexes ----------------------------------------------------------------------------------------


def _slim(body: kopf.Body, status_keys: tuple[str, ...]) -> dict[str, Any]:
    meta = body["metadata"]
    return {
        "metadata": {k: meta.get(k) for k in ("name", "generation", "annotations", "deletionTimestamp")},
        "spec": {k: body["spec"].get(k) for k in ("nodeName", "replicas") if k in body["spec"]},
        "status": {k: body.get("status", {}).get(k) for k in status_keys if k in body.get("status", {})},
    }


DEPLOYMENT_STATUS = ("observedGeneration", "replicas", "updatedReplicas", "readyReplicas", "availableReplicas",
                     "conditions")  # fmt: skip
POD_STATUS = ("phase", "conditions", "initContainerStatuses", "containerStatuses", "podIP")


def _key(namespace: str | None, labels: kopf.Labels) -> tuple[str, str, str]:
    return (namespace or "", labels[COMPONENT_LABEL], labels.get("app.kubernetes.io/instance", ""))


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
async def workload_deployments(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
    return {_key(namespace, labels): _slim(body, DEPLOYMENT_STATUS)}


@kopf.index("", "v1", "pods", labels=MANAGED)
async def workload_pods(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
    return {_key(namespace, labels): _slim(body, POD_STATUS)}


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


def _views(kw: dict[str, Any]) -> Views:
    return Views(
        deployments=kw["workload_deployments"],
        pods=kw["workload_pods"],
        nodes=kw["node_capacity"],
        models=kw["models"],
        tools=kw["tools"],
    )


# --- Models: a hub model is ReadyToDeploy at once -----------------------------------------------------


@kopf.on.resume(GROUP, VERSION, "models")
@kopf.on.create(GROUP, VERSION, "models")
def model_source(spec: kopf.Spec, status: kopf.Status, patch: kopf.Patch, **_: Any) -> None:
    """A public hub model needs no import: the serving pods download it. Uploads are finished by the
    import job (below)."""
    if spec.get("source", {}).get("hub") and status.get("phase") != "ReadyToDeploy":
        patch.status["phase"] = "ReadyToDeploy"


# --- Models: the import job of an uploaded model ------------------------------------------------------


@kopf.on.event(GROUP, VERSION, "models", when=import_in_flight)
async def model_import_event(event: kopf.RawEvent, memo: kopf.Memo, namespace: str | None, name: str, uid: str,
                             **_: Any) -> None:  # fmt: skip
    """The facade completed an upload session (job IN_PROGRESS): assemble, verify, extract, store."""
    if event["type"] != "DELETED":
        await memo.importer.reconcile(namespace or "", name, uid)


@kopf.timer(GROUP, VERSION, "models", interval=SETTINGS.import_retry_interval_seconds, when=import_in_flight,
            initial_delay=SETTINGS.import_retry_interval_seconds)  # fmt: skip
async def model_import_retry(memo: kopf.Memo, namespace: str | None, name: str, uid: str, **_: Any) -> None:
    """An import that did not record its outcome (an API error, say) is tried again."""
    await memo.importer.reconcile(namespace or "", name, uid)


@kopf.on.event(GROUP, VERSION, "models", when=is_upload)
async def model_import_deleted(event: kopf.RawEvent, memo: kopf.Memo, namespace: str | None, name: str,
                               labels: kopf.Labels, **_: Any) -> None:  # fmt: skip
    """An uploaded Model's files go with it. No finalizer holds the deletion: what a Model deleted while
    the operator was down leaves behind is collected when the operator starts (:meth:`Importer.collect_garbage`)."""
    if event["type"] == "DELETED":
        await memo.importer.deleted(namespace or "", name, labels)


# --- ModelDeployments and ToolDeployments ------------------------------------------------------------


async def _reconcile(ctx: Context, reconcile: Any, body: Body) -> Outcome:
    assert ctx.views is not None  # set by the handler that queued the object
    try:
        outcome: Outcome = await reconcile(ctx, body, ctx.views)
    except Conflict:  # the object changed meanwhile: its watch event brings the new version, and a reconcile
        return Outcome(result="conflict")
    except (ApiException, KubeError) as exc:
        if exc.status == 404:  # deleted meanwhile (or its namespace): its DELETED event forgets it
            return Outcome(result="gone")
        raise
    return outcome


def _watch(memo: kopf.Memo, queue: WorkQueue, event: kopf.RawEvent, body: kopf.Body, kw: dict[str, Any]) -> None:
    ctx: Context = memo.ctx
    if ctx.views is None:
        ctx.views = _views(kw)  # kopf's indexes are live mappings: capture them once
    if event["type"] == "DELETED":  # children go with their owner (garbage collection)
        queue.forget(body)
        ctx.forget(body["metadata"]["uid"])
    else:
        queue.observe(body)


# Every watch event of the object (creation, any change, the initial listing after a restart) queues a
# reconcile: level-based, and no handler-progress bookkeeping is written back to the objects.
@kopf.on.event(GROUP, VERSION, "modeldeployments")
async def model_deployment_event(event: kopf.RawEvent, memo: kopf.Memo, body: kopf.Body, **kw: Any) -> None:
    _watch(memo, memo.mdeps, event, body, kw)
    key = key_of(body)
    autoscalers: dict[ObjectKey, asyncio.Task[None]] = memo.autoscalers
    if event["type"] == "DELETED":
        if (task := autoscalers.pop(key, None)) is not None:
            task.cancel()
    elif autoscaling_enabled(body.get("spec") or {}) and (key not in autoscalers or autoscalers[key].done()):
        autoscalers[key] = asyncio.create_task(autoscaler_loop(memo.mdeps, key, memo.ctx, memo.http))


@kopf.on.event(GROUP, VERSION, "tooldeployments")
async def tool_deployment_event(event: kopf.RawEvent, memo: kopf.Memo, body: kopf.Body, **kw: Any) -> None:
    _watch(memo, memo.tdeps, event, body, kw)


def _owner_queue(memo: kopf.Memo, labels: kopf.Labels) -> WorkQueue | None:
    component = labels.get(COMPONENT_LABEL)
    return memo.mdeps if component == "model-server" else memo.tdeps if component == "tool" else None


# A child's event can change its owner's assessment: queue the owner (the index is already updated).
@kopf.on.event("apps", "v1", "deployments", labels=MANAGED)
@kopf.on.event("", "v1", "pods", labels=MANAGED)
async def workload_event(namespace: str | None, labels: kopf.Labels, memo: kopf.Memo, **_: Any) -> None:
    if (queue := _owner_queue(memo, labels)) is not None:
        queue.trigger((namespace or "", labels.get("app.kubernetes.io/instance", "")))


# A Model or Tool that appears, becomes ReadyToDeploy or changes: queue the deployments of its namespace.
@kopf.on.event(GROUP, VERSION, "models")
async def model_event(namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    memo.mdeps.trigger_all(memo.mdeps.keys(namespace or ""))


@kopf.on.event(GROUP, VERSION, "tools")
async def tool_event(namespace: str | None, memo: kopf.Memo, **_: Any) -> None:
    memo.tdeps.trigger_all(memo.tdeps.keys(namespace or ""))


# Apps, AppVersions, Environments and the admission webhooks (registered on import)
from dockyard_operator import apps as _apps  # noqa: E402, F401
