"""Operator overhead: N ModelDeployments vs N equivalent plain Deployments on the same local cluster.

All phases run in one process, on one cluster, one after the other: plain Deployments, the same
Deployments with the ConfigMaps and Services the operator creates beside them ("by hand"), the
ModelDeployments through the operator, then "by hand" and plain again to expose drift. The ratio
(the target) compares the time from "create N objects" to "all ready" with the plain runs; the
ratio against the "by hand" runs isolates what Dockyard itself adds (the custom resource, the
operator, its status writes and Events) to the same workload. "All ready": every Deployment
available; for Dockyard, every dock job SUCCESS, which itself requires the Deployment available
with its pods Ready. Target: ratio <= 1.3. Every phase observes with a watch (as `kubectl get -w`
does), not by polling lists, so the observer adds no load.

Each phase also prints the load average and the CPU seconds it cost the control plane (and the
operator): on a shared machine the wall times move with other work, the CPU seconds much less.

    .venv/bin/python bench/operator_overhead.py [--count 200]
"""

from __future__ import annotations

import argparse
import json
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from bench.common import (
    api_for,
    bench_cluster,
    control_plane_cpu,
    cpu_seconds,
    delete_namespace,
    load,
    namespace,
    operator_process,
    wait_until,
    watch_until_all,
)
from dockyard_core.devices import DEVICE_TYPES
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION, Model, ModelDeployment
from dockyard_localcluster.cluster import LocalCluster
from dockyard_operator.builders import ModelWorkload, model_workload, resolve_served_model
from dockyard_operator.runtimes import DEFAULT_CATALOG, select_runtime


def mdep_body(name: str, device_type: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ModelDeployment",
        "metadata": {"name": name},
        "spec": {"modelRef": "model", "modelType": "openSource", "name": name, "deviceType": device_type},
    }


def workload(ns: str, name: str, device_type: str) -> ModelWorkload:
    """Exactly the objects the operator would create for that ModelDeployment (less owner references)."""
    mdep = ModelDeployment.model_validate({**mdep_body(name, device_type), "metadata": {"name": name, "namespace": ns}})
    model = Model.model_validate({"apiVersion": f"{GROUP}/{VERSION}", "kind": "Model", "metadata": {"name": "model"},
                                  "spec": {"source": {"hub": {"id": "meta-llama/Llama-3.1-8B-Instruct"}}},
                                  "status": {"phase": "ReadyToDeploy"}})  # fmt: skip
    runtime_name, runtime = select_runtime(mdep.spec, DEFAULT_CATALOG)
    served = resolve_served_model("model", model, None, "dockyard-model-store")
    return model_workload(mdep, served, runtime_name, runtime, progress_deadline_seconds=900)


def _version(list_fn: Any, *args: Any) -> str:
    """The resourceVersion to watch from: the (still empty) namespace's list."""
    return str(json.loads(list_fn(*args, _preload_content=False).data)["metadata"]["resourceVersion"])


