"""Deployed-app calls through the facade vs the same chat completion sent straight to the model server.

One local control plane of its own, the operator and the facade as their own processes, and the
scripted OpenAI-compatible model server (``tests.support.scripted_model``) as a process of its own that
answers every chat completion after a fixed delay (``--delay-ms``: a fast model; real engines take
hundreds of milliseconds to seconds per answer). The facade runs in local endpoint mode; the benchmark
plays the local engine runner (it annotates the ModelDeployment's Ready pod with the server's address).

Paths, alternated in rounds so that a load change on the shared machine hits both:

- ``direct``: ``POST <model>/v1/chat/completions`` with the body the facade sends for this app (system
  instructions, the user message, the deployment's hyperParameters);
- ``facade``: ``POST /e/<ns>/<env>/v1/apps/bot/execute`` with a real API key, each call a NEW session
  (so the run creates ``rounds x calls`` sessions in the conversation database: a SQLite file by
  default, ``--database postgresql`` a PostgreSQL server started on loopback for the run): auth, the
  environment and app from the informers, the store's two transactions (start_turn with the rate
  limits, finish_turn with the usage), one model call.

Arrivals (``--arrivals``, both by default, each measured in every round): ``staggered`` spreads the
clients' first calls evenly over one model delay, so calls arrive as independent clients' do;
``lockstep`` starts all clients at once, and since the scripted server answers every call after the
same delay, they stay in step: every call then arrives in a burst of ``--concurrency`` calls within a
millisecond, and what the facade adds includes waiting behind the calls of its burst (half a burst's
CPU on average), which the direct path, one cheap hop, hardly shows.

With ``--guardrails`` a third path, ``guarded``, calls a second App of the same namespace whose draft
carries pattern policies (:data:`GUARDRAILS`: three policies, four regular expressions, on the input and
the output; docs/guardrails.md), through its own draft environment and key, alternated with the other two;
the p50 it adds to ``facade``'s (same run, same model, same store) is #28's target (<= 2 ms).

Printed: requests/s of both and their ratio (target >= 0.9), p50/p99 and the p50 the facade adds
(target <= 5 ms) at ``--concurrency`` and at concurrency 1, the facade's CPU per call, and its resident
memory after the warm-up, after each round and at the end (flat over the sessions created).

    .venv/bin/python -m bench.execute [--calls 2000 --rounds 5 --concurrency 32 --delay-ms 100 --database sqlite]
        [--arrivals staggered,lockstep] [--guardrails] [--tracing [--tracing-sink] [--tracing-aa] [--hook-timing]]
        [--profile FILE]

With ``--tracing`` two more facades with tracing on export their spans to a real Jaeger: paths ``traced`` and
``unsampled``, served at the same time by the two, swapped every segment (:mod:`bench.tracing`, #30's targets:
<= 1 ms added p50, <= 2 % CPU per turn).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from kubernetes import client
from tests.support.runners import free_port, wait_http_ok

from bench import tracing
from bench.common import api_for, bench_cluster, cpu_seconds, load, namespace, operator_process, wait_until
from dockyard_api.runtime.endpoints import LOCAL_ENDPOINT_ANNOTATION, MODEL_DEPLOYMENT_LABEL
from dockyard_core import apikeys
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import API_VERSION, VERSION
from dockyard_localcluster.cluster import LocalCluster

INSTRUCTIONS = "You are a helpful assistant. Answer briefly."
HYPER = {"temperature": 0.2, "maxTokens": 128, "topP": 0.9, "topK": 40}
MESSAGE = "What is the capital of Norway?"
GUARDRAILS = {
    "policies": [
        {"name": "cards", "type": "pattern", "patterns": [r"\b(?:\d[ -]?){13,19}\b"], "action": "redact"},
        {"name": "keys", "type": "pattern", "patterns": [r"sk-[A-Za-z0-9]{20,}", r"AKIA[0-9A-Z]{16}"]},
        {"name": "mails", "type": "pattern", "patterns": [r"[\w.+-]+@[\w-]+\.[\w.]+"], "action": "record"},
    ]
}
"""The ``guarded`` app's guardrails: pattern policies on the input and the output (the default stages)."""


