"""Scale: 1,000 fake GPU nodes across the eight device types, 1,500 ModelDeployments of mixed types
and sizes. Checks, and prints with its inputs:

- every scheduled replica runs on a node of its deployment's device type (100% expected);
- no node's GPUs are oversubscribed (sum of GPU requests of its pods <= its allocatable GPUs);
- every ModelDeployment ends SUCCESS (its minReplicas replicas Ready) or FAILED with a reason and a
  message (those that cannot fit: the pools hold fewer replicas than requested);
- the time until every ModelDeployment that fits is SUCCESS, apart from the time until the others are
  FAILED (those wait out the unschedulable deadline): target <= 120 s for the fitting ones. Times are
  when the bench's watch sees each job end, from the first create;
- the operator's peak memory (VmHWM) and, with ``--tracemalloc``, its top allocators at the highest
  traced moment (tracemalloc slows the operator: the times of such a run are not comparable).

    .venv/bin/python -m bench.scale [--nodes 1000] [--deployments 1500] [--tracemalloc]
"""

from __future__ import annotations

import argparse
import random
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kubernetes import client

from bench.common import (
    api_for,
    bench_cluster,
    load,
    namespace,
    operator_process,
    peak_rss_mib,
    watch_until_all,
)
from dockyard_core.devices import BUILT_IN as DEVICES
from dockyard_core.devices import DEVICE_TYPES, GPU_RESOURCE, INSTANCE_TYPE_LABEL
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import DOCK_STATUS_ID_LABEL, VERSION
from dockyard_operator.builders.common import MODEL_DEPLOYMENT_LABEL

