"""A KnowledgeBase version's reconcile (kopf-free; docs/knowledge-bases.md, "The job"): when its documents
or a reindex request moved past what the last run indexed, start an indexing run (status Indexing) —
a Kubernetes Job from Dockyard's image, or on the local control plane (``knowledge_runs: local``: kwok's
pods run nothing) the same command as a host process, as the local engine runner runs engines. The run writes
the status itself (documents, chunks, bytes, last indexed, errors, phase Ready or Failed); a run that
dies without writing it (the Job failed, the process exited non-zero) is marked Failed here."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dockyard_core import clock
from dockyard_core.clock import iso
from dockyard_core.conditions import transition
from dockyard_core.resources.v1alpha1 import KB_LABEL
from dockyard_operator.builders.knowledge import (
    JOB_MODULE,
    KB_NAMESPACE_LABEL,
    IndexingSettings,
    indexing_job,
    needs_run,
    run_environment,
    run_name,
    s3_store_env,
    wanted_spec,
)
from dockyard_operator.context import Context
from dockyard_operator.kube import Conflict, Gone, KubeApi
from dockyard_operator.workqueue import Event

log = logging.getLogger("dockyard.knowledge")

MODEL_DEPLOYMENT_LABEL = "dockyard.dev/model-deployment"
LOCAL_ENDPOINT_ANNOTATION = "dockyard.dev/local-endpoint"


@dataclass
class KnowledgeState:
    """The host processes of local runs, by KnowledgeBase uid (kept so that a run is awaited once)."""

    processes: dict[str, asyncio.Task[None]] = field(default_factory=dict)

    def forget(self, uid: str) -> None:
        self.processes.pop(uid, None)


def indexing_settings(ctx: Context) -> IndexingSettings:
    s = ctx.settings
    return IndexingSettings(
        index_url=s.knowledge_index_url(),
        files_dir=str(s.knowledge_files().resolve()) if s.model_store_backend != "s3" else "s3",
        image=s.storage_initializer_image,
        store_claim=s.knowledge_job_store_claim,
        store_path=str(s.model_store),
        service_account=s.knowledge_job_service_account,
        namespace=s.knowledge_job_namespace,
        store_env=tuple(
            s3_store_env(s.s3_endpoint, s.s3_bucket, s.s3_prefix, s.s3_region, s.s3_ca_bundle).items()
            if s.model_store_backend == "s3"
            else ()
        ),
        s3_secret=s.knowledge_job_s3_secret,
    )


async def embedding_endpoint(ctx: Context, namespace: str, name: str) -> str | None:
    """Where the embedding ModelDeployment answers: the host engine of one of its Ready pods when the local
    engine runner annotated one (the local control plane), else its Service (status.endpoint); None while
    it has neither."""
    pods = await ctx.kube.list_objects("pods", namespace, labels=f"{MODEL_DEPLOYMENT_LABEL}={name}")
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        url = (pod["metadata"].get("annotations") or {}).get(LOCAL_ENDPOINT_ANNOTATION)
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True"
            for c in (pod.get("status") or {}).get("conditions") or []
        )
        if url and ready:
            return str(url).rstrip("/")
    mdep = await ctx.kube.get("modeldeployments", namespace, name)
    endpoint = ((mdep or {}).get("status") or {}).get("endpoint")
    return str(endpoint).rstrip("/") if endpoint else None


async def _status(kube: KubeApi, kb: Mapping[str, Any], status: dict[str, Any], guarded: bool = True) -> bool:
    meta = kb["metadata"]
    try:
        await kube.patch_status(
            "knowledgebases", meta["namespace"], meta["name"], status, meta.get("resourceVersion") if guarded else None
        )
    except (Conflict, Gone):
        return False  # changed or deleted meanwhile: its own event reconciles it again
    return True


async def reconcile_knowledge_base(ctx: Context, kb: Mapping[str, Any]) -> list[Event]:
    """Start an indexing run when one is needed (see :func:`needs_run`); the Events to post."""
    if kb["metadata"].get("deletionTimestamp") or not needs_run(kb):
        return []
    meta, spec = kb["metadata"], kb.get("spec") or {}
    embedding: tuple[str, str] | None = None
    model = (spec.get("embedding") or {}).get("modelDeployment")
    if model:
        url = await embedding_endpoint(ctx, meta["namespace"], model)
        if url is None:
            message = f"waiting for the embedding ModelDeployment {model} to answer"
            if (kb.get("status") or {}).get("message") != message:
                await _status(ctx.kube, kb, {"phase": "Pending", "message": message})
                return [Event("Normal", "WaitingForEmbeddingModel", message)]
            return []
        embedding = (url, model)
    settings = indexing_settings(ctx)
    env = run_environment(kb, settings, embedding)
    name = run_name(kb)
    previous = (kb.get("status") or {}).get("conditions") or []
    what = "rebuild into a new generation" if env["DOCKYARD_KB_REBUILD"] == "1" else "index"
    running = transition(previous, "Indexing", True, "Running", f"run {name}: {what}", clock.now())
    kept = [c for c in previous if c.get("type") != "Indexing"]  # Ready stays as it is: the active index answers
    started = {
        "phase": "Indexing",
        "job": name,
        "message": "",
        "buildingGeneration": None,
        "conditions": [*kept, running],
    }
    if not await _status(ctx.kube, kb, started):
        return []
    if ctx.settings.knowledge_runs == "local":
        _start_local(ctx, kb, env)
        where = "as a host process (local control plane)"
    else:
        job = indexing_job(kb, settings, env)
        created = await ctx.kube.create("jobs", job["metadata"]["namespace"], job)
        where = f"as Job {name}" + ("" if created else " (it existed)")
    return [Event("Normal", "IndexingStarted", f"{what} {len(spec.get('documents') or [])} document(s) {where}")]


def _start_local(ctx: Context, kb: Mapping[str, Any], env: Mapping[str, str]) -> None:
    """Run after the version's previous run (a run writes its status just before its process exits, so the
    next run may be asked for while the previous task still winds down): one run at a time per version."""
    state = ctx.state(KnowledgeState)
    uid = kb["metadata"]["uid"]
    previous = state.processes.get(uid)

    async def after_previous() -> None:
        if previous is not None and not previous.done():
            with contextlib.suppress(Exception):
                await previous
        await _run_local(ctx, dict(kb), dict(env))

    state.processes[uid] = asyncio.create_task(after_previous())


async def _run_local(ctx: Context, kb: dict[str, Any], env: dict[str, str]) -> None:
    full = {**os.environ, **env}
    if ctx.settings.model_store_backend == "s3":  # a host process: the operator's own credentials
        full["DOCKYARD_KB_S3_ACCESS_KEY"] = ctx.settings.s3_access_key or ""
        secret = ctx.settings.s3_secret_key
        full["DOCKYARD_KB_S3_SECRET_KEY"] = secret.get_secret_value() if secret else ""
    if ctx.settings.kubeconfig:
        full["KUBECONFIG"] = ctx.settings.kubeconfig
    log_dir = ctx.settings.model_store.resolve().parent / "indexing"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{env['DOCKYARD_KB_JOB']}.log"
    with log_path.open("wb") as out:
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", JOB_MODULE, env=full, stdout=out, stderr=asyncio.subprocess.STDOUT
        )
        code = await process.wait()
    log.info("indexing run %s exited with %d (log %s)", env["DOCKYARD_KB_JOB"], code, log_path)
    if code != 0:
        await run_failed(ctx.kube, kb, env["DOCKYARD_KB_JOB"], f"the indexing process exited with {code} ({log_path})")


async def run_failed(kube: KubeApi, kb: Mapping[str, Any], job: str, message: str) -> None:
    """A run that ended without writing its outcome: Failed, unless a later run or the run itself wrote."""
    meta = kb["metadata"]
    now = await kube.get("knowledgebases", meta["namespace"], meta["name"])
    status = (now or {}).get("status") or {}
    if now is None or status.get("job") != job or status.get("phase") != "Indexing":
        return
    previous = status.get("conditions") or []
    failed = transition(previous, "Indexing", False, "RunFailed", message[:2000], clock.now())
    conditions = [*(c for c in previous if c.get("type") != "Indexing"), failed]
    patch = {"phase": "Failed", "message": message[:2000], "indexedSpec": f"failed:{wanted_spec(now)}"[:64]}
    await _status(kube, now, {**patch, "conditions": conditions})


async def job_finished(kube: KubeApi, job: Mapping[str, Any]) -> None:
    """A Job of a run that failed (its pod never wrote the status): the KnowledgeBase says so."""
    conditions = (job.get("status") or {}).get("conditions") or []
    failed = next((c for c in conditions if c.get("type") == "Failed" and c.get("status") == "True"), None)
    if failed is None:
        return
    labels = job["metadata"].get("labels") or {}
    if not labels.get(KB_LABEL) or not labels.get(KB_NAMESPACE_LABEL):
        return
    kb = {"metadata": {"namespace": labels[KB_NAMESPACE_LABEL], "name": labels[KB_LABEL]}}
    at = iso(clock.now())
    await run_failed(kube, kb, job["metadata"]["name"], f"Job {job['metadata']['name']} failed at {at}: "
                     f"{failed.get('reason', '')} {failed.get('message', '')}".strip())  # fmt: skip
