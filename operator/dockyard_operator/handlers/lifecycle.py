"""kopf handlers of the operator's lifecycle: start-up (the one :class:`Context`, built once from the
settings read once, the work queues, the import job, the admission webhook server), login and clean-up;
and the diff-base storage that spares kopf copying the watch-only kinds."""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
from collections.abc import Callable, Collection
from functools import partial
from pathlib import Path
from typing import Any, cast

import httpx
import kopf
from kopf._cogs.structs.references import NamespaceName, match_namespace  # kopf's matching of --namespace

from dockyard_core import devices
from dockyard_core.kubeclient import AsyncKube, KubeError
from dockyard_core.kubepaths import object_path
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION
from dockyard_operator import health, monitoring
from dockyard_operator.context import API_CONCURRENCY, Context
from dockyard_operator.handlers.deployments import model_deployment_changed, reconcile_queued
from dockyard_operator.handlers.events import post_event
from dockyard_operator.kube import KubeApi
from dockyard_operator.model_deployments import ModelDeployments
from dockyard_operator.reconcile.model import Importer
from dockyard_operator.reconcile.modeldeployment import reconcile_model_deployment
from dockyard_operator.reconcile.tooldeployment import reconcile_tool_deployment
from dockyard_operator.runtimes import load_catalog
from dockyard_operator.settings import OperatorSettings, operator_settings
from dockyard_operator.webhook_tls import self_signed
from dockyard_operator.workloads import Key, WorkloadViews
from dockyard_operator.workqueue import WorkQueue

WATCH_ONLY = frozenset(
    {
        ("v1", "Node"),
        (f"{GROUP}/{VERSION}", "ToolDeployment"),
        (f"{GROUP}/{VERSION}", "Tool"),
    }
)
"""Kinds with only index and on-event handlers here (no create/update/resume/delete handler): kopf needs
no diff base of them (tests/unit/operator/test_handlers.py keeps this true). ModelDeployments have none at
all: kopf does not watch them (``model_deployments.py``)."""


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


@kopf.on.startup()
async def startup(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    config = operator_settings()  # the one read of this process (a test that runs the operator again clears it)
    settings.posting.level = logging.INFO  # INFO and above also become Kubernetes Events
    # kopf adds it where a timer runs (Models while an import is in flight, Environments) and removes it
    # where none does: from ModelDeployments and ToolDeployments that earlier versions gave one.
    settings.persistence.finalizer = "dockyard.dev/finalizer"
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="dockyard.dev")
    settings.persistence.diffbase_storage = DiffBaseOfChangeHandled(
        prefix="dockyard.dev", key="last-handled-configuration"
    )
    settings.watching.server_timeout = 300
    # Requests queue for a connection without a deadline (as they queued for a thread before); the
    # connection and every read are bounded. A total deadline failed thousands of reconciles that
    # waited for a connection while 1,500 ModelDeployments started at once (bench.scale).
    http = AsyncKube(config.kubeconfig, max_connections=API_CONCURRENCY, timeout=30.0, wait_for_connection=True)
    ctx = Context(
        settings=config,
        kube=KubeApi(http),
        catalog=load_catalog(config.runtime_catalog),
        devices=devices.load_catalog(config.device_catalog),
    )
    memo.ctx = ctx
    memo.mdeps = WorkQueue(
        "ModelDeployment", partial(reconcile_queued, ctx, reconcile_model_deployment), max_concurrent=API_CONCURRENCY
    )
    memo.tdeps = WorkQueue(
        "ToolDeployment", partial(reconcile_queued, ctx, reconcile_tool_deployment), max_concurrent=API_CONCURRENCY
    )
    # Both started by the first kopf handler call, once kopf's indexes are filled (deployments.py).
    ctx.workloads = WorkloadViews(http, partial(_owner_changed, memo))
    memo.model_deployments = ModelDeployments(
        http, partial(model_deployment_changed, memo), _namespace_filter(memo.get("namespaces") or ())
    )
    memo.autoscalers = {}
    memo.http = httpx.AsyncClient(timeout=config.metrics_timeout_seconds)
    memo.importer = Importer(config, memo.ctx.kube, post_event)
    memo.importer.start_garbage_collection(config.model_gc_interval_seconds, config.model_gc_grace_seconds)
    _webhook_server(settings, memo, config)
    memo.health = health.HealthState(api=http)
    await health.start(memo.health, config.health_host, config.health_port)
    memo.health.started.set()


def _namespace_filter(patterns: Collection[str]) -> Callable[[str], bool] | None:
    """The namespaces kopf serves (``python -m dockyard_operator --namespace``, handed over in the memo),
    matched as kopf matches them (globs, ``!`` exclusions); None: all of them. The ModelDeployments' watch
    is cluster-wide either way, like the workloads' (the chart's ClusterRole grants it)."""
    if not patterns:
        return None
    return lambda namespace: any(match_namespace(NamespaceName(namespace), pattern) for pattern in patterns)


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
    monitoring.watch_certificate(certfile)  # its expiry is a metric (the alert "certificate expires soon")
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
    config = operator_settings()
    if config.kubeconfig:
        os.environ["KUBECONFIG"] = config.kubeconfig
    info: kopf.ConnectionInfo | None = kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    return info


def _owner_changed(memo: kopf.Memo, key: Key, cause: str) -> None:
    """A workload Deployment or Pod (``cause``) changed: queue its owner (its view is already updated)."""
    namespace, component, owner = key
    queue = memo.mdeps if component == "model-server" else memo.tdeps if component == "tool" else None
    if queue is not None:
        queue.trigger((namespace, owner), cause)


@kopf.on.cleanup()
async def cleanup(memo: kopf.Memo, **_: Any) -> None:
    if "model_deployments" in memo:  # first: its events start autoscalers
        await memo.model_deployments.stop()
    for task in memo.get("autoscalers", {}).values():
        task.cancel()
    if "ctx" in memo and memo.ctx.workloads is not None:
        await memo.ctx.workloads.stop()
    for queue in ("mdeps", "tdeps"):
        if queue in memo:
            await memo[queue].close()
    if "health" in memo:
        await health.stop(memo.health)
    if "ctx" in memo and memo.ctx.settings.webhook_managed:
        # a stopped local operator leaves no webhook behind that would slow or block other clients
        for plural in ("validatingwebhookconfigurations", "mutatingwebhookconfigurations"):
            with contextlib.suppress(KubeError):
                await memo.ctx.kube.http.request("DELETE", object_path(plural, None, WEBHOOK_CONFIGURATION))
    if "ctx" in memo:
        await memo.ctx.kube.http.aclose()
    if "http" in memo:
        await memo.http.aclose()
    if "importer" in memo:
        await memo.importer.close()
    if "webhook_dir" in memo:
        shutil.rmtree(memo.webhook_dir, ignore_errors=True)
