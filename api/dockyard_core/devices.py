"""The device catalog: the one place that knows the hardware behind each ``deviceType``
(docs/public-api.md, 'Deploy a model').

Figures are AWS's published instance specifications (vCPU, memory in GiB, GPU count and model,
memory per GPU in GB). The operator sizes pods from it, the local control plane builds its fake GPU
node pools from it, and the resource types take their ``deviceType`` enum from it.

Pure data (plus an optional catalog file): imports nothing from the project, kopf or FastAPI.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path

import yaml

GPU_RESOURCE = "nvidia.com/gpu"
"""The extended resource the NVIDIA device plugin advertises and pods request."""

GPU_TAINT_KEY = "nvidia.com/gpu"
GPU_TAINT_VALUE = "present"
GPU_TAINT_EFFECT = "NoSchedule"
INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"


@dataclass(frozen=True)
class Device:
    """One AWS GPU instance type."""

    name: str
    vcpu: int
    memory_gib: int
    gpus: int
    gpu_model: str
    gpu_memory_gb: int

    @property
    def gpu_product_label(self) -> str:
        """The value NVIDIA's GPU feature discovery puts in ``nvidia.com/gpu.product``."""
        return f"NVIDIA-{self.gpu_model}"


BUILT_IN: dict[str, Device] = {
    d.name: d
    for d in (
        Device("g4dn.xlarge", vcpu=4, memory_gib=16, gpus=1, gpu_model="T4", gpu_memory_gb=16),
        Device("g5.xlarge", vcpu=4, memory_gib=16, gpus=1, gpu_model="A10G", gpu_memory_gb=24),
        Device("g5.2xlarge", vcpu=8, memory_gib=32, gpus=1, gpu_model="A10G", gpu_memory_gb=24),
        Device("g6e.xlarge", vcpu=4, memory_gib=32, gpus=1, gpu_model="L40S", gpu_memory_gb=48),
        Device("g4dn.12xlarge", vcpu=48, memory_gib=192, gpus=4, gpu_model="T4", gpu_memory_gb=16),
        Device("g5.12xlarge", vcpu=48, memory_gib=192, gpus=4, gpu_model="A10G", gpu_memory_gb=24),
        Device("g5.48xlarge", vcpu=192, memory_gib=768, gpus=8, gpu_model="A10G", gpu_memory_gb=24),
        Device("g4dn.metal", vcpu=96, memory_gib=384, gpus=8, gpu_model="T4", gpu_memory_gb=16),
    )
}
"""All eight device types, in the order docs/public-api.md ('Deploy a model') lists them."""


class DeviceCatalogError(ValueError):
    """A device catalog file that cannot be used."""


def load_catalog(path: str | None) -> dict[str, Device]:
    """The built-in catalog, with the hardware figures of a catalog file (:data:`CATALOG_ENV`,
    the Helm chart's ``deviceCatalog``) laid over it. The file may correct figures of the eight
    types (e.g. a different memory reserve); it cannot add types, because the API's deviceType enum
    is the fixed list of eight (docs/install.md, 'Catalogs')."""
    if not path:
        return dict(BUILT_IN)
    entries = yaml.safe_load(Path(path).read_text()) or []
    if isinstance(entries, dict):  # the chart's ConfigMap: {devices: [...]}
        entries = entries.get("devices") or []
    if not isinstance(entries, list):
        raise DeviceCatalogError(f"{path}: expected a list of devices")
    known = {f.name for f in fields(Device)}
    catalog = dict(BUILT_IN)
    for entry in entries:
        if not isinstance(entry, dict) or entry.get("name") not in BUILT_IN:
            raise DeviceCatalogError(f"{path}: {entry!r} is not one of the device types {', '.join(BUILT_IN)}")
        unknown = set(entry) - known
        if unknown:
            raise DeviceCatalogError(f"{path}: {entry['name']}: unknown field(s) {', '.join(sorted(unknown))}")
        merged = {**BUILT_IN[entry["name"]].__dict__, **entry}
        if not all(
            isinstance(merged[k], int) and merged[k] > 0 for k in ("vcpu", "memory_gib", "gpus", "gpu_memory_gb")
        ):
            raise DeviceCatalogError(f"{path}: {entry['name']}: vcpu, memory_gib, gpus, gpu_memory_gb must be positive")
        catalog[entry["name"]] = Device(**merged)
    return catalog


CATALOG_ENV = "DOCKYARD_DEVICE_CATALOG"
"""The environment variable naming the catalog file (the chart sets it in both components). The
operator reads it once, with its settings (``OperatorSettings.device_catalog``), and keeps the catalog
in its Context; nothing reads it at import."""


def from_environment() -> dict[str, Device]:
    """The catalog named by :data:`CATALOG_ENV` now (for the local cluster tool, which has no settings)."""
    return load_catalog(os.environ.get(CATALOG_ENV))


DEVICE_TYPES: tuple[str, ...] = tuple(BUILT_IN)
