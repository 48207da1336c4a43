"""Two versions of the facade's execute call side by side in one run: the facade CPU per call of a baseline (another
checkout's ``api/`` directory, put first on its ``PYTHONPATH``) against this checkout's.

``bench.execute`` run once per version, one after the other, measures each on a machine that may have changed in
between (on the shared 2-vCPU machines the same code's CPU per call moved by a quarter within minutes). Here both
facades run at once on one local control plane, one operator and one scripted model server (``--delay-ms``), each with
a SQLite conversation store of its own, and the calls go to them in alternating segments (``--segments`` of
``--calls`` each, the order flipped every segment, concurrency ``--concurrency``, arrivals staggered over one model
delay or ``--lockstep``): a change of the machine falls on both alike. Printed: each segment's CPU per call (each
facade's own process), the median of each, and the median of the paired changes with its 95 % interval (bootstrap).

    .venv/bin/python -m bench.execute_ab --baseline /tmp/old/api [--segments 20 --calls 600 --concurrency 32
        --delay-ms 100 --lockstep]

A baseline: ``git worktree add /tmp/old <commit>``, and the C extensions built here copied into it
(``cp api/dockyard_core/*.so /tmp/old/api/dockyard_core/``).
"""

from __future__ import annotations

import argparse
import os
import statistics
from contextlib import ExitStack
from pathlib import Path

from bench import execute
from bench.common import api_for, bench_cluster, cpu_seconds, load, namespace, operator_process, wait_until
from bench.tracing import median_interval

VERSIONS = ("baseline", "this")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="the baseline's api/ directory")
    parser.add_argument("--segments", type=int, default=20)
    parser.add_argument("--calls", type=int, default=600, help="calls per segment and version")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--delay-ms", type=float, default=100.0)
    parser.add_argument("--lockstep", action="store_true", help="all clients at once instead of staggered")
    args = parser.parse_args()
    baseline = Path(args.baseline).resolve()
    if not (baseline / "dockyard_api").is_dir():
        parser.error(f"--baseline {baseline}: no dockyard_api package in it")
    spread = 0.0 if args.lockstep else args.delay_ms / 1000
    print(
        f"inputs: baseline={baseline}, segments={args.segments}, calls={args.calls} per segment and version, "
        f"concurrency={args.concurrency}, model delay={args.delay_ms:g} ms, "
        f"arrivals={'lockstep' if args.lockstep else 'staggered'}, cpus={os.cpu_count()}, loadavg={load()}"
    )
    cluster = bench_cluster("bench-execute-ab", nodes_per_type=1)
    try:
        api = api_for(cluster)
        ns = namespace(api, "bench-execute-ab")
        with ExitStack() as stack:
            model_url = stack.enter_context(execute.model_process(args.delay_ms))
            database = stack.enter_context(execute.database_url("sqlite", cluster))
            stack.enter_context(operator_process(cluster))
            this = stack.enter_context(execute.facade_process(cluster, database))
            extra = {"PYTHONPATH": os.pathsep.join(filter(None, [str(baseline), os.environ.get("PYTHONPATH")]))}
            other = database.replace("bench-execute.db", "bench-execute-baseline.db")
            old = stack.enter_context(execute.facade_process(cluster, other, extra=extra))
            key = execute.setup(api, ns, model_url)["bot"]
            facades = {"baseline": old, "this": this}
            targets = {
                version: {"model": model_url, "key": key, "execute": f"{url}/e/{ns}/bot-draft/v1/apps/bot/execute"}
                for version, (url, _) in facades.items()
            }
            for version in VERSIONS:
                target = targets[version]

                def answering(target: dict[str, str] = target) -> bool:
                    return execute.run_path("facade", 1, 1, target).errors == 0

                wait_until(answering, 30, f"{version} answering")
                execute.run_path("facade", 200, args.concurrency, target)
            cpu: dict[str, list[float]] = {version: [] for version in VERSIONS}
            p50: dict[str, list[float]] = {version: [] for version in VERSIONS}
            for segment in range(args.segments):
                for version in VERSIONS if segment % 2 == 0 else VERSIONS[::-1]:
                    pid = facades[version][1].pid
                    before = cpu_seconds(pid)
                    result = execute.run_path("facade", args.calls, args.concurrency, targets[version], spread)
                    cpu[version].append((cpu_seconds(pid) - before) * 1000 / args.calls)
                    p50[version].append(execute.percentile(result.latencies_ms, 50))
                    if result.errors:
                        raise SystemExit(f"{version}: {result.errors} calls failed")
                shown = ", ".join(f"{v} {cpu[v][-1]:.2f} ms" for v in VERSIONS)
                print(f"  segment {segment + 1:2}: {shown}")
    finally:
        cluster.down()
    changes = [100 * (new / old - 1) for new, old in zip(cpu["this"], cpu["baseline"], strict=True)]
    low, high = median_interval(changes)
    print(f"\nloadavg after: {load()}")
    print(
        f"summary: facade CPU per execute call, baseline {statistics.median(cpu['baseline']):.3f} ms, this "
        f"{statistics.median(cpu['this']):.3f} ms (medians of {args.segments} segments); paired change "
        f"{statistics.median(changes):+.1f} % (95 % interval {low:+.1f} to {high:+.1f}), lower in "
        f"{sum(c < 0 for c in changes)} of {len(changes)} segments; p50 baseline "
        f"{statistics.median(p50['baseline']):.1f} ms, this {statistics.median(p50['this']):.1f} ms"
    )


if __name__ == "__main__":
    main()
