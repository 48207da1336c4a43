"""The autoscaler's engine-metrics parser: prometheus_client's text parser (what the operator uses now,
one candidate line at a time) against the hand-written regex parser it replaced, on one vLLM page.

    .venv/bin/python -m bench.metrics_parser [--lines 430 --runs 2000]

Prints the time per page of each, and of the library parsing the WHOLE page, side by side.
"""

from __future__ import annotations

import argparse
import math
import re
import time
from collections.abc import Callable
from typing import Final

from prometheus_client.parser import text_string_to_metric_families

from dockyard_operator.engine_load import VLLM_METRICS, LoadMetricNames, LoadSample, parse_load

_NAME: Final = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL: Final = r'[a-zA-Z_][a-zA-Z0-9_]*\s*=\s*"(?:[^"\\\n]|\\.)*"'
_LABELS: Final = rf"\{{\s*(?:{_LABEL}\s*(?:,\s*{_LABEL}\s*)*,?\s*)?\}}"
# name, optional {labels}, value, then anything (timestamp, OpenMetrics exemplar) which is ignored.
_SAMPLE: Final = re.compile(rf"(?P<name>{_NAME})(?:\s*{_LABELS}\s*|\s+)(?P<value>\S+)(?:\s.*)?")
_METRIC_NAME: Final = re.compile(_NAME)


def handwritten_parse_load(text: str, names: LoadMetricNames = VLLM_METRICS) -> LoadSample | None:
    """The load an engine reports in its Prometheus text exposition.

    Every series of a gauge is summed (one per engine or model). A gauge that is absent counts as 0;
    when neither gauge has a readable series the result is None: this replica reported no load.
    """
    wanted = frozenset(names.running) | frozenset(names.waiting)
    prefixes = tuple(wanted)
    sums: dict[str, float] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line.startswith(prefixes):  # also skips comments, blank lines and other metrics
            continue
        match = _SAMPLE.fullmatch(line)
        if match is None or match["name"] not in wanted:
            continue
        value = _parse_value(match["value"])
        if value is not None:
            sums[match["name"]] = sums.get(match["name"], 0.0) + value
    running = next((sums[n] for n in names.running if n in sums), None)
    waiting = next((sums[n] for n in names.waiting if n in sums), None)
    if running is None and waiting is None:
        return None
    return LoadSample(running=running or 0.0, waiting=waiting or 0.0)


def _parse_value(token: str) -> float | None:
    """A request count, or None for anything that is not a finite, non-negative number."""
    if "_" in token:  # float() accepts 1_000; Prometheus does not
        return None
    try:
        value = float(token)
    except ValueError:
        return None
    if not math.isfinite(value) or value < 0:
        return None
    return value


def vllm_page(lines: int) -> str:
    """A vLLM /metrics page: the two gauges among histogram buckets and counters, HELP and TYPE lines."""
    out = [
        "# HELP vllm:num_requests_running Number of requests in model execution batches.",
        "# TYPE vllm:num_requests_running gauge",
        'vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0',
        "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
        "# TYPE vllm:num_requests_waiting gauge",
        'vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0',
        "# TYPE vllm:time_to_first_token_seconds histogram",
    ]
    i = 0
    while len(out) < lines:
        out.append(f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="{i * 0.01:.2f}",model_name="m"}} {i}.0')
        i += 1
    return "\n".join(out) + "\n"


def whole_page(text: str, names: LoadMetricNames = VLLM_METRICS) -> LoadSample | None:
    sums: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name in names.running or sample.name in names.waiting:
                sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    running = next((sums[n] for n in names.running if n in sums), None)
    waiting = next((sums[n] for n in names.waiting if n in sums), None)
    return None if running is None and waiting is None else LoadSample(running or 0.0, waiting or 0.0)


def timed(fn: Callable[[str], object], text: str, runs: int) -> float:
    started = time.perf_counter()
    for _ in range(runs):
        fn(text)
    return (time.perf_counter() - started) / runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--lines", type=int, default=430)
    parser.add_argument("--runs", type=int, default=2000)
    args = parser.parse_args()
    text = vllm_page(args.lines)
    assert parse_load(text) == handwritten_parse_load(text) == whole_page(text) == LoadSample(7.0, 3.0)
    library = timed(parse_load, text, args.runs)
    handwritten = timed(handwritten_parse_load, text, args.runs)
    whole = timed(whole_page, text, max(1, args.runs // 10))
    print(f"page: {args.lines} lines; time per page (mean of {args.runs} runs)")
    print(f"  library, candidate lines only (used) {library * 1e6:9.1f} us")
    print(f"  hand-written regex parser (replaced) {handwritten * 1e6:9.1f} us")
    print(f"  library, whole page                  {whole * 1e6:9.1f} us")
    print(f"  used / replaced: {library / handwritten:.2f}; autoscaler tick: 250 ms")


if __name__ == "__main__":
    main()
