"""Model-deploy calls through the facade vs creating the same ModelDeployments directly.

One local control plane of its own, one run, the paths side by side and alternated in rounds (so a
load change on the shared machine hits all of them):

- ``direct``: the Kubernetes Python client (``CustomObjectsApi.create_namespaced_custom_object``) from
  a pool of ``concurrency`` threads, creating the exact object the facade creates;
- ``facade``: ``POST /e/<ns>/<env>/api/public/models/<modelId>/deploy?modelType=openSource`` with
  SPEC.md's sample body (a new ``name`` per call) from ``concurrency`` concurrent asyncio clients (aiohttp), to
  the facade running as its own process (``python -m dockyard_api``, one uvicorn process);
- ``direct-async``: the same create as ``direct``, sent with the same async HTTP client as the facade
  path (a reference that shows what the Python Kubernetes client itself costs).

Each call creates a new ModelDeployment (the facade: auth from its key cache, the Model from its
watch-fed cache, one create). No operator runs, so nothing but the calls loads the API server.
Targets: facade requests/s >= 0.85 x direct, facade p99 <= 1.5 x direct p99 (the API server's own
cost is the reference: on a small shared machine it queues the creates whoever sends them).

    .venv/bin/python -m bench.deploy_calls [--calls 1000 --concurrency 32 --rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import aiohttp
from kubernetes import client
from tests.support.runners import free_port, wait_http_ok

from bench.common import (
    api_for,
    bench_cluster,
    count_diff,
    cpu_seconds,
    format_counts,
    namespace,
    request_counts,
)
from dockyard_api.public.deploy.service import REQUESTED_BY_ANNOTATION
from dockyard_api.public.schemas import MODEL_DEPLOY_SAMPLE
from dockyard_core import apikeys, kubepaths, requestid
from dockyard_core.kubeclient import AsyncKube, KubeError
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import API_VERSION, DOCK_STATUS_ID_LABEL, VERSION
from dockyard_localcluster.cluster import LocalCluster

MODEL = "llama-3-8b-instruct"


@dataclass
class Result:
    path: str
    round: int
    calls: int
    seconds: float
    latencies_ms: list[float]
    errors: int

    @property
    def rps(self) -> float:
        return self.calls / self.seconds


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def manifest(name: str, owner: dict[str, Any]) -> dict[str, Any]:
    """The object the facade creates for SPEC's sample body named ``name``: the same labels, annotations
    (requested-by, request id) and owner (the key's Environment)."""
    body = copy.deepcopy(MODEL_DEPLOY_SAMPLE)
    body.pop("name")
    return {
        "apiVersion": API_VERSION,
        "kind": "ModelDeployment",
        "metadata": {
            "name": name,
            "labels": {DOCK_STATUS_ID_LABEL: f"job-{name}"},
            "annotations": {
                REQUESTED_BY_ANNOTATION: "dky_benchmark0000 (environment bench-production)",
                requestid.REQUEST_ID_ANNOTATION: requestid.new_id(),
            },
            "ownerReferences": [owner],
        },
        "spec": {"modelRef": MODEL, "modelType": "openSource", "name": name, **body},
    }


def setup(api: client.ApiClient, ns: str) -> tuple[str, dict[str, Any]]:
    """A ReadyToDeploy hub Model, an App, an Environment and an API key in ``ns``; returns the key and the
    owner reference the facade puts on what it creates with that key (the Environment)."""
    objects = client.CustomObjectsApi(api)

    def create(plural: str, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}
        created: dict[str, Any] = objects.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)
        return created

    create("models", "Model", MODEL, {"modelType": "openSource", "source": {"hub": {"id": "meta-llama/x"}}})
    # no operator runs here: write what it writes for a hub model
    objects.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, "models", MODEL, {"status": {"phase": "ReadyToDeploy"}}
    )
    create("apps", "App", "bench", {})
    env = create("environments", "Environment", "bench-production", {"appRef": "bench"})
    key = apikeys.generate()
    secret = apikeys.key_secret(
        key=key, name="bench", environment=env, created_by="bench", created_at=datetime.now(UTC)
    )
    client.CoreV1Api(api).create_namespaced_secret(ns, secret)
    owner = {"apiVersion": API_VERSION, "kind": "Environment", "name": env["metadata"]["name"],
             "uid": env["metadata"]["uid"], "blockOwnerDeletion": False}  # fmt: skip
    return key.value, owner


