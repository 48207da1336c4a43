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
    loading_stages,
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


def test_a_slow_rollout_starts_the_containers_at_once_and_turns_ready_after_the_delay() -> None:
    """With a pod-ready delay, kwok's pod-ready becomes two stages, as a model server behaves: Running with
    its containers started and Ready False at once, Ready the delay later; kwok's fast pod-ready is gone."""
    template = (
        '{{ $now := Now }}\nconditions:\n- status: "True"\n  type: Initialized\n- status: "True"\n  type: Ready\n'
        '- status: "True"\n  type: ContainersReady\ncontainerStatuses:\n- name: c\n  ready: true\n'
        "initContainerStatuses:\n- name: i\n  ready: true\n{{ $hostIPs := NodeIPsWith .spec.nodeName }}\n"
        "podIP: x\nphase: Running\nstartTime: {{ $now | Quote }}\n"
    )
    phase = {"key": ".status.phase", "operator": "In", "values": ["Pending"]}
    pod_ready = {
        "metadata": {"name": "pod-ready"},
        "spec": {"selector": {"matchExpressions": [phase]}, "next": {"statusTemplate": template}},
    }
    loading, loaded = loading_stages(pod_ready, 30000)
    assert (loading["metadata"]["name"], loaded["metadata"]["name"]) == (
        "dockyard-model-loading",
        "dockyard-model-loaded",
    )
    assert "delay" not in loading["spec"]
    assert loaded["spec"]["delay"] == {"durationMilliseconds": 30000}
    started = yaml.safe_load(loading["spec"]["next"]["statusTemplate"].split("\n", 1)[1].split("{{ $hostIPs")[0])
    assert {c["type"]: c["status"] for c in started["conditions"]} == {
        "Initialized": "True", "Ready": "False", "ContainersReady": "False"
    }  # fmt: skip
    assert started["containerStatuses"] == [{"name": "c", "ready": False, "started": True}]
    assert started["initContainerStatuses"] == [{"name": "i", "ready": True}]  # init containers finished
    assert loading["spec"]["selector"]["matchExpressions"] == [phase]
    assert loaded["spec"]["selector"]["matchExpressions"] == [{**phase, "values": ["Running"]}]
    # kwok's own Ready, without new addresses (a second podIP is refused) or a new start time
    assert loaded["spec"]["next"]["statusTemplate"] == template.split("{{ $hostIPs")[0] + "phase: Running\n"
    assert pod_ready["spec"]["selector"]["matchExpressions"] == [phase]  # the stock stage is left as it was
