"""The suites and their markers, and the fixtures they share.

Each directory under tests/ is one suite, marked by its directory (``pytest -m <marker>``, ``make
test-<marker>``): unit (no tool but Python, no cluster), tools (helm, hadolint, MinIO, PostgreSQL), e2e,
browser and chaos (a real API server: also ``k8s``), incluster (the real-node test bed). Fixtures shared
by more than one suite live in tests/support and are loaded here as plugins.

`make test` runs the suites on pytest-xdist workers, each with a local control plane of its own
(tests/support/cluster.py): a test file (or a suite that shares one thing, below) runs whole on one worker."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest_plugins = ["tests.support.fixtures", "tests.support.k8s_fixtures", "tests.support.users"]

TESTS = Path(__file__).resolve().parent
SUITES: dict[str, tuple[str, ...]] = {
    "unit": ("unit",),
    "tools": ("tools",),
    "e2e": ("e2e", "k8s"),
    "browser": ("browser", "k8s"),
    "chaos": ("chaos", "k8s"),
    "incluster": ("incluster",),
}
"""Markers per directory of tests/."""


SHARED_GROUPS = {"incluster": "testbed", "chaos": "chaos"}
"""Suites whose files share one thing a worker cannot have twice: the test bed's real node (one network
namespace per machine), the chaos figures file. Each runs whole on one pytest-xdist worker."""

FIRST = ("incluster", "chaos", "e2e", "browser", "tools", "unit")
"""The order the suites are handed to pytest-xdist workers: the longest groups first, so that the many short
unit files fill the workers' gaps at the end instead of one long file running alone."""


def _suite(item: pytest.Item) -> str:
    try:
        return item.path.resolve().relative_to(TESTS).parts[0]
    except ValueError:  # a test outside tests/
        return ""


def work_unit(nodeid: str) -> str:
    """What one pytest-xdist worker runs whole: a test file (its module-scoped fixtures, an operator or a
    facade, start once), or a suite of :data:`SHARED_GROUPS`."""
    path = nodeid.split("::", 1)[0]
    parts = path.split("/")
    suite = parts[1] if len(parts) > 2 and parts[0] == "tests" else ""
    return SHARED_GROUPS.get(suite) or path


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """`make test` runs ``pytest -n N``: the work units of :func:`work_unit`, handed out in collection order
    (the longest suites first, :data:`FIRST`). pytest-xdist's own ``--dist loadgroup`` marks a group by
    rewriting the node id, which pytest 9 no longer allows; its ``loadscope`` scheduler takes the unit
    from a function instead."""
    if config.getvalue("dist") in ("each", "no"):
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SuiteScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return SuiteScheduling(config, log)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        suite = _suite(item)
        for marker in SUITES.get(suite, ()):
            if item.get_closest_marker(marker) is None:
                item.add_marker(marker)
    rank = {suite: i for i, suite in enumerate(FIRST)}
    items.sort(key=lambda item: rank.get(_suite(item), len(FIRST)))  # stable: a file's own order is kept


@pytest.fixture(params=["c", "python"])
def span_type(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> type:
    """Runs a test with each implementation of ``dockyard_core.tracing``'s spans: the C one (``CSpan``,
    ``CTracer``, the C ``extract``, encoder and exporter queue, where the extension was built: CI builds it) and
    the Python one (``PySpan``, ``PyTracer``, ``py_extract``, ``Encoder.python_span``, ``BatchExporter``'s own
    ``__call__``), so that both behave alike."""
    from dockyard_core import otlp, tracing

    if request.param == "python":
        monkeypatch.setattr(tracing, "Span", tracing.PySpan)
        monkeypatch.setattr(tracing, "Tracer", tracing.PyTracer)
        monkeypatch.setattr(tracing, "extract", tracing.py_extract)
        monkeypatch.setattr(otlp, "_c_span", None)  # the encoder and the exporter's queue in Python too
        monkeypatch.setattr(otlp, "_CSink", None)
        monkeypatch.setattr(otlp, "_encode_batch", None)
    elif tracing.Span is tracing.PySpan:
        pytest.skip("the C extension was not built")
    return tracing.Span
