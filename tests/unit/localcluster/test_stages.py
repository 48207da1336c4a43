from __future__ import annotations

from pathlib import Path

import yaml

from dockyard_localcluster.stages import (
    LOCAL_ENGINE_LABEL,
    SIMULATE_LABEL,
    SIMULATIONS,
    _exclude_local_engines,
    _exclude_simulations,
    dockyard_stages,
)


def test_every_simulation_has_a_stage_selected_by_its_label() -> None:
    stages = {s["metadata"]["name"]: s for s in dockyard_stages()}
    assert set(stages) == {f"dockyard-{name}" for name in SIMULATIONS} | {
        "dockyard-crash-loop-start",
        "dockyard-local-engine-start",
    }
    for name in SIMULATIONS:
        selector = stages[f"dockyard-{name}"]["spec"]["selector"]["matchExpressions"]
        assert {"key": f'.metadata.labels["{SIMULATE_LABEL}"]', "operator": "In", "values": [name]} in selector
        assert stages[f"dockyard-{name}"]["spec"]["weight"] > 0  # beats kwok's weight-0 pod-ready


def test_pod_ready_is_told_to_leave_simulations_alone(tmp_path: Path) -> None:
    stage = {"metadata": {"name": "pod-ready"}, "spec": {"selector": {"matchExpressions": []}}}
    amended = _exclude_simulations(yaml.safe_load(yaml.safe_dump(stage)))
    [expr] = amended["spec"]["selector"]["matchExpressions"]
    assert expr["operator"] == "NotIn"
    assert set(expr["values"]) == {"never-ready", "image-pull-error", "crash-loop", "failed-mount"}


def test_pod_ready_leaves_local_engine_pods_to_the_runner() -> None:
    stage = {"metadata": {"name": "pod-ready"}, "spec": {"selector": {"matchExpressions": []}}}
    [expr] = _exclude_local_engines(stage)["spec"]["selector"]["matchExpressions"]
    assert expr == {"key": f'.metadata.labels["{LOCAL_ENGINE_LABEL}"]', "operator": "NotIn", "values": ["true"]}


def test_local_engine_pods_run_without_becoming_ready() -> None:
    stage = {s["metadata"]["name"]: s for s in dockyard_stages()}["dockyard-local-engine-start"]
    selector = stage["spec"]["selector"]["matchExpressions"]
    assert {"key": f'.metadata.labels["{LOCAL_ENGINE_LABEL}"]', "operator": "In", "values": ["true"]} in selector
    template = yaml.safe_load(stage["spec"]["next"]["statusTemplate"].replace("{{", "#").replace("}}", ""))
    ready = [c for c in template["conditions"] if c["type"] == "Ready"]
    assert ready[0]["status"] == "False"
