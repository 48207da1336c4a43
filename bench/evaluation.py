"""An evaluation run of a 200-case suite against the tiny GGUF model on a real llama.cpp engine (#27's
target: it completes in <= 3 min on this machine; docs/promotion.md, docs/benchmarks.md).

One local control plane of its own, the operator and the facade as their own processes (local endpoint
mode, SQLite conversation store), llama.cpp's server serving the tiny random-weight GGUF model
(``dockyard_localcluster.tinymodel``, made on the spot, no download; started as the local engine runner
starts it, ``tests.support.engines.llama_server``), the benchmark playing the engine runner (it annotates
the ModelDeployment's Ready pod with the server's address). App ``bot``'s draft carries the suite
(:func:`suite`): ``--cases`` cases over the three categories, each a short message (every fourth after a
two-message conversation) with cheap expectations (no error, a latency bound, text that matches, what it
must not contain; the tiny model writes random words, so the pass rate says nothing of quality). The run
is started through the management API as a service account allowed to (``POST .../evaluations``) and
polled (``GET .../evaluations/{run}``) until it ends; the time from the POST to the end is the figure.

    .venv/bin/python -m bench.evaluation [--cases 200 --concurrency 4 --max-tokens 16 --target-s 180]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client
from tests.support.engines import llama_server, tiny_gguf

from bench import execute
from bench.common import api_for, bench_cluster, load, namespace, operator_process, wait_until
from bench.execute import facade_process, setup
from dockyard_core.resources import GROUP
from dockyard_core.resources.v1alpha1 import VERSION

CATEGORIES = ("keyFlow", "edgeCase", "errorHandling")
MESSAGES = ("What is the capital of Norway?", "Summarise our refund policy.", "Hello!", "Tell me a joke.")


def suite(cases: int, concurrency: int) -> dict[str, Any]:
    """``cases`` cases: categories in turn, a conversation before every fourth, cheap expectations."""
    out = []
    for i in range(cases):
        case: dict[str, Any] = {
            "name": f"case-{i:03d}",
            "category": CATEGORIES[i % 3],
            "message": f"{MESSAGES[i % len(MESSAGES)]} (#{i})",
            "expect": {"noError": True, "maxLatencyMs": 30_000, "matches": [r"\S"], "notContains": ["Traceback"]},
        }
        if i % 4 == 3:
            case["conversation"] = [
                {"role": "user", "content": "Hi"},
                {"role": "assistant", "content": "Hello, how can I help?"},
            ]
        out.append(case)
    return {"concurrency": concurrency, "cases": out}


def service_account_token(api: client.ApiClient, ns: str) -> str:
    """A token of service account ``bench`` in ``ns``, bound to the cluster's edit role there (which the
    chart's editor role aggregates into: environments/evaluations)."""
    core, rbac = client.CoreV1Api(api), client.RbacAuthorizationV1Api(api)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "bench"}})
    rbac.create_namespaced_role_binding(
        ns,
        {
            "metadata": {"name": "bench-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "bench", "namespace": ns}],
        },
    )
    answer = core.create_namespaced_service_account_token("bench", ns, {"spec": {"expirationSeconds": 3600}})
    return str(answer.status.token)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=4, help="the suite's concurrency (cases at once)")
    parser.add_argument("--max-tokens", type=int, default=16, help="the ModelDeployment's maxTokens")
    parser.add_argument("--target-s", type=float, default=180.0)
    parser.add_argument("--keep", action="store_true", help="leave the benchmark's control plane running")
    args = parser.parse_args()
    print(
        f"inputs: cases={args.cases}, concurrency={args.concurrency}, model=tiny GGUF (random weights) on "
        f"llama.cpp (--parallel=1, 1 thread), maxTokens={args.max_tokens}, target={args.target_s:g} s, "
        f"cpus={os.cpu_count()}, loadavg={load()}"
    )
    cluster = bench_cluster("bench-evaluation", nodes_per_type=1)
    api = api_for(cluster)
    ns = namespace(api, "bench-evaluation")
    state = cluster.settings.state_dir
    for stale in state.glob("bench-evaluation.db*"):
        stale.unlink()
    database = f"sqlite+aiosqlite:///{state / 'bench-evaluation.db'}"
    with (
        tempfile.TemporaryDirectory() as work,
        llama_server(tiny_gguf(Path(work)), alias="tiny") as model_url,
        operator_process(cluster),
        facade_process(cluster, database) as (url, _),
    ):
        execute.HYPER = {**execute.HYPER, "maxTokens": args.max_tokens}  # the ModelDeployment setup() creates
        setup(api, ns, model_url)
        objects = client.CustomObjectsApi(api)
        objects.patch_namespaced_custom_object(
            GROUP, VERSION, ns, "apps", "bot", {"spec": {"evaluations": suite(args.cases, args.concurrency)}}
        )
        token = service_account_token(api, ns)
        http = httpx.Client(base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=70)
        runs = f"/api/v1/namespaces/{ns}/environments/bot-draft/evaluations"

        def suite_seen() -> bool:  # the facade's informer has the draft with its suite
            answer = http.post(runs, json={"cases": ["case-000"]})
            if answer.status_code != 202:
                return False
            one = answer.json()["id"]
            wait_until(lambda: http.get(f"{runs}/{one}", params={"wait": 30}).json()["state"] != "running", 120,
                       "the warm-up run")  # fmt: skip
            return True

        wait_until(suite_seen, 60, "the facade serving the suite (one warm-up case)")
        started = time.monotonic()
        answer = http.post(runs, json={})
        assert answer.status_code == 202, answer.text
        run_id = answer.json()["id"]
        polls = 0
        while True:
            polls += 1
            shown = http.get(f"{runs}/{run_id}", params={"wait": 30}).json()
            if shown["state"] != "running":
                break
        seconds = time.monotonic() - started
        latencies = sorted(r["latencyMs"] for r in shown["results"])
        p50 = latencies[len(latencies) // 2] if latencies else 0
        errors = sum(1 for r in shown["results"] if r.get("error"))
        print(
            f"run {run_id}: state={shown['state']}, cases={shown['total']}, done={shown['done']}, "
            f"passed={shown['passed']}, errors={errors}, case latency p50={p50} ms "
            f"max={latencies[-1] if latencies else 0} ms, polls={polls}, wall={seconds:.1f} s, loadavg after={load()}"
        )
        sample = shown["results"][0] if shown["results"] else {}
        print(f"sample: case {sample.get('case')} answered by agent {sample.get('agent')!r}: "
              f"{str(sample.get('response'))[:80]!r} ({sample.get('latencyMs')} ms)")  # fmt: skip
        met = shown["done"] == args.cases and seconds <= args.target_s
        print(
            f"summary: {args.cases}-case suite on the tiny GGUF model completed in {seconds:.1f} s "
            f"(target <= {args.target_s:g} s): {'met' if met else 'not met'}"
        )
    if not args.keep:
        cluster.down()


if __name__ == "__main__":
    main()
