"""kopf handlers of the Dockyard operator. Handlers stay thin: reconcile.py and the pure builders do
the work. Indexes keep in-memory views of what the reconcilers read (rebuilt from the API by kopf
on every start), so observing 1,000 rollouts costs no API reads."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import httpx
import kopf
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dockyard_api.devices import GPU_RESOURCE, INSTANCE_TYPE_LABEL
from dockyard_api.kube import api_client
from dockyard_api.resources import GROUP
from dockyard_api.resources.v1alpha1 import VERSION
from dockyard_operator import health
from dockyard_operator.assess import parse_quantity
from dockyard_operator.builders import COMPONENT_LABEL, MANAGED_BY
from dockyard_operator.importer import Importer, import_in_flight, is_upload
from dockyard_operator.kube import Conflict, Kube
from dockyard_operator.reconcile import Context, Views, reconcile_model_deployment, reconcile_tool_deployment, snapshot
from dockyard_operator.runtimes import load_catalog
from dockyard_operator.scaling import autoscale, autoscaling_enabled
from dockyard_operator.settings import OperatorSettings
from dockyard_operator.webhook_tls import self_signed

SETTINGS = OperatorSettings()  # intervals are fixed when the handlers are registered
MANAGED: dict[str, Any] = {
    "app.kubernetes.io/managed-by": MANAGED_BY,
    COMPONENT_LABEL: kopf.PRESENT,
}


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config = OperatorSettings()
    settings.posting.level = logging.INFO  # INFO and above also become Kubernetes Events
    settings.persistence.finalizer = "dockyard.dev/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="dockyard.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="dockyard.dev", key="last-handled-configuration"
    )
    settings.watching.server_timeout = 300
    memo.api = api_client(config.kubeconfig)
    memo.ctx = Context(settings=config, kube=Kube(memo.api), catalog=load_catalog(config.runtime_catalog))
    memo.http = httpx.AsyncClient(timeout=config.metrics_timeout_seconds)
    memo.importer = Importer(config, memo.ctx.kube)
    memo.importer.start_garbage_collection(config.model_gc_interval_seconds)
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
    config = OperatorSettings()
    if config.kubeconfig:
        os.environ["KUBECONFIG"] = config.kubeconfig
    info: kopf.ConnectionInfo | None = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    return info


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    if "health" in memo:
        await health.stop(memo.health)
    if "http" in memo:
        await memo.http.aclose()
    if "importer" in memo:
        await memo.importer.close()
    if OperatorSettings().webhook_managed and "api" in memo:
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
POD_STATUS = ("phase", "conditions", "containerStatuses", "podIP")


def _key(namespace: str | None, labels: kopf.Labels) -> tuple[str, str, str]:
    return (namespace or "", labels[COMPONENT_LABEL], labels.get("app.kubernetes.io/instance", ""))


@kopf.index("apps", "v1", "deployments", labels=MANAGED)
def workload_deployments(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
    return {_key(namespace, labels): _slim(body, DEPLOYMENT_STATUS)}


@kopf.index("", "v1", "pods", labels=MANAGED)
def workload_pods(namespace: str | None, labels: kopf.Labels, body: kopf.Body, **_: Any) -> Any:
    return {_key(namespace, labels): _slim(body, POD_STATUS)}


@kopf.index("", "v1", "nodes", labels={INSTANCE_TYPE_LABEL: kopf.PRESENT})
def node_capacity(labels: kopf.Labels, status: kopf.Status, **_: Any) -> Any:
    """Per instance type: each node's allocatable resources, in base units."""
    allocatable = status.get("allocatable") or {}
    wanted = ("cpu", "memory", GPU_RESOURCE)
    return {labels[INSTANCE_TYPE_LABEL]: {r: parse_quantity(allocatable[r]) for r in wanted if r in allocatable}}


