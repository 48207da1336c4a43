"""Operator settings, from ``DOCKYARD_OPERATOR_*`` environment variables."""

from __future__ import annotations

import functools
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import SettingsConfigDict

from dockyard_core.devices import CATALOG_ENV
from dockyard_core.storesettings import ModelStoreSettings


class OperatorSettings(ModelStoreSettings):
    model_config = SettingsConfigDict(env_prefix="DOCKYARD_OPERATOR_", extra="ignore")

    health_host: str = Field(default="127.0.0.1", description="address of /healthz and /readyz")
    health_port: int = Field(default=8081, ge=0, le=65535, description="port of /healthz and /readyz")
    kubeconfig: str | None = Field(default=None, description="unset: KUBECONFIG, then in-cluster")
    runtime_catalog: str | None = Field(default=None, description="YAML file of the runtime catalog")
    device_catalog: str | None = Field(
        default=None,
        validation_alias=AliasChoices(CATALOG_ENV, "device_catalog"),
        description="YAML file of the device catalog (DOCKYARD_DEVICE_CATALOG, shared with the facade); "
        "unset: the built-in one",
    )
    progress_deadline_seconds: int = Field(default=900, ge=10, description="Deployment progressDeadlineSeconds")
    unschedulable_deadline_seconds: float = Field(
        default=300, gt=0, description="how long a replica may stay unschedulable before the job FAILS"
    )
    node_autoscaling: bool = Field(
        default=False,
        description="a cluster autoscaler (or Karpenter) can add GPU nodes: a replica whose device type has no node "
        "waits for the unschedulable deadline instead of failing at once (NoMatchingNode)",
    )
    observe_interval_seconds: float = Field(
        default=5.0,
        gt=0,
        description="re-assess a job in flight this often while a pod sits on a node without starting (only its "
        "Events tell a volume that cannot be mounted) or the job waits for something; watch events re-assess at "
        "once, the unschedulable deadline is checked when it falls due, a rollout going as it should waits for "
        "its events",
    )
    settled_interval_seconds: float = Field(
        default=10.0, gt=0, description="how often a settled workload is re-checked (replica counts, drift)"
    )
    status_settle_seconds: float = Field(
        default=120.0,
        ge=0,
        description="a new object's first dock job (labelled by the facade) that goes as it should gets its status "
        "only when it ends, if it ends within this many seconds of the object's creation: a fast rollout costs "
        "one status write, not two; one still in flight then gets its IN_PROGRESS status at that moment, one "
        "waiting for something (Unschedulable, a mount) at once. 0: the IN_PROGRESS status at once",
    )
    success_events: bool = Field(
        default=False,
        description="post a Normal Deployed Event when a dock job succeeds (failures always get a Warning "
        "Event; a success is in the status, the log and the jobs metric)",
    )
    autoscale_interval_seconds: float = Field(default=0.25, gt=0, description="autoscaler tick")
    metrics_timeout_seconds: float = Field(default=0.5, gt=0, description="engine /metrics scrape timeout")
    endpoint_timeout_seconds: float = Field(default=3.0, gt=0, description="external tool reachability check")
    webhook_host: str = Field(default="127.0.0.1", description="address the admission webhook server listens on")
    webhook_port: int | None = Field(
        default=None, ge=1, le=65535, description="admission webhook port; unset: a free port (local runs)"
    )
    webhook_url_host: str | None = Field(
        default=None, description="host name the API server calls (managed mode); unset: webhook_host"
    )
    webhook_certfile: str | None = Field(default=None, description="TLS certificate; unset: a self-signed one")
    webhook_keyfile: str | None = Field(default=None, description="TLS private key of webhook_certfile")
    webhook_managed: bool = Field(
        default=True,
        description="the operator writes its own webhook configurations (local runs; failurePolicy Fail, "
        "like the chart's default); "
        "false: the Helm chart owns them (failurePolicy Fail by default)",
    )
    public_url: str = Field(
        default="http://127.0.0.1:8080", description="the facade's public URL, for environments' generated URLs"
    )
    local_engines: bool = Field(
        default=False,
        description="the local control plane runs real model engines on the host (make run): model pods get "
        "the label dockyard.dev/local-engine and the readiness gate of that name, which the local engine "
        "runner satisfies when the engine answers (docs/runtimes.md)",
    )
    environment_interval_seconds: float = Field(
        default=10.0, gt=0, description="how often environments are re-checked (tool deployments, keys)"
    )

    # --- what the checklist's Monitoring items read (docs/observability.md, "In the checklist") ---
    log_format: str = Field(default="plain", description="the operator's log format (also --log-format's default)")
    facade_log_format: str = Field(default="", description="the facade's log format, as the chart sets it")
    log_shipping: str = Field(default="", description="where the cluster ships container logs, as configured")
    alert_rules: str = Field(
        default="",
        description='where Dockyard\'s alert rules are: "PrometheusRule <namespace>/<name>", "elsewhere" or ""',
    )
    prometheus_url: str = Field(
        default="", description="the Prometheus that loads the rules (its HTTP API); empty: not read"
    )

    # --- model import (the job that chunked uploads become) ---
    import_concurrency: int = Field(default=2, ge=1, description="imports processed at the same time")
    import_retry_interval_seconds: float = Field(
        default=30, gt=0, description="how often an import job still IN_PROGRESS is looked at again"
    )
    max_extracted_bytes: int = Field(
        default=400 * 1024**3, ge=1, description="an archive may expand to at most this many bytes"
    )
    model_gc_interval_seconds: float = Field(
        default=600,
        ge=0,
        description="stored files of deleted Models are collected when the operator starts, then this often (0: never)",
    )
    model_gc_grace_seconds: float = Field(
        default=60,
        ge=0,
        description="a Model directory changed less than this long before the Models were listed is kept "
        "(clock differences of a shared volume)",
    )
    max_archive_members: int = Field(default=100_000, ge=1, description="an archive may hold at most this many members")

    # --- weight delivery: the storage initializer of model pods ---
    download_url: str | None = Field(
        default=None,
        description="URL of the facade that model pods download weights from (in a cluster: the facade Service, "
        "e.g. http://dockyard-facade.dockyard-system.svc:8080); unset: public_url",
    )
    storage_initializer_image: str = Field(
        default="ghcr.io/dockyard-dev/dockyard:0.1.0",
        description="image of the storage-initializer init container (Dockyard's own image)",
    )
    knowledge_job_store_claim: str = Field(
        default="",
        description="the model store's PersistentVolumeClaim, mounted into knowledge-base indexing Jobs at "
        "model_store (the chart sets it); empty: no volume (an index and documents elsewhere)",
    )
    knowledge_job_namespace: str = Field(
        default="",
        description="where indexing Jobs run: Dockyard's own namespace, whose model-store claim they mount (the "
        "chart sets it); empty: the KnowledgeBase's namespace",
    )
    knowledge_job_s3_secret: str = Field(
        default="",
        description="with the s3 model store: the Secret whose accessKey and secretKey indexing Jobs read the "
        "documents with (the chart's model-store Secret); empty: Jobs get no S3 credentials",
    )
    knowledge_job_service_account: str = Field(
        default="",
        description="the service account of indexing Jobs, which may get knowledgebases and patch their status "
        "(the chart's <release>-indexer); empty: the namespace's default account",
    )
    knowledge_runs: Literal["job", "local"] = Field(
        default="job",
        description="how indexing runs of knowledge bases run: job (a Kubernetes Job from Dockyard's image) or "
        "local (the same command as a host process of the operator's machine: the local control plane, whose "
        "kwok pods run nothing; make run sets it)",
    )
    knowledge_interval_seconds: float = Field(
        default=15.0, gt=0, description="how often knowledge bases waiting for a run (embedding model) are looked at"
    )
    download_token_seconds: int = Field(
        default=24 * 3600, ge=120, description="lifetime of a model download token (renewed at half of it)"
    )


@functools.cache
def operator_settings() -> OperatorSettings:
    """The operator's settings, read from the environment once per process (the kopf handlers' intervals
    are fixed when they are registered, so a later read could only disagree with them)."""
    return OperatorSettings()