@contextmanager
def facade_process(cluster: LocalCluster, cprofile: str | None = None) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The facade as its own process; with ``cprofile``, under cProfile (written there when it stops)."""
    port = free_port()
    env = dict(os.environ, KUBECONFIG=str(cluster.settings.kubeconfig), DOCKYARD_API_HOST="127.0.0.1",
               DOCKYARD_API_PORT=str(port))  # fmt: skip
    log = (cluster.settings.state_dir / "facade.log").open("ab")
    profiler = ["-m", "cProfile", "-o", cprofile] if cprofile else []
    command = [sys.executable, *profiler, "-m", "dockyard_api"]
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/readyz", timeout=60)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        # uvicorn re-raises the signal it stopped for: SIGINT ends cProfile's run with its file written
        proc.send_signal(signal.SIGINT if cprofile else signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def run_direct(
    api: client.ApiClient, ns: str, owner: dict[str, Any], names: list[str], concurrency: int
) -> tuple[float, list[float], int]:
    objects = client.CustomObjectsApi(api)
    latencies: list[float] = []
    errors = 0

    def one(name: str) -> None:
        nonlocal errors
        started = time.perf_counter()
        try:
            objects.create_namespaced_custom_object(GROUP, VERSION, ns, "modeldeployments", manifest(name, owner))
        except client.ApiException:
            errors += 1
        latencies.append((time.perf_counter() - started) * 1000)

    start = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        list(pool.map(one, names))
    return time.perf_counter() - start, latencies, errors


async def run_async(
    names: list[str], concurrency: int, send: Callable[[str], Awaitable[tuple[int, str]]]
) -> tuple[float, list[float], int]:
    """``concurrency`` asyncio workers calling ``send(name)`` (-> status, body) until ``names`` are used up."""
    latencies: list[float] = []
    errors = 0
    queue = list(reversed(names))

    async def worker() -> None:
        nonlocal errors
        while queue:
            name = queue.pop()
            started = time.perf_counter()
            status, text = await send(name)
            latencies.append((time.perf_counter() - started) * 1000)
            if status >= 300:
                errors += 1
                if errors <= 3:
                    print(f"    error {status}: {text[:200]}")

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return time.perf_counter() - start, latencies, errors


def run_facade(url: str, ns: str, key: str, names: list[str], concurrency: int) -> tuple[float, list[float], int]:
    """The load generator is aiohttp too: its per-request cost is small and flat (it shares the CPUs)."""
    path = f"{url}/e/{ns}/bench-production/api/public/models/{MODEL}/deploy"

    async def main() -> tuple[float, list[float], int]:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector, headers={"x-api-key": key}) as http:

            async def send(name: str) -> tuple[int, str]:
                body = {**MODEL_DEPLOY_SAMPLE, "name": name}
                async with http.post(path, params={"modelType": "openSource"}, json=body) as response:
                    return response.status, await response.text()

            return await run_async(names, concurrency, send)

    return asyncio.run(main())


def run_direct_async(
    cluster: LocalCluster, ns: str, owner: dict[str, Any], names: list[str], concurrency: int
) -> tuple[float, list[float], int]:
    async def main() -> tuple[float, list[float], int]:
        kube = AsyncKube(str(cluster.settings.kubeconfig), max_connections=concurrency)
        collection = kubepaths.collection("modeldeployments", ns)

        async def send(name: str) -> tuple[int, str]:
            try:
                await kube.request("POST", collection, json=manifest(name, owner))
            except KubeError as exc:
                return exc.status, exc.message
            return 201, ""

        try:
            return await run_async(names, concurrency, send)
        finally:
            await kube.aclose()

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=1000, help="deploy calls per path and round")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=100, help="calls per path before measuring")
    parser.add_argument("--sequential", type=int, default=200, help="calls per path at concurrency 1")
    parser.add_argument("--keep", action="store_true", help="leave the benchmark's control plane running")
    parser.add_argument("--cprofile", metavar="FILE", help="run the facade under cProfile, stats written to FILE")
    parser.add_argument("--py-spy", metavar="FILE", help="sample the facade with py-spy during the facade rounds "
                        "(speedscope JSON in FILE; py-spy must be installed in the venv)")  # fmt: skip
    args = parser.parse_args()

    print(f"inputs: calls={args.calls} per path and round, concurrency={args.concurrency}, rounds={args.rounds}, "
          f"warmup={args.warmup}, sequential={args.sequential}, cpus={os.cpu_count()}, "
          f"loadavg={os.getloadavg()}")  # fmt: skip
    cluster = bench_cluster("bench-deploy-calls", nodes_per_type=1)
    api = api_for(cluster)
    ns = namespace(api, "bench-deploy")
    key, owner = setup(api, ns)
    results: list[Result] = []
    sequential: dict[str, list[float]] = {}
    requests: dict[str, Counter[tuple[str, str]]] = {}
    plane_cpu_ms: dict[str, dict[str, list[float]]] = {}
    client_cpu_ms: dict[str, list[float]] = {}
    with facade_process(cluster, args.cprofile) as (url, proc):
        counter = iter(range(10**9))

        def names(count: int, prefix: str) -> list[str]:
            return [f"{prefix}-{next(counter)}" for _ in range(count)]

        def paths(concurrency: int) -> dict[str, Callable[[list[str]], tuple[float, list[float], int]]]:
            return {
                "direct": lambda n: run_direct(api, ns, owner, n, concurrency),
                "facade": lambda n: run_facade(url, ns, key, n, concurrency),
                "direct-async": lambda n: run_direct_async(cluster, ns, owner, n, concurrency),
            }

        for path, run in paths(args.concurrency).items():
            run(names(args.warmup, f"warm-{path}"))
        facade_cpu_ms: list[float] = []
        spy = _py_spy(proc.pid, args.py_spy) if args.py_spy else None
        for round_ in range(1, args.rounds + 1):
            for path, run in paths(args.concurrency).items():
                cpu_before = _cpu_seconds(proc.pid)
                plane_before = _plane_cpu(cluster)
                counts_before = request_counts(api)
                client_before = _own_cpu()
                seconds, latencies, errors = run(names(args.calls, path))
                client_cpu_ms.setdefault(path, []).append((_own_cpu() - client_before) * 1000 / args.calls)
                counted = count_diff(request_counts(api), counts_before)
                requests[path] = requests.get(path, Counter()) + counted
                for part, value in _plane_cpu(cluster).items():
                    plane_cpu_ms.setdefault(path, {}).setdefault(part, []).append(
                        (value - plane_before.get(part, 0.0)) * 1000 / args.calls
                    )
                if path == "facade":
                    facade_cpu_ms.append((_cpu_seconds(proc.pid) - cpu_before) * 1000 / args.calls)
                result = Result(path, round_, args.calls, seconds, latencies, errors)
                results.append(result)
                print(f"  round {round_} {path:13} {result.rps:7.1f} req/s  p50 {percentile(latencies, 50):6.1f} ms  "
                      f"p99 {percentile(latencies, 99):6.1f} ms  errors {errors}")  # fmt: skip
        if spy is not None:
            spy.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
            spy.wait(timeout=60)
        # one call at a time: the latency the facade adds to its API call, without queueing
        for path, run in paths(1).items():
            sequential[path] = run(names(args.sequential, f"seq-{path}"))[1]

    print(f"\nloadavg after: {os.getloadavg()}")
    print(f"facade CPU per call (its own process, by round): {', '.join(f'{v:.2f} ms' for v in facade_cpu_ms)}")
    calls = args.calls * args.rounds
    print("\nAPI-server requests per call (apiserver_request_total over the measured rounds):")
    for path, counted in requests.items():
        print(f"  {path}: {sum(counted.values()) / calls:.3f} per call")
        for line in format_counts(Counter({k: v for k, v in counted.items() if v >= calls // 100})):
            print(f"  {line}")
    print("load generator's CPU per call (this process, all threads; by round): " + "; ".join(
        f"{path} {'/'.join(f'{v:.2f}' for v in values)} ms" for path, values in client_cpu_ms.items()))  # fmt: skip
    print("control-plane CPU per call, ms (by round):")
    for path, parts in plane_cpu_ms.items():
        total = [sum(values) for values in zip(*parts.values(), strict=True)]
        shown = "  ".join(f"{part} {'/'.join(f'{v:.2f}' for v in values)}" for part, values in sorted(parts.items()))
        print(f"  {path:13} all {'/'.join(f'{v:.2f}' for v in total)}  {shown}")
    print(f"\nconcurrency {args.concurrency}:")
    print(f"{'path':13} {'req/s (median of rounds)':>26} {'p50 ms':>8} {'p99 ms':>8} {'errors':>7}")
    summary: dict[str, tuple[float, float, float]] = {}
    for path in paths(args.concurrency):
        mine = [r for r in results if r.path == path]
        latencies = [v for r in mine for v in r.latencies_ms]
        rps = statistics.median(r.rps for r in mine)
        summary[path] = (rps, percentile(latencies, 50), percentile(latencies, 99))
        print(f"{path:13} {rps:26.1f} {summary[path][1]:8.1f} {summary[path][2]:8.1f} {sum(r.errors for r in mine):7}")
    print(f"\nconcurrency 1 ({args.sequential} calls each):")
    for path, latencies in sequential.items():
        print(f"{path:13} p50 {percentile(latencies, 50):6.1f} ms  p99 {percentile(latencies, 99):6.1f} ms")
    ratio = summary["facade"][0] / summary["direct"][0]
    # each facade round against the direct round just before it: a load change on the shared machine
    # between rounds then moves both sides of a pair
    by_round = {(r.path, r.round): r.rps for r in results}
    paired = [by_round[("facade", n)] / by_round[("direct", n)] for n in range(1, args.rounds + 1)]
    print(f"\nfacade / direct (Kubernetes client) requests/s: {ratio:.2f} (target >= 0.85); "
          f"by round {', '.join(f'{v:.2f}' for v in paired)}, median {statistics.median(paired):.2f}")  # fmt: skip
    print(f"facade / direct-async requests/s: {summary['facade'][0] / summary['direct-async'][0]:.2f}")
    p99_ratio = summary["facade"][2] / summary["direct"][2]
    print(f"facade p99 at concurrency {args.concurrency}: {summary['facade'][2]:.1f} ms, direct p99 "
          f"{summary['direct'][2]:.1f} ms: {p99_ratio:.2f}x (target <= 1.5x)")  # fmt: skip
    print(f"summary (concurrency {args.concurrency}, {args.calls} calls x {args.rounds} rounds): facade / direct "
          f"requests/s {ratio:.2f} (>= 0.85: {'met' if ratio >= 0.85 else 'NOT met'}), p99 {p99_ratio:.2f}x direct "
          f"(<= 1.5: {'met' if p99_ratio <= 1.5 else 'NOT met'})")  # fmt: skip
    client.CoreV1Api(api).delete_namespace(ns)
    if not args.keep:
        cluster.down()


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _plane_cpu(cluster: LocalCluster) -> dict[str, float]:
    """CPU seconds used so far by each of the cluster's processes (kube-apiserver, etcd, ...), by program."""
    marker = str(cluster.settings.kwok_workdir)
    used: dict[str, float] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                argv = cmdline.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(marker in arg for arg in argv):
            program = os.path.basename(argv[0])
            used[program] = used.get(program, 0.0) + cpu_seconds(int(entry))
    return used


def _py_spy(pid: int, out: str) -> subprocess.Popen[bytes]:
    """py-spy sampling the facade (``--idle`` off: on-CPU time only) until it gets SIGINT."""
    spy = os.path.join(os.path.dirname(sys.executable), "py-spy")
    command = [spy, "record", "--pid", str(pid), "--format", "speedscope", "--output", out, "--rate", "250"]
    command += os.environ.get("DOCKYARD_BENCH_PY_SPY_ARGS", "").split()
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1)  # attached before the first round
    return proc


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


if __name__ == "__main__":
    main()
