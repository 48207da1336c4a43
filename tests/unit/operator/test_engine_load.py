from __future__ import annotations

from pathlib import Path
from typing import get_args

import pytest

from dockyard_operator.engine_load import (
    ENGINE_METRICS,
    LLAMA_CPP_METRICS,
    RUNNING_METRICS,
    VLLM_METRICS,
    WAITING_METRICS,
    LoadMetricNames,
    LoadSample,
    parse_load,
)
from dockyard_operator.runtimes import DEFAULT_CATALOG, EngineKind

LLAMA_SERVER_EXPOSITION = (Path(__file__).parent / "fixtures" / "llama_server_metrics.txt").read_text()
"""A real llama-server page under load (the file's header says how it was captured)."""

# An excerpt of a real vLLM /metrics page (histograms shortened).
VLLM_EXPOSITION = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 7.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 3.0
# HELP vllm:gpu_cache_usage_perc GPU KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:gpu_cache_usage_perc gauge
vllm:gpu_cache_usage_perc{engine="0",model_name="meta-llama/Llama-3.1-8B-Instruct"} 0.42
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.001",model_name="m"} 0.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="m"} 12.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="m"} 12.0
vllm:time_to_first_token_seconds_sum{engine="0",model_name="m"} 1.5
# HELP python_gc_objects_collected_total Objects collected during gc
# TYPE python_gc_objects_collected_total counter
python_gc_objects_collected_total{generation="0"} 1234.0
"""


def test_reads_a_vllm_exposition() -> None:
    assert parse_load(VLLM_EXPOSITION) == LoadSample(running=7.0, waiting=3.0)


def test_total_is_running_plus_waiting() -> None:
    assert LoadSample(running=7.0, waiting=3.5).total == 10.5


def test_sums_every_series_of_a_gauge() -> None:
    text = """\
vllm:num_requests_running{engine="0",model_name="x"} 4
vllm:num_requests_running{engine="1",model_name="x"} 5
vllm:num_requests_waiting{engine="0",model_name="x"} 1
vllm:num_requests_waiting{engine="1",model_name="x"} 2.5
"""
    assert parse_load(text) == LoadSample(running=9.0, waiting=3.5)


def test_reads_unlabelled_series() -> None:
    assert parse_load("vllm:num_requests_running 2\nvllm:num_requests_waiting 0\n") == LoadSample(2.0, 0.0)


def test_reads_the_underscore_spelling() -> None:
    text = 'vllm_num_requests_running{model_name="x"} 6\nvllm_num_requests_waiting{model_name="x"} 1\n'
    assert parse_load(text) == LoadSample(running=6.0, waiting=1.0)


def test_prefers_the_colon_spelling_and_never_counts_both() -> None:
    text = """\