def run_plain(api: client.ApiClient, ns: str, names: list[tuple[str, str]], *, by_hand: bool) -> float:
    """Create the Deployments (``by_hand``: with their ConfigMaps and Services, in the operator's order)
    and wait until every Deployment is available."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    workloads = [workload(ns, n, t) for n, t in names]
    create = {
        "ConfigMap": core.create_namespaced_config_map,
        "Service": core.create_namespaced_service,
        "Deployment": apps.create_namespaced_deployment,
    }

    def create_one(w: ModelWorkload) -> None:
        for obj in w.objects() if by_hand else [w.deployment]:
            create[obj["kind"]](ns, obj)

    since = _version(apps.list_namespaced_deployment, ns)
    start = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(create_one, workloads))
    watch_until_all(apps.list_namespaced_deployment, ns, names={w.deployment["metadata"]["name"] for w in workloads},
                    ready=lambda d: ((d.get("status") or {}).get("availableReplicas") or 0) >= 1,
                    since=since, timeout=600, what="plain Deployments available")  # fmt: skip
    return time.monotonic() - start


def plain_phase(api: client.ApiClient, cluster: LocalCluster, names: list[tuple[str, str]], *, by_hand: bool) -> Phase:
    ns = namespace(api, "bench-plain")
    cpu = control_plane_cpu(cluster)
    took = run_plain(api, ns, names, by_hand=by_hand)
    phase = Phase(took, control_plane_cpu(cluster) - cpu)
    delete_namespace(api, ns)
    what = "Deployments + ConfigMaps + Services" if by_hand else "Deployments"
    print(f"plain {what}: {took:.1f}s  [control plane {phase.cpu:.1f} CPU-s; load {load()}]", flush=True)
    return phase


@dataclass(frozen=True)
class Phase:
    seconds: float
    cpu: float
    """CPU seconds of the control plane (and the operator, where one runs)."""


def mean(phases: list[Phase]) -> Phase:
    return Phase(sum(p.seconds for p in phases) / len(phases), sum(p.cpu for p in phases) / len(phases))


def run_dockyard(api: client.ApiClient, ns: str, names: list[tuple[str, str]]) -> float:
    objects = client.CustomObjectsApi(api)
    model = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Model", "metadata": {"name": "model"},
             "spec": {"source": {"hub": {"id": "meta-llama/Llama-3.1-8B-Instruct"}}}}  # fmt: skip
    objects.create_namespaced_custom_object(GROUP, VERSION, ns, "models", model)
    wait_until(lambda: objects.get_namespaced_custom_object(GROUP, VERSION, ns, "models", "model")
               .get("status", {}).get("phase") == "ReadyToDeploy", 60, "model ReadyToDeploy")  # fmt: skip
    mdeps = (GROUP, VERSION, ns, "modeldeployments")
    since = _version(objects.list_namespaced_custom_object, *mdeps)
    start = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda nt: objects.create_namespaced_custom_object(*mdeps, mdep_body(*nt)), names))
    watch_until_all(objects.list_namespaced_custom_object, *mdeps, names={n for n, _ in names}, since=since,
                    ready=lambda m: ((m.get("status") or {}).get("job") or {}).get("status") == "SUCCESS",
                    timeout=900, what="ModelDeployments SUCCESS")  # fmt: skip
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200, help="ModelDeployments (and plain Deployments)")
    args = parser.parse_args()
    per_type = -(-args.count // len(DEVICE_TYPES)) + 1  # every replica takes a whole GPU node
    cluster = bench_cluster("bench-overhead", nodes_per_type=per_type)
    api = api_for(cluster)
    names = [(f"m{i}", DEVICE_TYPES[i % len(DEVICE_TYPES)]) for i in range(args.count)]
    nodes = per_type * len(DEVICE_TYPES)
    print(f"inputs: N={args.count} (1 replica each, device types round-robin), {nodes} fake GPU nodes, "
          "local control plane (kwok)", flush=True)  # fmt: skip

    plain = [plain_phase(api, cluster, names, by_hand=False)]
    by_hand = [plain_phase(api, cluster, names, by_hand=True)]
    with operator_process(cluster) as operator:
        dock_ns = namespace(api, "bench-dockyard")
        cpu, operator_cpu = control_plane_cpu(cluster), cpu_seconds(operator.pid)
        took = run_dockyard(api, dock_ns, names)
        dockyard_cpu = control_plane_cpu(cluster) - cpu
        operator_cpu = cpu_seconds(operator.pid) - operator_cpu
        print(f"ModelDeployments via the operator: {took:.1f}s  [control plane {dockyard_cpu:.1f} CPU-s, "
              f"operator {operator_cpu:.1f} CPU-s; load {load()}]", flush=True)  # fmt: skip
        delete_namespace(api, dock_ns)
    dockyard = Phase(took, dockyard_cpu + operator_cpu)
    by_hand.append(plain_phase(api, cluster, names, by_hand=True))
    plain.append(plain_phase(api, cluster, names, by_hand=False))

    baseline, hand = mean(plain), mean(by_hand)
    ratio = dockyard.seconds / baseline.seconds
    print(f"ratio (ModelDeployments / mean of plain Deployment runs) = {dockyard.seconds:.1f} / "
          f"{baseline.seconds:.1f} = {ratio:.2f} (target <= 1.30: {'met' if ratio <= 1.3 else 'NOT met'})")  # fmt: skip
    print(f"CPU seconds (control plane, + operator) = {dockyard.cpu:.1f} / {baseline.cpu:.1f} = "
          f"{dockyard.cpu / baseline.cpu:.2f} (informational)")  # fmt: skip
    print(f"Dockyard's own share, against the same ConfigMaps, Services and Deployments created by hand: "
          f"{dockyard.seconds:.1f} / {hand.seconds:.1f} = {dockyard.seconds / hand.seconds:.2f}; CPU seconds "
          f"{dockyard.cpu:.1f} / {hand.cpu:.1f} = {dockyard.cpu / hand.cpu:.2f} (informational)")  # fmt: skip


if __name__ == "__main__":
    main()
