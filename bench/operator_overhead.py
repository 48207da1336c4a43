"""Operator overhead: N ModelDeployments vs N equivalent plain Deployments on the same local cluster.

Both halves run in one process, on one cluster, one after the other (plain first, then through the
operator, then plain again to expose drift), and the ratio compares the time from "create N objects"
to "all ready" (plain: every Deployment available; Dockyard: every dock job SUCCESS, which itself
requires the Deployment available with its pods Ready). Target: ratio <= 1.3.

Each phase also prints the load average and the CPU seconds it cost the control plane (and the
operator): on a shared machine the wall times move with other work, the CPU seconds much less.

    .venv/bin/python bench/operator_overhead.py [--count 200]
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
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
)
from dockyard_api.devices import DEVICE_TYPES
from dockyard_api.resources import GROUP
from dockyard_api.resources.v1alpha1 import VERSION, Model, ModelDeployment
from dockyard_operator.builders import model_workload, resolve_served_model
from dockyard_operator.runtimes import DEFAULT_CATALOG, select_runtime


def mdep_body(name: str, device_type: str) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ModelDeployment",
        "metadata": {"name": name},
        "spec": {"modelRef": "model", "modelType": "openSource", "name": name, "deviceType": device_type},
    }


def plain_deployment(ns: str, name: str, device_type: str) -> dict[str, Any]:
    """Exactly the Deployment the operator would create for that ModelDeployment."""
    mdep = ModelDeployment.model_validate({**mdep_body(name, device_type), "metadata": {"name": name, "namespace": ns}})
    model = Model.model_validate({"apiVersion": f"{GROUP}/{VERSION}", "kind": "Model", "metadata": {"name": "model"},
                                  "spec": {"source": {"hub": {"id": "meta-llama/Llama-3.1-8B-Instruct"}}},
                                  "status": {"phase": "ReadyToDeploy"}})  # fmt: skip
    runtime_name, runtime = select_runtime(mdep.spec, DEFAULT_CATALOG)
    served = resolve_served_model("model", model, None, "dockyard-model-store")
    return model_workload(mdep, served, runtime_name, runtime, progress_deadline_seconds=900).deployment


def run_plain(api: client.ApiClient, ns: str, names: list[tuple[str, str]]) -> float:
    apps = client.AppsV1Api(api)
    bodies = [plain_deployment(ns, n, t) for n, t in names]
    start = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda b: apps.create_namespaced_deployment(ns, b), bodies))

    def all_available() -> bool:
        items = apps.list_namespaced_deployment(ns).items
        return len(items) == len(names) and all((d.status.available_replicas or 0) >= 1 for d in items)

    wait_until(all_available, 600, "plain Deployments available")
    return time.monotonic() - start


def run_dockyard(api: client.ApiClient, ns: str, names: list[tuple[str, str]]) -> float:
    objects = client.CustomObjectsApi(api)
    model = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Model", "metadata": {"name": "model"},
             "spec": {"source": {"hub": {"id": "meta-llama/Llama-3.1-8B-Instruct"}}}}  # fmt: skip
    objects.create_namespaced_custom_object(GROUP, VERSION, ns, "models", model)
    wait_until(lambda: objects.get_namespaced_custom_object(GROUP, VERSION, ns, "models", "model")
               .get("status", {}).get("phase") == "ReadyToDeploy", 60, "model ReadyToDeploy")  # fmt: skip
    start = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda nt: objects.create_namespaced_custom_object(
            GROUP, VERSION, ns, "modeldeployments", mdep_body(*nt)), names))  # fmt: skip

    def all_success() -> bool:
        items = objects.list_namespaced_custom_object(GROUP, VERSION, ns, "modeldeployments")["items"]
        jobs = [(i.get("status") or {}).get("job") or {} for i in items]
        return len(items) == len(names) and all(j.get("status") == "SUCCESS" for j in jobs)

    wait_until(all_success, 900, "ModelDeployments SUCCESS")
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

    cpu = control_plane_cpu(cluster)
    plain_ns = namespace(api, "bench-plain")
    plain_1 = run_plain(api, plain_ns, names)
    plain_1_cpu = control_plane_cpu(cluster) - cpu
    delete_namespace(api, plain_ns)
    print(
        f"plain Deployments (1st): {plain_1:.1f}s  [control plane {plain_1_cpu:.1f} CPU-s; load {load()}]", flush=True
    )

    with operator_process(cluster) as operator:
        dock_ns = namespace(api, "bench-dockyard")
        cpu, operator_cpu = control_plane_cpu(cluster), cpu_seconds(operator.pid)
        dockyard = run_dockyard(api, dock_ns, names)
        dockyard_cpu = control_plane_cpu(cluster) - cpu
        operator_cpu = cpu_seconds(operator.pid) - operator_cpu
        print(f"ModelDeployments via the operator: {dockyard:.1f}s  [control plane {dockyard_cpu:.1f} CPU-s, "
              f"operator {operator_cpu:.1f} CPU-s; load {load()}]", flush=True)  # fmt: skip
        delete_namespace(api, dock_ns)

    cpu = control_plane_cpu(cluster)
    plain_ns = namespace(api, "bench-plain")
    plain_2 = run_plain(api, plain_ns, names)
    plain_2_cpu = control_plane_cpu(cluster) - cpu
    delete_namespace(api, plain_ns)
    print(
        f"plain Deployments (2nd): {plain_2:.1f}s  [control plane {plain_2_cpu:.1f} CPU-s; load {load()}]", flush=True
    )

    baseline = (plain_1 + plain_2) / 2
    ratio = dockyard / baseline
    print(f"ratio (ModelDeployments / mean of plain runs) = {dockyard:.1f} / {baseline:.1f} = {ratio:.2f} "
          f"(target <= 1.30: {'met' if ratio <= 1.3 else 'NOT met'})")  # fmt: skip
    plain_cpu = (plain_1_cpu + plain_2_cpu) / 2
    print(f"CPU seconds (control plane, + operator) = {dockyard_cpu + operator_cpu:.1f} / {plain_cpu:.1f} = "
          f"{(dockyard_cpu + operator_cpu) / plain_cpu:.2f} (informational)")  # fmt: skip


if __name__ == "__main__":
    main()
