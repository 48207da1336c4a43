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

Counts do not move at all: each phase prints the API server's own request counts
(``apiserver_request_total``, read from its /metrics before and after the phase) by resource and verb.
The operator's own writes are the server-side applies (verb APPLY) and patches (PATCH) of the
resources it manages: nothing else writes those with those verbs (the by-hand phases, with no
operator running, print that figure too: 0 is the check of the attribution). Requests that follow the
clock rather than the workload (node leases and node status of the simulated nodes) are counted
apart. The operator's CPU-seconds per rollout are its process's user + system time (/proc), not
wall time.

    .venv/bin/python -m bench.operator_overhead [--count 200 --ready-delay-ms 30000]  (the figure of record's defaults)
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from bench.common import (
    WRITE_VERBS,
    ApiServerWork,
    RequestKey,
    api_for,
    bench_cluster,
    control_plane_cpu_by_process,
    cpu_seconds,
    delete_namespace,
    format_counts,
    format_cpu,
    format_work,
    load,
    namespace,
    operator_process,
    operator_reconcile_causes,
    operator_reconciles,
    wait_until,
    watch_until_all,
)
from dockyard_core.devices import DEVICE_TYPES
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import DOCK_STATUS_ID_LABEL, VERSION, Model, ModelDeployment
from dockyard_localcluster.cluster import LocalCluster
from dockyard_operator.builders.model import ModelWorkload, model_workload, resolve_served_model
from dockyard_operator.runtimes import DEFAULT_CATALOG, select_runtime

OPERATOR_RESOURCES = frozenset(
    {"modeldeployments", "modeldeployments/status", "deployments", "services", "configmaps", "secrets"}
)
"""What the operator writes for a ModelDeployment (besides Events), always with APPLY or PATCH."""
CLOCK_DRIVEN = frozenset({"leases", "nodes", "nodes/status"})
"""Requests that follow the time a phase takes, not its workload (the simulated nodes' heartbeats)."""


def operator_writes(counts: Counter[RequestKey]) -> int:
    return sum(n for (res, verb), n in counts.items() if res in OPERATOR_RESOURCES and verb in ("APPLY", "PATCH"))


def workload_requests(counts: Counter[RequestKey]) -> int:
    """All requests of a phase less the clock-driven ones."""
    return sum(n for (resource, _), n in counts.items() if resource not in CLOCK_DRIVEN)


def print_counts(counts: Counter[RequestKey], n: int) -> None:
    writes = sum(v for (_, verb), v in counts.items() if verb in WRITE_VERBS)
    clock = sum(v for (resource, _), v in counts.items() if resource in CLOCK_DRIVEN)
    print(f"  API requests: {sum(counts.values())} in all, {workload_requests(counts)} less clock-driven "
          f"({clock} leases/nodes), {writes} writes; operator's writes (APPLY/PATCH of its resources) "
          f"{operator_writes(counts)} = {operator_writes(counts) / n:.2f} per object", flush=True)  # fmt: skip
    print("\n".join(format_counts(counts, [k for k in counts if k[0] not in CLOCK_DRIVEN])), flush=True)


def mdep_body(name: str, device_type: str, labelled: bool = True) -> dict[str, Any]:
    """``labelled``: with the dock-status-id label, as the facade creates it (a deploy call is one
    create); without, as ``kubectl create`` does (the operator then labels the job it starts)."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ModelDeployment",
        "metadata": {"name": name, "labels": {DOCK_STATUS_ID_LABEL: f"job-{name}"} if labelled else {}},
        "spec": {"modelRef": "model", "modelType": "openSource", "name": name, "deviceType": device_type},
    }


def workload(ns: str, name: str, device_type: str) -> ModelWorkload:
    """Exactly the objects the operator would create for that ModelDeployment (less owner references)."""
    mdep = ModelDeployment.model_validate({**mdep_body(name, device_type), "metadata": {"name": name, "namespace": ns}})
    model = Model.model_validate({"apiVersion": f"{GROUP}/{VERSION}", "kind": "Model", "metadata": {"name": "model"},
                                  "spec": {"source": {"hub": {"id": "meta-llama/Llama-3.1-8B-Instruct"}}},
                                  "status": {"phase": "ReadyToDeploy"}})  # fmt: skip
    runtime_name, runtime = select_runtime(mdep.spec, DEFAULT_CATALOG)
    served = resolve_served_model("model", model, None)
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
    cpu, before = control_plane_cpu_by_process(cluster), ApiServerWork.read(api)
    took = run_plain(api, ns, names, by_hand=by_hand)
    work = ApiServerWork.read(api).since(before)
    cpu_after = control_plane_cpu_by_process(cluster)
    phase = Phase(took, sum(cpu_after.values()) - sum(cpu.values()), work.requests, cpu_after - cpu, work)
    delete_namespace(api, ns)
    what = "Deployments + Services (by hand)" if by_hand else "Deployments"
    print(f"plain {what}: {took:.1f}s  [control plane {phase.cpu:.1f} CPU-s; load {load()}]", flush=True)
    print(f"  CPU-s by process: {format_cpu(cpu, cpu_after)}", flush=True)
    print_counts(work.requests, len(names))
    print("  what the API server spent, by resource:\n" + "\n".join(format_work(work)), flush=True)
    return phase


@dataclass(frozen=True)
class Phase:
    seconds: float
    cpu: float
    """CPU seconds of the control plane (and the operator, where one runs)."""
    counts: Counter[RequestKey]
    """The API server's requests during the phase, by (resource, verb)."""
    by_process: Counter[str]
    """The control plane's CPU seconds by process (without the operator)."""
    work: ApiServerWork
    """What the API server spent by resource during the phase (its own metrics)."""


def mean(phases: list[Phase]) -> Phase:
    counts: Counter[RequestKey] = Counter()
    by_process: Counter[str] = Counter()
    for p in phases:
        counts.update(p.counts)
        by_process.update(p.by_process)
    n = len(phases)

    def avg(get: Callable[[ApiServerWork], dict[Any, float]]) -> dict[Any, float]:
        keys = {k for p in phases for k in get(p.work)}
        return {k: sum(get(p.work).get(k, 0.0) for p in phases) / n for k in keys}

    counts = Counter({k: round(v / n) for k, v in counts.items()})
    work = ApiServerWork(counts, avg(lambda w: w.seconds), avg(lambda w: w.response_bytes),
                         avg(lambda w: w.watch_events), avg(lambda w: w.watch_bytes))  # fmt: skip
    return Phase(sum(p.seconds for p in phases) / n, sum(p.cpu for p in phases) / n, counts,
                 Counter({k: v / n for k, v in by_process.items()}), work)  # fmt: skip


def print_breakdown(dockyard: Phase, hand: Phase, operator_cpu: float, idle: float) -> None:
    """Where the ModelDeployments' extra CPU went against the same objects by hand: by process, the share
    of each phase's duration at the control plane's idle rate (``idle`` CPU-s per second: the simulated
    nodes' heartbeats, controllers' resyncs), and what the API server spent by resource on each side."""
    names = sorted(set(dockyard.by_process) | set(hand.by_process), key=lambda p: -dockyard.by_process.get(p, 0))
    print("breakdown of the CPU-s ratio, ModelDeployments vs by hand (mean of the two by-hand runs):")
    pairs = [f"{p} {dockyard.by_process.get(p, 0):.1f} vs {hand.by_process.get(p, 0):.1f}" for p in names]
    print(f"  CPU-s by process: {', '.join(pairs)}, operator {operator_cpu:.1f} vs 0")
    print(f"  at the control plane's idle rate ({idle:.3f} CPU-s/s) the phases' durations "
          f"({dockyard.seconds:.1f} vs {hand.seconds:.1f} s) account for {idle * dockyard.seconds:.1f} vs "
          f"{idle * hand.seconds:.1f} CPU-s")  # fmt: skip
    mine, theirs = dockyard.work.by_resource(), hand.work.by_resource()
    print(f"    {'resource':<28} {'requests':>15} {'request s':>13} {'watch events':>15} {'event MB':>13}")
    rows = sorted(set(mine) | set(theirs), key=lambda r: -((mine.get(r) or (0, 0, 0, 0, 0))[1]
                                                            + (mine.get(r) or (0, 0, 0, 0, 0))[4]))  # fmt: skip
    zero = (0, 0.0, 0.0, 0.0, 0.0)
    for r in rows:
        a, b = mine.get(r, zero), theirs.get(r, zero)
        if not (a[0] or b[0] or a[3] > 10 or b[3] > 10):
            continue  # a watch's bookmarks only
        print(f"    {r:<28} {a[0]:>6} vs {b[0]:>6} {a[1]:>5.1f} vs {b[1]:>5.1f} {a[3]:>6.0f} vs {b[3]:>6.0f} "
              f"{a[4]:>5.1f} vs {b[4]:>5.1f}")  # fmt: skip


def run_dockyard(
    api: client.ApiClient, ns: str, names: list[tuple[str, str]], started: Callable[[], None], labelled: bool = True
) -> float:
    """``started`` is called once the Model is ready, right before the ModelDeployments are created."""
    objects = client.CustomObjectsApi(api)
    model = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "Model", "metadata": {"name": "model"},
             "spec": {"source": {"hub": {"id": "meta-llama/Llama-3.1-8B-Instruct"}}}}  # fmt: skip
    objects.create_namespaced_custom_object(GROUP, VERSION, ns, "models", model)
    wait_until(lambda: objects.get_namespaced_custom_object(GROUP, VERSION, ns, "models", "model")
               .get("status", {}).get("phase") == "ReadyToDeploy", 60, "model ReadyToDeploy")  # fmt: skip
    mdeps = (GROUP, VERSION, ns, "modeldeployments")
    since = _version(objects.list_namespaced_custom_object, *mdeps)
    started()
    start = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda nt: objects.create_namespaced_custom_object(*mdeps, mdep_body(*nt, labelled)), names))
    watch_until_all(objects.list_namespaced_custom_object, *mdeps, names={n for n, _ in names}, since=since,
                    ready=lambda m: ((m.get("status") or {}).get("job") or {}).get("status") == "SUCCESS",
                    timeout=900, what="ModelDeployments SUCCESS")  # fmt: skip
    return time.monotonic() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=200, help="ModelDeployments (and plain Deployments)")
    parser.add_argument(
        "--unlabelled", action="store_true", help="ModelDeployments as kubectl creates them (no dock-status-id label)"
    )
    parser.add_argument("--keep", action="store_true", help="leave the benchmark's control plane running")
    parser.add_argument("--idle-seconds", type=float, default=20.0, help="the control plane's idle CPU measured first")
    parser.add_argument(
        "--ready-delay-ms",
        type=int,
        default=30000,
        help="simulated pods turn Ready this long after they start (kwok's pod-ready stage): a slow rollout; "
        "30 s is the figure of record's setting, 0 the fastest rollout",
    )
    args = parser.parse_args()
    per_type = -(-args.count // len(DEVICE_TYPES)) + 1  # every replica takes a whole GPU node
    cluster = bench_cluster("bench-overhead", nodes_per_type=per_type, pod_ready_delay_ms=args.ready_delay_ms)
    api = api_for(cluster)
    names = [(f"m{i}", DEVICE_TYPES[i % len(DEVICE_TYPES)]) for i in range(args.count)]
    nodes = per_type * len(DEVICE_TYPES)
    print(f"inputs: N={args.count} (1 replica each, device types round-robin), {nodes} fake GPU nodes, "
          f"pods Ready {args.ready_delay_ms} ms after they start, local control plane (kwok)", flush=True)  # fmt: skip

    before = control_plane_cpu_by_process(cluster)
    time.sleep(args.idle_seconds)
    after = control_plane_cpu_by_process(cluster)
    idle = (sum(after.values()) - sum(before.values())) / args.idle_seconds
    print(f"control plane at idle for {args.idle_seconds:g} s: {idle:.3f} CPU-s per second "
          f"({format_cpu(before, after)}; load {load()})", flush=True)  # fmt: skip
    plain = [plain_phase(api, cluster, names, by_hand=False)]
    by_hand = [plain_phase(api, cluster, names, by_hand=True)]
    with operator_process(cluster) as operator:
        dock_ns = namespace(api, "bench-dockyard")
        readings: dict[str, Any] = {}

        def started() -> None:
            readings.update(cpu=control_plane_cpu_by_process(cluster), operator=cpu_seconds(operator.pid),
                            work=ApiServerWork.read(api), reconciles=operator_reconciles(operator.pid),
                            causes=operator_reconcile_causes(operator.pid))  # fmt: skip

        took = run_dockyard(api, dock_ns, names, started, not args.unlabelled)
        cpu_after = control_plane_cpu_by_process(cluster)
        dockyard_cpu = sum(cpu_after.values()) - sum(readings["cpu"].values())
        operator_cpu = cpu_seconds(operator.pid) - readings["operator"]
        work = ApiServerWork.read(api).since(readings["work"])
        counts = work.requests
        print(f"ModelDeployments via the operator: {took:.1f}s  [control plane {dockyard_cpu:.1f} CPU-s, "
              f"operator {operator_cpu:.1f} CPU-s = {1000 * operator_cpu / args.count:.1f} ms per rollout "
              f"(target <= 10); load {load()}]", flush=True)  # fmt: skip
        reconciles_total = operator_reconciles(operator.pid) - readings["reconciles"]
        print(
            f"  CPU-s by process: {format_cpu(readings['cpu'], cpu_after)}, operator {operator_cpu:.1f}; "
            f"the operator's reconciles: {reconciles_total:.0f} = {reconciles_total / args.count:.2f} per rollout",
            flush=True,
        )
        causes = operator_reconcile_causes(operator.pid)
        by_cause = sorted(((c, n - readings["causes"].get(c, 0.0)) for c, n in causes.items()), key=lambda x: -x[1])
        print("  the ModelDeployment reconciles per rollout by what queued them: "
              + ", ".join(f"{cause} {n / args.count:.2f}" for cause, n in by_cause if n), flush=True)  # fmt: skip
        print_counts(counts, args.count)
        print("  what the API server spent, by resource:\n" + "\n".join(format_work(work)), flush=True)
        delete_namespace(api, dock_ns)
    dockyard = Phase(took, dockyard_cpu + operator_cpu, counts, cpu_after - readings["cpu"], work)
    by_hand.append(plain_phase(api, cluster, names, by_hand=True))
    plain.append(plain_phase(api, cluster, names, by_hand=False))

    baseline, hand = mean(plain), mean(by_hand)
    ratio = dockyard.seconds / baseline.seconds
    print(f"ratio (ModelDeployments / mean of plain Deployment runs) = {dockyard.seconds:.1f} / "
          f"{baseline.seconds:.1f} = {ratio:.2f} (informational)")  # fmt: skip
    print(f"CPU seconds (control plane, + operator) = {dockyard.cpu:.1f} / {baseline.cpu:.1f} = "
          f"{dockyard.cpu / baseline.cpu:.2f} (informational)")  # fmt: skip
    print(f"Dockyard's own share, against the same Services and Deployments created by hand: "
          f"{dockyard.seconds:.1f} / {hand.seconds:.1f} = {dockyard.seconds / hand.seconds:.2f}; CPU seconds "
          f"{dockyard.cpu:.1f} / {hand.cpu:.1f} = {dockyard.cpu / hand.cpu:.2f} (informational)")  # fmt: skip
    print_breakdown(dockyard, hand, operator_cpu, idle)
    per_rollout = operator_writes(dockyard.counts) / args.count
    requests = workload_requests(dockyard.counts) / workload_requests(hand.counts)
    reconciles = reconciles_total / args.count
    cpu_ms = 1000 * operator_cpu / args.count
    cpu_ratio = dockyard.cpu / hand.cpu
    print(f"counts (exact): requests less clock-driven, ModelDeployments / by hand = "
          f"{workload_requests(dockyard.counts)} / {workload_requests(hand.counts)} = {requests:.2f}")  # fmt: skip

    def met(ok: bool) -> str:
        return "met" if ok else "NOT met"

    print(f"summary (pods Ready {args.ready_delay_ms} ms after they start): operator writes per rollout "
          f"{per_rollout:.2f} (<= 3: {met(per_rollout <= 3)}), reconciles per rollout {reconciles:.2f} (<= 3.5: "
          f"{met(reconciles <= 3.5)}), operator CPU per rollout {cpu_ms:.1f} ms (<= 10: {met(cpu_ms <= 10)}), "
          f"CPU-s (control plane + operator) / by hand {cpu_ratio:.2f} (<= 1.2, the figure of record: "
          f"{met(cpu_ratio <= 1.2)}); wall time / plain {ratio:.2f}, / by hand {dockyard.seconds / hand.seconds:.2f} "
          "(informational)")  # fmt: skip
    if not args.keep:
        cluster.down()


if __name__ == "__main__":
    main()