UNSCHEDULABLE_DEADLINE = 60


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--deployments", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--tracemalloc", action="store_true", help="profile the operator's memory (slower)")
    args = parser.parse_args()
    per_type = args.nodes // len(DEVICE_TYPES)
    cluster = bench_cluster("bench-scale", nodes_per_type=per_type)
    api = api_for(cluster)
    rng = random.Random(args.seed)
    plan = [(f"m{i}", rng.choice(DEVICE_TYPES), rng.choice((1, 1, 1, 2, 3))) for i in range(args.deployments)]
    wanted: Counter[str] = Counter()
    for _, device_type, replicas in plan:
        wanted[device_type] += replicas
    nodes_total = per_type * len(DEVICE_TYPES)
    print(f"inputs: {nodes_total} GPU nodes ({per_type} per type), {len(plan)} ModelDeployments, minReplicas 1-3 "
          f"(seed {args.seed}), {sum(wanted.values())} replicas requested for {nodes_total} nodes; "
          f"unschedulable deadline {UNSCHEDULABLE_DEADLINE}s", flush=True)  # fmt: skip

    env = {"DOCKYARD_OPERATOR_UNSCHEDULABLE_DEADLINE_SECONDS": str(UNSCHEDULABLE_DEADLINE)}
    profile = cluster.settings.state_dir / "operator-tracemalloc.txt"
    if args.tracemalloc:
        profile.unlink(missing_ok=True)
        env["DOCKYARD_OPERATOR_TRACEMALLOC"] = str(profile)
    with operator_process(cluster, env) as operator:
        ns = namespace(api, "bench-scale")
        objects = client.CustomObjectsApi(api)
        model = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Model", "metadata": {"name": "model"},
                 "spec": {"source": {"hub": {"id": "meta-llama/Llama-3.1-8B-Instruct"}}}}  # fmt: skip
        objects.create_namespaced_custom_object(GROUP, VERSION, ns, "models", model)

        mdeps = (GROUP, VERSION, ns, "modeldeployments")

        def create(entry: tuple[str, str, int]) -> None:
            name, device_type, replicas = entry
            body: dict[str, Any] = {
                "apiVersion": f"{GROUP}/{VERSION}", "kind": "ModelDeployment",
                "metadata": {"name": name, "labels": {DOCK_STATUS_ID_LABEL: f"job-{name}"}},  # as the facade does
                "spec": {"modelRef": "model", "modelType": "openSource", "name": name, "deviceType": device_type,
                         "scalingParameters": {"minReplicas": replicas}},
            }  # fmt: skip
            objects.create_namespaced_custom_object(*mdeps, body)

        since = str(objects.list_namespaced_custom_object(*mdeps)["metadata"]["resourceVersion"])
        start = time.monotonic()
        ended: dict[str, tuple[str, float]] = {}
        """Per ModelDeployment, how its job ended and when the watch saw it (seconds from the first create)."""
        shown = [start]

        def settled(mdep: dict[str, Any]) -> bool:
            status = ((mdep.get("status") or {}).get("job") or {}).get("status")
            now = time.monotonic()
            if status in ("SUCCESS", "FAILED") and mdep["metadata"]["name"] not in ended:
                ended[mdep["metadata"]["name"]] = (status, now - start)
            if now - shown[0] >= 15:
                shown[0] = now
                print(f"  {now - start:6.0f}s: {len(ended)}/{len(plan)} settled; load {load()}", flush=True)
            return status in ("SUCCESS", "FAILED")

        with ThreadPoolExecutor(1) as watcher:  # watching while the creates go on: each end is seen when it comes
            watched = watcher.submit(
                watch_until_all, objects.list_namespaced_custom_object, *mdeps, names={n for n, _, _ in plan},
                ready=settled, since=since, timeout=1800, what="every ModelDeployment SUCCESS or FAILED",
            )  # fmt: skip
            with ThreadPoolExecutor(16) as pool:
                list(pool.map(create, plan))
            print(f"created {len(plan)} ModelDeployments in {time.monotonic() - start:.1f}s", flush=True)
            watched.result()
        elapsed = time.monotonic() - start
        peak = peak_rss_mib(operator.pid)

    items = objects.list_namespaced_custom_object(*mdeps)["items"]
    final = {i["metadata"]["name"]: (i.get("status") or {}).get("job") or {} for i in items}
    core = client.CoreV1Api(api)
    nodes = {n.metadata.name: n for n in core.list_node(label_selector=INSTANCE_TYPE_LABEL).items}
    pods = core.list_namespaced_pod(ns, label_selector=MODEL_DEPLOYMENT_LABEL).items
    device_of = {name: device_type for name, device_type, _ in plan}
    placed = [p for p in pods if p.spec.node_name]
    right_type = sum(
        1 for p in placed
        if nodes[p.spec.node_name].metadata.labels[INSTANCE_TYPE_LABEL]
        == device_of[p.metadata.labels[MODEL_DEPLOYMENT_LABEL]]
    )  # fmt: skip
    used: Counter[str] = Counter()
    for pod in placed:
        used[pod.spec.node_name] += int(pod.spec.containers[0].resources.requests[GPU_RESOURCE])
    oversubscribed = [n for n, gpus in used.items() if gpus > int(nodes[n].status.allocatable[GPU_RESOURCE])]
    statuses = Counter(j.get("status") for j in final.values())
    reasons = Counter(j.get("reason") for j in final.values() if j.get("status") == "FAILED")
    unexplained = [
        n for n, j in final.items() if j.get("status") == "FAILED" and not (j.get("reason") and j.get("message"))
    ]
    gpus_total = sum(DEVICES[t].gpus * per_type for t in DEVICE_TYPES)
    print(f"settled in {elapsed:.0f}s: {dict(statuses)}; FAILED reasons {dict(reasons)}; load {load()}")
    succeeded = [t for status, t in ended.values() if status == "SUCCESS"]
    failed = [t for status, t in ended.values() if status == "FAILED"]
    if succeeded:
        print(f"every ModelDeployment that fits SUCCESS: {max(succeeded):.0f}s after the first create "
              f"({len(succeeded)} of them; median {sorted(succeeded)[len(succeeded) // 2]:.0f}s; target <= 120 s: "
              f"{'met' if max(succeeded) <= 120 else 'NOT met'})")  # fmt: skip
    if failed:
        print(f"every other FAILED: {max(failed):.0f}s ({len(failed)} of them, first at {min(failed):.0f}s; "
              f"unschedulable deadline {UNSCHEDULABLE_DEADLINE}s)")  # fmt: skip
    share = 100 * right_type / max(1, len(placed))
    print(f"placement: {right_type}/{len(placed)} scheduled replicas on their requested device type ({share:.1f}%), "
          f"{len(pods) - len(placed)} replicas unscheduled")  # fmt: skip
    print(f"GPUs: {sum(used.values())}/{gpus_total} allocated, {len(oversubscribed)} nodes oversubscribed")
    print(f"FAILED without reason and message: {len(unexplained)}")
    print(f"operator peak memory (VmHWM): {peak:.0f} MiB (target < 300)")
    if args.tracemalloc:
        print(profile.read_text() if profile.is_file() else "no tracemalloc report (did the operator exit cleanly?)")
    # 1,000 simulated nodes keep the control plane busy even idle: leave no load for the next benchmark
    cluster.down()


if __name__ == "__main__":
    main()
