# ruff: noqa: E501
"""The benchmarks' reading of the API server's request counts (bench/common.py), and bench.tracing's turn."""

from __future__ import annotations

from collections import Counter

import pytest
from bench.common import ApiServerWork, count_diff, fit_per_second, format_counts, format_work, parse_request_counts

PAGE = """\
# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, ...
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="APPLY",version="v1"} 3
apiserver_request_total{code="201",component="apiserver",dry_run="",group="apps",resource="deployments",scope="resource",subresource="",verb="APPLY",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="dockyard.dev",resource="modeldeployments",scope="resource",subresource="status",verb="PATCH",version="v1alpha1"} 7
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="",scope="",subresource="/metrics",verb="GET",version=""} 4
apiserver_request_total_other{resource="deployments",verb="APPLY"} 100
apiserver_request_duration_seconds_bucket{resource="deployments",verb="APPLY",le="0.1"} 9
"""


def test_counts_are_summed_over_codes_and_keyed_by_resource_subresource_and_verb() -> None:
    counts = parse_request_counts(PAGE)
    assert counts == Counter(
        {("deployments", "APPLY"): 5, ("modeldeployments/status", "PATCH"): 7, ("(none)//metrics", "GET"): 4}
    )


def test_diff_keeps_what_grew_and_lists_writes_first() -> None:
    before = parse_request_counts(PAGE)
    after = before + Counter({("deployments", "APPLY"): 2, ("pods", "LIST"): 9, ("pods", "POST"): 1})
    diff = count_diff(after, before)
    assert diff == Counter({("deployments", "APPLY"): 2, ("pods", "LIST"): 9, ("pods", "POST"): 1})
    lines = format_counts(diff)
    assert [line.split()[:2] for line in lines] == [["deployments", "APPLY"], ["pods", "POST"], ["pods", "LIST"]]


WORK = """\
apiserver_request_total{code="201",group="dockyard.dev",resource="modeldeployments",subresource="",verb="POST"} 200
apiserver_request_total{code="200",group="dockyard.dev",resource="modeldeployments",subresource="status",verb="PATCH"} 200
apiserver_request_total{code="200",group="",resource="pods",subresource="",verb="WATCH"} 2
apiserver_request_duration_seconds_sum{component="apiserver",group="dockyard.dev",resource="modeldeployments",subresource="",verb="POST"} 1.5
apiserver_request_duration_seconds_sum{component="apiserver",group="dockyard.dev",resource="modeldeployments",subresource="status",verb="PATCH"} 0.5
apiserver_request_duration_seconds_sum{component="apiserver",group="",resource="pods",subresource="",verb="WATCH"} 600
apiserver_request_duration_seconds_count{component="apiserver",group="",resource="pods",subresource="",verb="WATCH"} 2
apiserver_watch_events_total{group="dockyard.dev",resource="modeldeployments",version="v1alpha1"} 1200
apiserver_watch_events_sizes_sum{group="dockyard.dev",resource="modeldeployments",version="v1alpha1"} 2e+06
apiserver_watch_events_total{group="",resource="pods",version="v1"} 800
apiserver_watch_events_sizes_sum{group="",resource="pods",version="v1"} 5e+06
"""


def test_what_the_api_server_spent_by_resource_leaves_the_watches_duration_out_and_folds_subresources() -> None:
    work = ApiServerWork.parse(WORK)
    assert work.by_resource() == {
        "modeldeployments": (400, 2.0, 0.0, 1200.0, 2.0),  # requests, seconds, answer MB, watch events, event MB
        "pods": (2, 0.0, 0.0, 800.0, 5.0),  # a watch lasts as long as its client wants: not in the seconds
    }
    assert ApiServerWork.parse(WORK).since(work).by_resource() == {}
    assert format_work(work)[1].split()[:2] == ["pods", "2"]  # most seconds + event MB first


def test_the_cost_per_unit_and_per_second_are_recovered_from_phases_at_different_rates() -> None:
    points = [(rate, 1.2 + 150 / rate) for rate in (640, 410, 270, 120)]  # ms per turn at turns per second
    a, b, off = fit_per_second(points)
    assert (round(a, 6), round(b, 6), round(off, 9)) == (1.2, 150.0, 0.0)


def test_the_interval_of_a_median_holds_it_and_narrows_with_more_pairs() -> None:
    """bench.tracing's 95 % interval of the judged median (percentile bootstrap, seeded: the same pairs give the
    same interval)."""
    import random

    from bench.tracing import median_interval

    draw = random.Random(7)
    few = [draw.gauss(3.0, 10.0) for _ in range(20)]
    many = few + [draw.gauss(3.0, 10.0) for _ in range(480)]
    for values in (few, many):
        low, high = median_interval(values)
        assert low <= sorted(values)[len(values) // 2] <= high
    assert median_interval(many)[1] - median_interval(many)[0] < (median_interval(few)[1] - median_interval(few)[0]) / 2
    assert median_interval(few) == median_interval(list(few))
    assert median_interval([2.0]) == (2.0, 2.0)


def test_the_hooks_of_a_benchmark_turn_are_added_one_at_a_time(monkeypatch: pytest.MonkeyPatch) -> None:
    """bench.tracing's turn with its first n hooks (what --instructions counts hook by hook): the spans and
    attributes each one adds, and with all of them the turn the facade traces (three spans, one trace)."""
    from bench.tracing import HOOKS, hooks_of_a_turn, scopes

    from dockyard_core import tracing as core
    from tests.support.tracing_hooks import trace_with

    finished: list[core.Span] = []
    trace_with(monkeypatch, core.Tracer(core.sampler({}), finished.append))
    names = []
    for hooks in range(1, len(HOOKS) + 1):
        finished.clear()
        hooks_of_a_turn(1, scopes(1)[0], hooks)
        names.append(sorted(span.name.split(" ")[0] for span in finished))
        assert len({span.trace_id for span in finished}) == 1
        assert core.current() is None  # every span ended and no longer current
    assert names == [
        ["POST"],
        ["POST"],
        ["POST", "invoke_agent"],
        *[["POST", "chat", "invoke_agent"]] * 2,
    ]
    request = next(span for span in finished if span.name.startswith("POST"))
    assert request.all_attributes()["gen_ai.conversation.id"] == f"ses_{1:032x}"