@dataclass
class Result:
    path: str
    calls: int
    seconds: float
    latencies_ms: list[float]
    errors: int
    arrivals: str = "lockstep"

    @property
    def rps(self) -> float:
        return self.calls / self.seconds


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


@contextmanager
def model_process(
    delay_ms: float, module: Sequence[str] = ("tests.support.scripted_model", "--port", "0")
) -> Iterator[str]:
    """A scripted model server as a process of its own (``python -m`` ``module`` ``--delay-ms``), answering after
    ``delay_ms``; yields the URL it prints on its first line once its /health answers."""
    proc = subprocess.Popen([sys.executable, "-m", *module, "--delay-ms", str(delay_ms)], stdout=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().decode().strip()
        wait_http_ok(f"{url}/health", timeout=30)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


@contextmanager
def database_url(kind: str, cluster: LocalCluster) -> Iterator[str]:
    """The conversation store of the run: a new SQLite file (the embedded default) or a new database on a
    PostgreSQL server from the distribution's package, started on loopback for the run."""
    if kind == "sqlite":
        state = cluster.settings.state_dir
        for stale in state.glob("bench-execute.db*"):
            stale.unlink()
        yield f"sqlite+aiosqlite:///{state / 'bench-execute.db'}"
        return
    from tests.support.postgres import postgres_server

    with postgres_server() as pg:
        yield pg.url(asyncio.run(pg.create_database("bench")))


@contextmanager
def facade_process(
    cluster: LocalCluster, database: str, profile: str | None = None, extra: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    port = free_port()
    state = cluster.settings.state_dir
    env = dict(
        os.environ,
        KUBECONFIG=str(cluster.settings.kubeconfig),
        DOCKYARD_API_HOST="127.0.0.1",
        DOCKYARD_API_PORT=str(port),
        DOCKYARD_API_ENDPOINT_MODE="local",
        DOCKYARD_API_DATABASE_URL=database,
        DOCKYARD_API_MODEL_STORE=str(state / "model-store"),
        **(extra or {}),
    )
    log = (state / f"facade-{port}.log").open("ab")
    command = [sys.executable, "-m", *(["bench.profiled_facade", profile] if profile else ["dockyard_api"])]
    proc = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_http_ok(f"http://127.0.0.1:{port}/readyz", timeout=60)
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def setup(api: client.ApiClient, ns: str, model_url: str, guarded: bool = False) -> dict[str, str]:
    """A hub Model, its ModelDeployment (served by the scripted server), an App with one agent, its draft
    environment and an API key (and with ``guarded`` a second App with :data:`GUARDRAILS`); returns the key of
    each app."""
    objects = client.CustomObjectsApi(api)

    def create(plural: str, kind: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
        body = {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name}, "spec": spec}
        created: dict[str, Any] = objects.create_namespaced_custom_object(GROUP, VERSION, ns, plural, body)
        return created

    create("models", "Model", "tiny", {"modelType": "openSource", "source": {"hub": {"id": "bench/tiny"}}})
    create(
        "modeldeployments",
        "ModelDeployment",
        "tiny",
        {"modelRef": "tiny", "modelType": "openSource", "name": "tiny", "deviceType": "g5.xlarge",
         "hyperParameters": HYPER},
    )  # fmt: skip
    agent = {"name": "helper", "version": "1.0.0", "instructions": INSTRUCTIONS, "model": "tiny"}
    apps = {"bot": {"agents": [agent]}}
    if guarded:
        apps["guarded"] = {"agents": [agent], "guardrails": GUARDRAILS}
    for app, spec in apps.items():
        create("apps", "App", app, spec)
    core = client.CoreV1Api(api)

    def ready_pod() -> Any:
        for pod in core.list_namespaced_pod(ns, label_selector=f"{MODEL_DEPLOYMENT_LABEL}=tiny").items:
            if any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or []):
                return pod
        return None

    wait_until(ready_pod, 180, "a Ready pod of the ModelDeployment")
    pod = ready_pod()
    core.patch_namespaced_pod(
        pod.metadata.name, ns, {"metadata": {"annotations": {LOCAL_ENDPOINT_ANNOTATION: model_url}}}
    )

    def draft(app: str) -> Any:
        try:
            return objects.get_namespaced_custom_object(GROUP, VERSION, ns, "environments", f"{app}-draft")
        except client.ApiException:
            return None

    keys = {}
    for app in apps:
        wait_until(lambda app=app: draft(app), 60, f"the draft environment of {app}")
        key = apikeys.generate()
        secret = apikeys.key_secret(
            key=key, name="bench", environment=draft(app), created_by="bench", created_at=datetime.now(UTC)
        )
        core.create_namespaced_secret(ns, secret)
        keys[app] = key.value
    return keys


async def run_async(
    calls: int, concurrency: int, send: Callable[[], Awaitable[tuple[int, str]]], spread_s: float = 0.0
) -> Result:
    """``calls`` calls by ``concurrency`` clients, each sending its next call when its last one is answered.
    With ``spread_s`` the clients' first calls are spread evenly over that many seconds (staggered);
    with 0 they all start at once (lockstep)."""
    latencies: list[float] = []
    errors = 0
    left = calls

    async def worker(index: int) -> None:
        nonlocal errors, left
        await asyncio.sleep(spread_s * index / concurrency)
        while left > 0:
            left -= 1
            started = time.perf_counter()
            status, text = await send()
            latencies.append((time.perf_counter() - started) * 1000)
            if status >= 300:
                errors += 1
                if errors <= 3:
                    print(f"    error {status}: {text[:300]}")

    start = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(concurrency)))
    return Result("", calls, time.perf_counter() - start, latencies, errors)