vllm:num_requests_running 6
vllm_num_requests_running 6
vllm:num_requests_waiting 1
vllm_num_requests_waiting 1
"""
    assert parse_load(text) == LoadSample(running=6.0, waiting=1.0)


def test_falls_back_to_the_underscore_spelling_when_the_colon_one_is_unreadable() -> None:
    text = "vllm:num_requests_running NaN\nvllm_num_requests_running 4\n"
    assert parse_load(text) == LoadSample(running=4.0, waiting=0.0)


def test_spellings_may_differ_between_the_two_gauges() -> None:
    text = "vllm:num_requests_running 3\nvllm_num_requests_waiting 2\n"
    assert parse_load(text) == LoadSample(running=3.0, waiting=2.0)


def test_a_missing_gauge_counts_as_zero() -> None:
    assert parse_load("vllm:num_requests_running 3\n") == LoadSample(running=3.0, waiting=0.0)
    assert parse_load("vllm:num_requests_waiting 3\n") == LoadSample(running=0.0, waiting=3.0)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "\n\n",
        "# EOF\n",
        "# HELP vllm:num_requests_running Number of requests.\n# TYPE vllm:num_requests_running gauge\n",
        "python_gc_objects_collected_total 3\nvllm:gpu_cache_usage_perc 0.5\n",
        "vllm:num_requests_running NaN\nvllm:num_requests_waiting nan\n",
        "<html><body>502 Bad Gateway</body></html>",
    ],
)
def test_no_readable_gauge_gives_none(text: str) -> None:
    assert parse_load(text) is None


@pytest.mark.parametrize(
    "line",
    [
        "vllm:num_requests_running NaN",
        "vllm:num_requests_running +Inf",
        "vllm:num_requests_running -Inf",
        "vllm:num_requests_running -1",
        "vllm:num_requests_running 1_000",
        "vllm:num_requests_running",
        "vllm:num_requests_running ",
        "vllm:num_requests_running{",
        'vllm:num_requests_running{model_name="x"',
        'vllm:num_requests_running{model_name="x} 5',
        "vllm:num_requests_running{model_name=x} 5",
        "vllm:num_requests_running{garbage} 5",
        'vllm:num_requests_running{="x"} 5',
        'vllm:num_requests_running{a="1",,b="2"} 5',
        "vllm:num_requests_running five",
        "vllm:num_requests_running5",
        "vllm:num_requests_running_total 5",
        "vllm:num_requests_runningX 5",
        "# vllm:num_requests_running 5",
        "vllm:num_requests_running 0x10",
    ],
)
def test_unreadable_lines_are_skipped_and_reading_goes_on(line: str) -> None:
    text = f"vllm:num_requests_running 1\n{line}\nvllm:num_requests_running 2\nvllm:num_requests_waiting 4\n"
    assert parse_load(text) == LoadSample(running=3.0, waiting=4.0)


@pytest.mark.parametrize(
    ("line", "value"),
    [
        ("vllm:num_requests_running 5", 5.0),
        ("vllm:num_requests_running 5.25", 5.25),
        ("vllm:num_requests_running 1e2", 100.0),
        ("vllm:num_requests_running 0", 0.0),
        ("vllm:num_requests_running -0", 0.0),
        ("vllm:num_requests_running 5 1712345678901", 5.0),  # with a timestamp
        ("  vllm:num_requests_running   5  ", 5.0),  # stray whitespace
        ("vllm:num_requests_running{} 5", 5.0),
        ('vllm:num_requests_running{model_name="x",} 5', 5.0),  # trailing comma
        ('vllm:num_requests_running {model_name="x"} 5', 5.0),  # space before the labels
        ('vllm:num_requests_running{ model_name = "x" , engine = "0" } 5', 5.0),
        ('vllm:num_requests_running{model_name="a \\"quoted\\" } name, b=\\"c\\""} 5', 5.0),
        ('vllm:num_requests_running{model_name="line\\nbreak\\\\"} 5', 5.0),
        ('vllm:num_requests_running{model_name="x"}5', 5.0),
        ('vllm:num_requests_running{model_name="x"} 5 # {trace_id="abc"} 1.0 1712345678.9', 5.0),  # exemplar
    ],
)
def test_reads_every_valid_sample_form(line: str, value: float) -> None:
    assert parse_load(line + "\n") == LoadSample(running=value, waiting=0.0)


def test_accepts_crlf_line_endings_and_openmetrics_eof() -> None:
    text = (
        "# TYPE vllm:num_requests_running gauge\r\n"
        "vllm:num_requests_running 2\r\nvllm:num_requests_waiting 1\r\n# EOF\r\n"
    )
    assert parse_load(text) == LoadSample(running=2.0, waiting=1.0)


def test_metric_names_are_configurable() -> None:
    names = LoadMetricNames(running=("ct2_active_requests",), waiting=("ct2_queued_requests", "ct2:queued"))
    text = "vllm:num_requests_running 50\nct2_active_requests 2\nct2:queued 3\n"
    assert parse_load(text, names) == LoadSample(running=2.0, waiting=3.0)
    assert parse_load(VLLM_EXPOSITION, names) is None


def test_default_names_are_the_vllm_gauges() -> None:
    assert VLLM_METRICS.running == RUNNING_METRICS == ("vllm:num_requests_running", "vllm_num_requests_running")
    assert VLLM_METRICS.waiting == WAITING_METRICS == ("vllm:num_requests_waiting", "vllm_num_requests_waiting")


@pytest.mark.parametrize(
    ("running", "waiting"),
    [
        ((), ("w",)),
        (("r",), ()),
        (("bad name",), ("w",)),
        (("r",), ("9starts_with_a_digit",)),
        (("r{x}",), ("w",)),
    ],
)
def test_invalid_metric_names_are_refused(running: tuple[str, ...], waiting: tuple[str, ...]) -> None:
    with pytest.raises(ValueError, match=r"running|waiting"):
        LoadMetricNames(running=running, waiting=waiting)


def test_a_large_exposition_is_read_quickly() -> None:
    import time

    filler = "".join(f'vllm:time_to_first_token_seconds_bucket{{le="{i}",model_name="m"}} {i}\n' for i in range(50_000))
    text = filler + "vllm:num_requests_running 1\n" + filler + "vllm:num_requests_waiting 2\n"
    started = time.perf_counter()
    assert parse_load(text) == LoadSample(running=1.0, waiting=2.0)
    assert time.perf_counter() - started < 2.0


def test_reads_a_real_llama_server_exposition() -> None:
    # 1 request in the one slot (--parallel 1), 5 deferred until it frees
    assert parse_load(LLAMA_SERVER_EXPOSITION, LLAMA_CPP_METRICS) == LoadSample(running=1.0, waiting=5.0)


def test_the_vllm_gauges_are_not_in_a_llama_server_exposition() -> None:
    # reading llama.cpp with vLLM's names was the bug: such a deployment stayed NoMetrics
    assert parse_load(LLAMA_SERVER_EXPOSITION, VLLM_METRICS) is None


def test_the_llama_cpp_gauges_accept_the_underscore_spelling() -> None:
    text = "llamacpp_requests_processing 2\nllamacpp_requests_deferred 7\n"
    assert parse_load(text, LLAMA_CPP_METRICS) == LoadSample(running=2.0, waiting=7.0)


def test_every_engine_of_the_catalog_has_its_load_gauges() -> None:
    assert set(ENGINE_METRICS) == set(get_args(EngineKind))
    assert {runtime.engine for runtime in DEFAULT_CATALOG.runtimes.values()} <= set(ENGINE_METRICS)
    assert ENGINE_METRICS["vllm"] is VLLM_METRICS
    assert ENGINE_METRICS["llama-cpp"] is LLAMA_CPP_METRICS
    assert LLAMA_CPP_METRICS.describe() == "llamacpp:requests_processing + llamacpp:requests_deferred"


def test_the_ctranslate2_servers_page_is_read_with_its_engines_names() -> None:
    # the two gauges of Dockyard's CTranslate2 server (api/dockyard_ct2/server.py, /metrics; their values
    # under load are tested in tests/unit/ct2/test_ct2_server.py)
    page = 'vllm:num_requests_running{model_name="tiny"} 1\nvllm:num_requests_waiting{model_name="tiny"} 1\n'
    assert parse_load(page, ENGINE_METRICS["ctranslate2"]) == LoadSample(running=1.0, waiting=1.0)
