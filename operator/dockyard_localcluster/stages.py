"""kwok Stages of the local control plane: kwok's stock node and pod stages plus Dockyard's own.

The stock stages ship inside the kwok Go module (copied next to the binaries by
``build-binaries.sh``). Dockyard adds simulation stages that tests trigger with the pod label
``dockyard.dev/simulate`` (``crash-loop``, ``never-ready``, ``image-pull-error``, ``failed-mount``), and
``dockyard-local-engine-start`` for model pods labelled ``dockyard.dev/local-engine: "true"``, which
it runs without making them Ready (the local engine runner does, when the engine answers). kwok's
``pod-ready`` stage is amended so it never races them.
"""

from __future__ import annotations

import copy
import re
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


_READY = re.compile(r'status: "True"(\n\s*)type: (Ready|ContainersReady)\b')


def loading_stages(pod_ready: dict[str, Any], milliseconds: int) -> list[dict[str, Any]]:
    """kwok's pod-ready split in two, for pods that take ``milliseconds`` to become Ready the way a model
    server does: its containers start at once and it turns Ready when the model is loaded (its readiness
    probe). ``dockyard-model-loading`` makes a Pending pod Running with its containers started and Ready
    False; ``dockyard-model-loaded`` makes it Ready ``milliseconds`` later (kwok's ``spec.delay``)."""
    template = pod_ready["spec"]["next"]["statusTemplate"]
    containers, init = template.split("initContainerStatuses:", 1)
    loading = copy.deepcopy(pod_ready)
    loading["metadata"]["name"] = "dockyard-model-loading"
    not_ready = _READY.sub(r'status: "False"\1type: \2', containers).replace(
        "ready: true", "ready: false\n  started: true"
    )
    loading["spec"]["next"]["statusTemplate"] = not_ready + "initContainerStatuses:" + init
    loaded = copy.deepcopy(pod_ready)
    loaded["metadata"]["name"] = "dockyard-model-loaded"
    for expression in loaded["spec"]["selector"]["matchExpressions"]:
        if expression["key"] == ".status.phase":
            expression["values"] = ["Running"]
    loaded["spec"]["delay"] = {"durationMilliseconds": milliseconds}
    # Ready without new addresses: the pod keeps those it got when it started (a second podIP of the same
    # family is refused) and its start time
    loaded["spec"]["next"]["statusTemplate"] = template.split("{{ $hostIPs", 1)[0] + "phase: Running\n"
    return [loading, loaded]


def stock_stages(stage_dir: Path, pod_ready_delay_ms: int = 0) -> list[dict[str, Any]]:
    """kwok's stock stages, read from the kwok module's ``kustomize/stage`` directory; with
    ``pod_ready_delay_ms``, pod-ready is :func:`loading_stages` (0: kwok's fast stages, Ready at once)."""
    stages = []
    for rel in STOCK_STAGE_FILES:
        stage = yaml.safe_load((stage_dir / rel).read_text())
        if stage["metadata"]["name"] == "pod-ready":
            stage = _exclude_local_engines(_exclude_simulations(stage))
            if pod_ready_delay_ms:
                stages += loading_stages(stage, pod_ready_delay_ms)
                continue
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


def all_stages(stage_dir: Path, pod_ready_delay_ms: int = 0) -> list[dict[str, Any]]:
    return stock_stages(stage_dir, pod_ready_delay_ms) + dockyard_stages()