@kopf.index(GROUP, VERSION, "models")
def models(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
    return {(namespace or "", name): snapshot(body)}


@kopf.index(GROUP, VERSION, "tools")
def tools(namespace: str | None, name: str, body: kopf.Body, **_: Any) -> Any:
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
    the operator was down leaves behind is collected later (:meth:`Importer.collect_garbage`)."""
    if event["type"] == "DELETED":
        await memo.importer.deleted(namespace or "", name, labels)


# --- ModelDeployments and ToolDeployments ------------------------------------------------------------


async def _run(kind_reconcile: Any, memo: kopf.Memo, body: kopf.Body, kw: dict[str, Any]) -> None:
    ctx: Context = memo.ctx
    async with ctx.lock(body["metadata"]["uid"]):
        with contextlib.suppress(Conflict):  # the newer object is its own event: that reconcile writes it
            await kind_reconcile(ctx, body, _views(kw))


# Every watch event (creation, any change, the initial listing after a restart) reconciles: level-based,
# and no handler-progress bookkeeping is written back to the objects.
@kopf.on.event(GROUP, VERSION, "modeldeployments")
async def model_deployment_event(event: kopf.RawEvent, memo: kopf.Memo, body: kopf.Body, **kw: Any) -> None:
    if event["type"] != "DELETED":  # children go with their owner (garbage collection)
        await _run(reconcile_model_deployment, memo, body, kw)


def job_in_flight(status: kopf.Status, **_: Any) -> bool:
    job = status.get("job") or {}
    return bool(not job or job.get("status") == "IN_PROGRESS")


def job_settled(status: kopf.Status, **_: Any) -> bool:
    return not job_in_flight(status)


@kopf.timer(GROUP, VERSION, "modeldeployments", interval=SETTINGS.observe_interval_seconds, when=job_in_flight)
async def model_deployment_rollout(memo: kopf.Memo, body: kopf.Body, **kw: Any) -> None:
    """A job in flight is assessed every second: SUCCESS or FAILED as soon as it is so."""
    await _run(reconcile_model_deployment, memo, body, kw)


@kopf.timer(GROUP, VERSION, "modeldeployments", interval=SETTINGS.settled_interval_seconds, when=job_settled)
async def model_deployment_settled(memo: kopf.Memo, body: kopf.Body, **kw: Any) -> None:
    """A settled deployment is re-checked now and then: replica counts, Ready, drift repair."""
    await _run(reconcile_model_deployment, memo, body, kw)


@kopf.timer(GROUP, VERSION, "modeldeployments", interval=SETTINGS.autoscale_interval_seconds, when=autoscaling_enabled)
async def model_deployment_autoscaled(memo: kopf.Memo, body: kopf.Body, **kw: Any) -> None:
    ctx: Context = memo.ctx
    async with ctx.lock(body["metadata"]["uid"]):
        await autoscale(ctx, memo.http, body, _views(kw))


@kopf.on.event(GROUP, VERSION, "tooldeployments")
async def tool_deployment_event(event: kopf.RawEvent, memo: kopf.Memo, body: kopf.Body, **kw: Any) -> None:
    if event["type"] != "DELETED":
        await _run(reconcile_tool_deployment, memo, body, kw)


@kopf.timer(GROUP, VERSION, "tooldeployments", interval=SETTINGS.observe_interval_seconds, when=job_in_flight)
async def tool_deployment_rollout(memo: kopf.Memo, body: kopf.Body, **kw: Any) -> None:
    await _run(reconcile_tool_deployment, memo, body, kw)


@kopf.timer(GROUP, VERSION, "tooldeployments", interval=SETTINGS.settled_interval_seconds, when=job_settled)
async def tool_deployment_settled(memo: kopf.Memo, body: kopf.Body, **kw: Any) -> None:
    await _run(reconcile_tool_deployment, memo, body, kw)


# Apps, AppVersions, Environments and the admission webhooks (registered on import)
from dockyard_operator import apps as _apps  # noqa: E402, F401
