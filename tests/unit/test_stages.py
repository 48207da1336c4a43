from __future__ import annotations

from pathlib import Path

import yaml

from dockyard_localcluster.stages import SIMULATE_LABEL, SIMULATIONS, _exclude_simulations, dockyard_stages


def test_every_simulation_has_a_stage_selected_by_its_label() -> None:
    stages = {s["metadata"]["name"]: s for s in dockyard_stages()}
    assert set(stages) == {f"dockyard-{name}" for name in SIMULATIONS} | {"dockyard-crash-loop-start"}
    for name in SIMULATIONS:
        selector = stages[f"dockyard-{name}"]["spec"]["selector"]["matchExpressions"]
        assert {"key": f'.metadata.labels["{SIMULATE_LABEL}"]', "operator": "In", "values": [name]} in selector
        assert stages[f"dockyard-{name}"]["spec"]["weight"] > 0  # beats kwok's weight-0 pod-ready


def test_pod_ready_is_told_to_leave_simulations_alone(tmp_path: Path) -> None:
    stage = {"metadata": {"name": "pod-ready"}, "spec": {"selector": {"matchExpressions": []}}}
    amended = _exclude_simulations(yaml.safe_load(yaml.safe_dump(stage)))
    [expr] = amended["spec"]["selector"]["matchExpressions"]
    assert expr["operator"] == "NotIn"
    assert set(expr["values"]) == {"never-ready", "image-pull-error", "crash-loop"}
