"""kwok Stages of the local control plane: kwok's stock node and pod stages plus Dockyard's own.

The stock stages ship inside the kwok Go module (copied next to the binaries by
``build-binaries.sh``). Dockyard adds simulation stages that tests trigger with the pod label
``dockyard.dev/simulate`` (``crash-loop``, ``never-ready``, ``image-pull-error``, ``failed-mount``), and
``dockyard-local-engine-start`` for model pods labelled ``dockyard.dev/local-engine: "true"``, which
it runs without making them Ready (the local engine runner does, when the engine answers). kwok's
``pod-ready`` stage is amended so it never races them.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

SIMULATE_LABEL = "dockyard.dev/simulate"
LOCAL_ENGINE_LABEL = "dockyard.dev/local-engine"
"""On model pods whose real engine the local engine runner starts: the runner makes them Ready."""
SIMULATIONS = ("crash-loop", "never-ready", "image-pull-error", "failed-mount")

STOCK_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


def _exclude_simulations(stage: dict[str, Any]) -> dict[str, Any]:
    """kwok's pod-ready, told to leave the pods of Dockyard's simulations alone."""
    expressions = stage["spec"]["selector"]["matchExpressions"]
    expressions.append(
        {
            "key": f'.metadata.labels["{SIMULATE_LABEL}"]',
            "operator": "NotIn",
            "values": list(SIMULATIONS),
        }
    )
    return stage


def _exclude_local_engines(stage: dict[str, Any]) -> dict[str, Any]:
    """kwok's pod-ready, told to leave the pods of local engines to the engine runner."""
    stage["spec"]["selector"]["matchExpressions"].append(
        {"key": f'.metadata.labels["{LOCAL_ENGINE_LABEL}"]', "operator": "NotIn", "values": ["true"]}
    )
    return stage


def stock_stages(stage_dir: Path) -> list[dict[str, Any]]:
    """kwok's stock stages, read from the kwok module's ``kustomize/stage`` directory."""
    stages = []
    for rel in STOCK_STAGE_FILES:
        stage = yaml.safe_load((stage_dir / rel).read_text())
        if stage["metadata"]["name"] == "pod-ready":
            stage = _exclude_local_engines(_exclude_simulations(stage))
        stages.append(stage)
    return stages


def dockyard_stages() -> list[dict[str, Any]]:
    """Dockyard's simulation stages, shipped with this package."""
    folder = resources.files(__package__).joinpath("stages")
    return [
        yaml.safe_load(entry.read_text())
        for entry in sorted(folder.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".yaml")
    ]


def all_stages(stage_dir: Path) -> list[dict[str, Any]]:
    return stock_stages(stage_dir) + dockyard_stages()
