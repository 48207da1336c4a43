"""Settings of the local control plane, from ``DOCKYARD_*`` environment variables.

Two clusters live side by side in one checkout and share nothing but the binaries:

- ``make run``'s cluster (:class:`LocalClusterSettings`, ``DOCKYARD_*``): ``dockyard``, state in
  ``.dockyard``, component ports chosen by kwokctl (counting down from 32767);
- the test suite's cluster (:class:`SuiteClusterSettings`, ``DOCKYARD_TEST_*``): ``dockyard-test``, state in
  ``.dockyard/test``, component ports taken from the kernel's ephemeral range (32768 and up on Linux),
  so that neither cluster can take the other's ports, even while one of them is stopped.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

DEMO_CLUSTER = "dockyard"
SUITE_CLUSTER = "dockyard-test"


def repo_root() -> Path:
    """The checkout this package lives in (editable install), else the working directory."""
    here = Path(__file__).resolve().parents[2]
    return here if (here / "pyproject.toml").is_file() else Path.cwd()


class LocalClusterSettings(BaseSettings):
    """How the local control plane is built and shaped (``make run``, ``make cluster``)."""

    model_config = SettingsConfigDict(env_prefix="DOCKYARD_", extra="ignore")

    cluster_name: str = Field(default=DEMO_CLUSTER, description="kwokctl cluster name")
    state_dir: Path = Field(
        default_factory=lambda: repo_root() / ".dockyard",
        description="per-checkout state: kubeconfig, kwok work dir, logs (gitignored)",
    )
    apiserver_port: int = Field(default=0, ge=0, le=65535, description="0 lets kwokctl pick a free port")
    ephemeral_ports: bool = Field(
        default=False,
        description="take every component's port from the kernel's ephemeral range when the cluster is "
        "created, instead of kwokctl's count-down from 32767 (which does not see the ports of a stopped "
        "binary-runtime cluster)",
    )
    nodes_per_type: int = Field(default=2, ge=0, description="default size of each GPU node pool")
    cpu_nodes: int = Field(default=2, ge=0, description="general-purpose (untainted, GPU-less) nodes")
    node_pools: str = Field(default="", description='per-type sizes, e.g. "g5.xlarge=4,g5.48xlarge=1"')
    wait_seconds: int = Field(default=180, ge=1, description="how long to wait for the cluster")
    pod_ready_delay_ms: int = Field(
        default=0, ge=0, description="simulated pods turn Ready this long after they start (kwok's pod-ready stage)"
    )

    @property
    def kubeconfig(self) -> Path:
        return self.state_dir / "kubeconfig"

    @property
    def kwok_workdir(self) -> Path:
        return self.state_dir / "kwok"

    def same_cluster(self, other: LocalClusterSettings) -> bool:
        """Whether both settings name one cluster (kwokctl knows a cluster by work dir and name)."""
        return self.kwok_workdir.resolve() == other.kwok_workdir.resolve() and self.cluster_name == other.cluster_name

    def as_env(self) -> dict[str, str]:
        """The ``DOCKYARD_*`` variables that make ``LocalClusterSettings()`` name this cluster, shaped the
        same (in this process or a child: ``python -m dockyard_localcluster run``, ``LocalCluster()``)."""
        return {f"DOCKYARD_{name.upper()}": str(value) for name, value in self.model_dump().items()}


class SuiteClusterSettings(LocalClusterSettings):
    """The test suite's own local cluster (``DOCKYARD_TEST_*``): never ``make run``'s, so a demo that runs,
    or ran, leaves no objects, operators or ports in the tests' way, and the tests touch nothing of it."""

    model_config = SettingsConfigDict(env_prefix="DOCKYARD_TEST_", extra="ignore")

    cluster_name: str = Field(default=SUITE_CLUSTER, description="kwokctl cluster name")
    state_dir: Path = Field(
        default_factory=lambda: repo_root() / ".dockyard" / "test",
        description="the suite's state: kubeconfig, kwok work dir, logs (gitignored)",
    )
    ephemeral_ports: bool = Field(default=True, description="see LocalClusterSettings.ephemeral_ports")
