"""The suites and their markers, and the fixtures they share.

Each directory under tests/ is one suite, marked by its directory (``pytest -m <marker>``, ``make
test-<marker>``): unit (no tool but Python, no cluster), tools (helm, hadolint, MinIO, PostgreSQL), e2e,
browser and chaos (a real API server: also ``k8s``), incluster (the real-node test bed). Fixtures shared
by more than one suite live in tests/support and are loaded here as plugins."""

from __future__ import annotations

from pathlib import Path

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        try:
            suite = item.path.resolve().relative_to(TESTS).parts[0]
        except ValueError:  # a test outside tests/
            continue
        for marker in SUITES.get(suite, ()):
            if item.get_closest_marker(marker) is None:
                item.add_marker(marker)
