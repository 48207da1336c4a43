"""Settings of the local control plane, from ``DOCKYARD_*`` environment variables."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


def repo_root() -> Path:
    """The checkout this package lives in (editable install), else the working directory."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").is_file() else Path.cwd()


class LocalClusterSettings(BaseSettings):
    """How the local control plane is built and shaped."""

    model_config = SettingsConfigDict(env_prefix="DOCKYARD_", extra="ignore")

    cluster_name: str = Field(default="dockyard", description="kwokctl cluster name")
    state_dir: Path = Field(
        default_factory=lambda: repo_root() / ".dockyard",
        description="per-checkout state: kubeconfig, kwok work dir, logs (gitignored)",
    )
    apiserver_port: int = Field(default=0, ge=0, le=65535, description="0 lets kwokctl pick a free port")
    nodes_per_type: int = Field(default=2, ge=0, description="default size of each GPU node pool")
    cpu_nodes: int = Field(default=2, ge=0, description="general-purpose (untainted, GPU-less) nodes")
    node_pools: str = Field(default="", description='per-type sizes, e.g. "g5.xlarge=4,g5.48xlarge=1"')
    wait_seconds: int = Field(default=180, ge=1, description="how long to wait for the cluster")

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def kwok_workdir(self) -> Path:
        return self.state_dir / "kwok"
