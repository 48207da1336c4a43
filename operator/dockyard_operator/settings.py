"""Operator settings, from ``DOCKYARD_OPERATOR_*`` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class OperatorSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="DOCKYARD_OPERATOR_", extra="ignore")

    health_host: str = Field(default="127.0.0.1", description="address of /healthz and /readyz")
    health_port: int = Field(default=8081, ge=0, le=65535, description="port of /healthz and /readyz")
    kubeconfig: str | None = Field(default=None, description="unset: KUBECONFIG, then in-cluster")
    runtime_catalog: str | None = Field(default=None, description="YAML file of the runtime catalog")
    model_store_claim: str = Field(default="dockyard-model-store", description="PVC of the model store")
    progress_deadline_seconds: int = Field(default=900, ge=10, description="Deployment progressDeadlineSeconds")
    unschedulable_deadline_seconds: float = Field(
        default=300, gt=0, description="how long a replica may stay unschedulable before the job FAILS"
    )
    observe_interval_seconds: float = Field(
        default=5.0,
        gt=0,
        description="re-assess a job in flight at least this often (watch events re-assess it at once; "
        "the unschedulable deadline is checked when it falls due)",
    )
    settled_interval_seconds: float = Field(
        default=10.0, gt=0, description="how often a settled workload is re-checked (replica counts, drift)"
    )
    autoscale_interval_seconds: float = Field(default=0.25, gt=0, description="autoscaler tick")
    metrics_timeout_seconds: float = Field(default=0.5, gt=0, description="engine /metrics scrape timeout")
    endpoint_timeout_seconds: float = Field(default=3.0, gt=0, description="external tool reachability check")