def run_path(path: str, calls: int, concurrency: int, target: dict[str, str], spread_s: float = 0.0) -> Result:
    async def main() -> Result:
        connector = aiohttp.TCPConnector(limit=concurrency)
        async with aiohttp.ClientSession(connector=connector) as http:
            if path == "direct":
                url = f"{target['model']}/v1/chat/completions"
                body = orjson.dumps(
                    {
                        "model": "tiny",
                        "temperature": HYPER["temperature"],
                        "max_tokens": HYPER["maxTokens"],
                        "top_p": HYPER["topP"],
                        "top_k": HYPER["topK"],
                        "messages": [
                            {"role": "system", "content": INSTRUCTIONS},
                            {"role": "user", "content": MESSAGE},
                        ],
                    }
                )
                headers = {"Content-Type": "application/json"}
            else:
                url = target["execute" if path == "facade" else path]
                body = orjson.dumps({"message": MESSAGE, "metadata": {"user_id": "bench"}})
                key = target["key" if path in ("facade", *tracing.PATHS) else f"{path}_key"]
                headers = {"Content-Type": "application/json", "Authorization": f"Bearer {key}"}

            async def send() -> tuple[int, str]:
                sent = tracing.sampled(headers) if path == "traced" else headers  # a new trace per turn
                async with http.post(url, data=body, headers=sent) as response:
                    return response.status, await response.text()

            result = await run_async(calls, concurrency, send, spread_s)
            result.path = path
            return result

    return asyncio.run(main())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000, help="calls per path and round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--delay-ms", type=float, default=100.0, help="the model server's time per answer")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--sequential", type=int, default=200, help="calls per path at concurrency 1")
    parser.add_argument("--keep", action="store_true", help="leave the benchmark's control plane running")
    parser.add_argument(
        "--guardrails",
        action="store_true",
        help="also call an app with pattern guardrails on input and output (path 'guarded') and print the p50 "
        "they add to the facade's (#28's target: <= 2 ms)",
    )
    parser.add_argument(
        "--profile",
        metavar="FILE",
        help="run the facade under cProfile and write its profile to FILE (python -m pstats FILE); "
        "the latencies measured then include the profiler's cost",
    )
    parser.add_argument(
        "--arrivals",
        default="staggered,lockstep",
        help="how the concurrent clients start, one mode or several (comma-separated), each measured in every "
        "round: 'staggered' spreads the clients' first calls evenly over one model delay, so that their calls "
        "arrive as independent clients' do; 'lockstep' starts them all at once, and with a model server that "
        "answers every call after the same delay they stay in step: every call arrives in a burst of "
        "--concurrency calls within a millisecond, and the latency a call adds then includes waiting for "
        "the burst's calls ahead of it",
    )
    parser.add_argument("--tracing", action="store_true", help="also call a facade that traces (path 'traced')")
    parser.add_argument("--hook-timing", action="store_true",
                        help="with --tracing: time the traced facade's tracing hooks in place and print them per turn "
                        "(bench/hooktiming; each timed call costs a little itself)")  # fmt: skip
    parser.add_argument("--tracing-aa", action="store_true",
                        help="with --tracing: the traced path's traceparent marked not sampled, so both paths are the "
                        "same turns (diagnostic: the method's own bias and noise; an A/A test)")  # fmt: skip
    parser.add_argument("--tracing-sink", action="store_true",
                        help="with --tracing: export to a sink that keeps nothing instead of Jaeger (diagnostic: what "
                        "the backend on the same cores costs the facade)")  # fmt: skip
    parser.add_argument(
        "--database",
        choices=("sqlite", "postgresql"),
        default="sqlite",
        help="the conversation store: a SQLite file (default) or PostgreSQL (a local server started for the run)",
    )
    args = parser.parse_args()
    if args.tracing_aa:
        tracing.SAMPLED_FLAG = "00"
    modes = [m.strip() for m in args.arrivals.split(",") if m.strip()]
    if not modes or set(modes) - {"staggered", "lockstep"}:
        parser.error("--arrivals: staggered, lockstep or both (comma-separated)")
    spreads = {"staggered": args.delay_ms / 1000, "lockstep": 0.0}
    print(
        f"inputs: calls={args.calls} per path and round, rounds={args.rounds}, concurrency={args.concurrency}, "
        f"model delay={args.delay_ms:g} ms, warmup={args.warmup}, sequential={args.sequential}, "
        f"arrivals={','.join(modes)}, database={args.database}, guardrails={args.guardrails}, tracing={args.tracing}, "
        f"cpus={os.cpu_count()}, loadavg={load()}"
    )
    paths = ("direct", "facade", *(["guarded"] if args.guardrails else []), *(tracing.PATHS if args.tracing else []))
    cluster = bench_cluster("bench-execute", nodes_per_type=1)
    api = api_for(cluster)
    ns = namespace(api, "bench-execute")
    results: list[Result] = []
    timing = cluster.settings.state_dir / "hook-timing.json"
    timing.unlink(missing_ok=True)
    timing_env = tracing.hook_timing_env(timing) if args.hook_timing else None
    with (
        model_process(args.delay_ms) as model_url,
        database_url(args.database, cluster) as database,
        operator_process(cluster),
        facade_process(cluster, database, args.profile) as (url, proc),
        (tracing.sink() if args.tracing_sink else tracing.jaeger())
        if args.tracing
        else contextlib.nullcontext() as backend,
        tracing.facade(facade_process, cluster, database, backend, proc, timing_env) as (traced_url, traced_proc),
        tracing.facade(facade_process, cluster, database, backend, proc, name="traced-b") as (other_url, other_proc),
    ):
        keys = setup(api, ns, model_url, args.guardrails)

        def bot(base: str) -> str:
            return f"{base}/e/{ns}/bot-draft/v1/apps/bot/execute"

        target = {"model": model_url, "execute": bot(url), "key": keys["bot"]}
        if args.guardrails:
            target |= {"guarded": f"{url}/e/{ns}/guarded-draft/v1/apps/guarded/execute", "guarded_key": keys["guarded"]}
        traced_urls = (bot(traced_url), bot(other_url))
        for path in tracing.PATHS:
            target[path] = traced_urls[0]
        other = {**target, **dict.fromkeys(tracing.PATHS, traced_urls[1])}
        for path in paths[1:]:
            wait_until(lambda p=path: run_path(p, 1, 1, target).errors == 0, 30, f"the facade answering {path} calls")
        for path in paths:
            run_path(path, args.warmup, args.concurrency, target)
        if args.tracing:  # the second traced facade too
            wait_until(lambda: run_path("traced", 1, 1, other).errors == 0, 30, "the second traced facade answering")
            for path in tracing.PATHS:
                run_path(path, args.warmup, args.concurrency, other)
            tracing.warm_clients(run_path, target)
        memory = [("after warm-up", rss_mib(proc.pid))]
        backend_cpu = tracing.backend_cpu(backend)
        cpu_ms: dict[str, list[float]] = {mode: [] for mode in modes}
        guarded_cpu_ms: dict[str, list[float]] = {mode: [] for mode in modes}
        traced_cpu_ms: dict[str, list[float]] = {mode: [] for mode in modes}
        unsampled_cpu_ms: dict[str, list[float]] = {mode: [] for mode in modes}
        spent_by = {"facade": cpu_ms, "guarded": guarded_cpu_ms, "traced": traced_cpu_ms, "unsampled": unsampled_cpu_ms}
        segments: dict[str, dict[str, list[float]]] = {mode: {path: [] for path in tracing.PATHS} for mode in modes}
        segment_p50s: dict[str, dict[str, list[float]]] = {mode: {path: [] for path in tracing.PATHS} for mode in modes}
        for round_ in range(1, args.rounds + 1):
            # the facade paths in turn first and last (direct always first): a round's later calls meet a warmer
            # or a busier machine, which must not count for or against one path
            order = paths if round_ % 2 else (paths[0], *reversed(paths[1:]))
            for mode in modes:
                done: dict[str, tuple[Result, float, list[float], list[float]]] = {}
                for path in order:
                    if path in tracing.PATHS and path not in done:  # both at once, on two facades, swapped
                        done |= tracing.crossover(run_path, args.calls, args.concurrency, target, traced_urls,
                                                  spreads[mode], (traced_proc.pid, other_proc.pid))  # fmt: skip
                    if path in done:
                        result, spent, by_segment, p50s = done[path]
                        segments[mode][path] += by_segment
                        segment_p50s[mode][path] += p50s
                    else:
                        before = cpu_seconds(proc.pid)
                        result = run_path(path, args.calls, args.concurrency, target, spreads[mode])
                        spent = (cpu_seconds(proc.pid) - before) * 1000 / args.calls
                    result.arrivals = mode
                    if path != "direct":
                        spent_by[path][mode].append(spent)
                    results.append(result)
                    p50, p99 = percentile(result.latencies_ms, 50), percentile(result.latencies_ms, 99)
                    print(
                        f"  round {round_} {mode:9} {path:7} {result.rps:7.1f} req/s  p50 {p50:6.1f} ms  "
                        f"p99 {p99:6.1f} ms  errors {result.errors}"
                    )
            sessions = round_ * args.calls * len(modes) + args.warmup
            memory.append((f"after round {round_} ({sessions} sessions)", rss_mib(proc.pid)))
        sequential = {path: run_path(path, args.sequential, 1, target) for path in paths if path not in tracing.PATHS}
        sequential_p50s: dict[str, list[float]] = {}
        if args.tracing:  # the two at once too, swapped: p50s in pairs of segments
            single = tracing.crossover(run_path, args.sequential, 1, target, traced_urls, 0.0,
                                       (traced_proc.pid, other_proc.pid))  # fmt: skip
            sequential |= {path: single[path][0] for path in tracing.PATHS}
            sequential_p50s = {path: single[path][3] for path in tracing.PATHS}
        memory.append(("at the end", rss_mib(proc.pid)))
        if backend:
            tracing.summary(
                modes, results, sequential_p50s, (cpu_ms, unsampled_cpu_ms, traced_cpu_ms), segments, segment_p50s,
                backend,
                (traced_url, other_url),
                (tracing.backend_cpu(backend) - backend_cpu) * 1000 / (args.calls * args.rounds * len(modes)),
            )  # fmt: skip

    if args.hook_timing:
        tracing.print_hook_timing(timing)
    print(f"\nloadavg after: {load()}")
    for mode in modes:
        print(f"facade CPU per execute call (its own process), {mode} arrivals, by round: "
              f"{', '.join(f'{v:.2f} ms' for v in cpu_ms[mode])}")  # fmt: skip
    summary: dict[tuple[str, str], tuple[float, float, float]] = {}
    for mode in modes:
        print(f"\nconcurrency {args.concurrency}, {mode} arrivals:")
        for path in paths:
            mine = [r for r in results if r.path == path and r.arrivals == mode]
            latencies = [v for r in mine for v in r.latencies_ms]
            rps = statistics.median(r.rps for r in mine)
            summary[mode, path] = (rps, percentile(latencies, 50), percentile(latencies, 99))
            print(f"  {path:7} {rps:8.1f} req/s (median of rounds)  p50 {summary[mode, path][1]:6.1f} ms  "
                  f"p99 {summary[mode, path][2]:6.1f} ms  errors {sum(r.errors for r in mine)}")  # fmt: skip
    print(f"\nconcurrency 1 ({args.sequential} calls each):")
    for path, result in sequential.items():
        print(f"  {path:7} p50 {percentile(result.latencies_ms, 50):6.1f} ms  "
              f"p99 {percentile(result.latencies_ms, 99):6.1f} ms")  # fmt: skip
    added_1 = percentile(sequential["facade"].latencies_ms, 50) - percentile(sequential["direct"].latencies_ms, 50)
    print()
    for mode in modes:
        ratio = summary[mode, "facade"][0] / summary[mode, "direct"][0]
        added = summary[mode, "facade"][1] - summary[mode, "direct"][1]
        print(f"{mode:9} arrivals: throughput facade / direct {ratio:.2f} (target >= 0.9), added p50 {added:.1f} ms "
              f"at concurrency {args.concurrency} (target <= 5 ms)")  # fmt: skip
    print(f"added p50 at concurrency 1: {added_1:.1f} ms")
    print("facade resident memory:")
    for label, mib in memory:
        print(f"  {label:40} {mib:7.1f} MiB")
    for mode in modes:
        ratio = summary[mode, "facade"][0] / summary[mode, "direct"][0]
        added = summary[mode, "facade"][1] - summary[mode, "direct"][1]
        cpu = statistics.median(cpu_ms[mode])
        print(f"summary ({mode} arrivals, model delay {args.delay_ms} ms, concurrency {args.concurrency}, "
              f"{args.database}): throughput facade / direct {ratio:.2f} (>= 0.9: {met(ratio >= 0.9)}), added p50 "
              f"{added:.1f} ms (<= 5: {met(added <= 5)}), facade CPU per call {cpu:.2f} ms (<= 1.5: "
              f"{met(cpu <= 1.5)}); one core saturates at {1000 / cpu:.0f} turns per facade CPU-second")  # fmt: skip
    if args.guardrails:
        guarded_1 = percentile(sequential["guarded"].latencies_ms, 50) - percentile(
            sequential["facade"].latencies_ms, 50
        )
        for mode in modes:
            guarded = summary[mode, "guarded"][1] - summary[mode, "facade"][1]
            cpu_added = statistics.median(guarded_cpu_ms[mode]) - statistics.median(cpu_ms[mode])
            print(f"summary (guardrails on / off, {mode} arrivals, {len(GUARDRAILS['policies'])} pattern policies on "
                  f"input and output, model delay {args.delay_ms} ms): added p50 {guarded:.2f} ms at concurrency "
                  f"{args.concurrency} (<= 2: {met(guarded <= 2)}), {guarded_1:.2f} ms at concurrency 1 (<= 2: "
                  f"{met(guarded_1 <= 2)}); facade CPU per call {cpu_added:+.2f} ms")  # fmt: skip
    client.CoreV1Api(api).delete_namespace(ns)
    if not args.keep:
        cluster.down()


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


if __name__ == "__main__":
    main()
