"""The indexing run of a KnowledgeBase version (docs/knowledge-bases.md, "The job"), pure: what run is
wanted, its environment, and the Kubernetes Job that runs it from Dockyard's image."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dockyard_core.resources.v1alpha1 import KB_LABEL, KB_REINDEX_ANNOTATION
from dockyard_operator.kube import owner_reference

JOB_MODULE = "dockyard_core.knowledge.job"
STORE_VOLUME = "model-store"
KB_NAMESPACE_LABEL = "dockyard.dev/knowledge-base-namespace"
"""Label of an indexing Job: the namespace of the KnowledgeBase it indexes (a Job in Dockyard's own namespace
cannot be owned by it)."""


@dataclass(frozen=True)
class IndexingSettings:
    """What every run shares: the index, the documents' directory, and (a Job) the image and the store's
    volume claim (mounted at ``store_path``, as in the facade and the operator)."""

    index_url: str
    files_dir: str
    image: str = ""
    store_claim: str = ""
    store_path: str = ""
    service_account: str = ""
    namespace: str = ""
    """Where the Jobs run (empty: the KnowledgeBase's namespace)."""
    store_env: tuple[tuple[str, str], ...] = ()
    """The S3 model store's settings without its credentials (``DOCKYARD_KB_MODEL_STORE_BACKEND``,
    ``DOCKYARD_KB_S3_ENDPOINT``, ...; :func:`s3_store_env`): the run reads the documents from the bucket."""
    s3_secret: str = ""
    """The Secret holding the bucket's ``accessKey`` and ``secretKey`` (a Job's credentials)."""


def s3_store_env(endpoint: str, bucket: str, prefix: str, region: str | None, ca_bundle: str | None) -> dict[str, str]:
    """The run's variables of an S3 model store (credentials apart: a Secret for a Job, the operator's own for
    a host process)."""
    env = {"DOCKYARD_KB_MODEL_STORE_BACKEND": "s3", "DOCKYARD_KB_S3_ENDPOINT": endpoint,
           "DOCKYARD_KB_S3_BUCKET": bucket, "DOCKYARD_KB_S3_PREFIX": prefix}  # fmt: skip
    if region:
        env["DOCKYARD_KB_S3_REGION"] = region
    if ca_bundle:
        env["DOCKYARD_KB_S3_CA_BUNDLE"] = ca_bundle
    return env


def wanted_spec(kb: Mapping[str, Any]) -> str:
    """What a run must index: ``<metadata.generation>/<reindex request>`` (``status.indexedSpec`` of the
    last run that did)."""
    meta = kb["metadata"]
    request = (meta.get("annotations") or {}).get(KB_REINDEX_ANNOTATION, "")
    return f"{meta.get('generation', 0)}/{request}"[:64]


def needs_run(kb: Mapping[str, Any]) -> bool:
    """Whether an indexing run must start: the spec or the reindex request moved past what the last run
    indexed, and none runs now (phase Indexing; a failed run waits for the next change or request)."""
    status = kb.get("status") or {}
    if status.get("phase") == "Indexing":
        return False
    if status.get("phase") == "Failed" and status.get("indexedSpec") == f"failed:{wanted_spec(kb)}"[:64]:
        return False
    return bool(status.get("indexedSpec") != wanted_spec(kb))


def rebuild(kb: Mapping[str, Any]) -> bool:
    """A new generation from scratch: a reindex request not yet indexed (the first run builds one anyway)."""
    status = kb.get("status") or {}
    request = (kb["metadata"].get("annotations") or {}).get(KB_REINDEX_ANNOTATION, "")
    return bool(request) and str(status.get("indexedSpec", "")).split("/", 1)[-1] != request


def run_name(kb: Mapping[str, Any]) -> str:
    """The run's (Job's) name: the object's name and what it indexes, within 63 characters."""
    digest = hashlib.sha256(f"{kb['metadata'].get('uid', '')}/{wanted_spec(kb)}".encode()).hexdigest()[:10]
    return f"kb-{kb['metadata']['name'][:40].rstrip('.-').replace('.', '-')}-{digest}"


def run_environment(
    kb: Mapping[str, Any], settings: IndexingSettings, embedding: tuple[str, str] | None
) -> dict[str, str]:
    """The run's environment (:mod:`dockyard_core.knowledge.job`). ``embedding``: the embedding
    ModelDeployment's (endpoint, model name)."""
    env = {
        "DOCKYARD_KB_NAMESPACE": kb["metadata"]["namespace"],
        "DOCKYARD_KB_NAME": kb["metadata"]["name"],
        "DOCKYARD_KNOWLEDGE_INDEX": settings.index_url,
        "DOCKYARD_KNOWLEDGE_FILES": settings.files_dir,
        "DOCKYARD_KB_REBUILD": "1" if rebuild(kb) else "0",
        "DOCKYARD_KB_SPEC": wanted_spec(kb),
        "DOCKYARD_KB_JOB": run_name(kb),
        **dict(settings.store_env),
    }
    if embedding is not None:
        env["DOCKYARD_KB_EMBEDDING_URL"], env["DOCKYARD_KB_EMBEDDING_MODEL"] = embedding
    return env


def indexing_job(kb: Mapping[str, Any], settings: IndexingSettings, env: Mapping[str, str]) -> dict[str, Any]:
    """The batch/v1 Job of one run: Dockyard's image, ``python -m dockyard_core.knowledge.job``, the model
    store's claim mounted where the facade reads it, no retries (a failed run is reported in the status
    and waits for the next change), labelled with its KnowledgeBase; in the KnowledgeBase's namespace it is
    owned by it (deleted with it), in Dockyard's own (``settings.namespace``, where the store's claim is)
    it goes an hour after it finished."""
    meta = kb["metadata"]
    name = run_name(kb)
    namespace = settings.namespace or meta["namespace"]
    labels = {KB_LABEL: meta["name"], KB_NAMESPACE_LABEL: meta["namespace"], "app.kubernetes.io/managed-by": "dockyard"}
    owner = (
        {"ownerReferences": [owner_reference("KnowledgeBase", dict(meta))]} if namespace == meta["namespace"] else {}
    )
    container: dict[str, Any] = {
        "name": "index",
        "image": settings.image,
        "command": ["python", "-m", JOB_MODULE],
        "env": [{"name": k, "value": v} for k, v in sorted(env.items())]
        + [
            {"name": f"DOCKYARD_KB_S3_{var}", "valueFrom": {"secretKeyRef": {"name": settings.s3_secret, "key": key}}}
            for var, key in (("ACCESS_KEY", "accessKey"), ("SECRET_KEY", "secretKey"))
            if settings.s3_secret
        ],
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "runAsNonRoot": True},
    }
    pod: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if settings.service_account:
        pod["serviceAccountName"] = settings.service_account
    if settings.store_claim:
        container["volumeMounts"] = [{"name": STORE_VOLUME, "mountPath": settings.store_path}]
        pod["volumes"] = [{"name": STORE_VOLUME, "persistentVolumeClaim": {"claimName": settings.store_claim}}]
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels, **owner},
        "spec": {
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 3600,
            "template": {"metadata": {"labels": labels}, "spec": pod},
        },
    }
