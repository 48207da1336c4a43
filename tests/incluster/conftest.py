"""Fixtures of the in-cluster suite (marker ``incluster``): the real-node test bed (docs/real-node.md)."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
from tests.support.testbed import SessionTestBed, running_testbed


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/incluster/" in item.nodeid:
            item.add_marker(pytest.mark.incluster)


def testbed_mode() -> bool:
    return os.environ.get("DOCKYARD_INCLUSTER", "testbed") == "testbed"


@pytest.fixture(scope="session")
def testbed() -> Iterator[SessionTestBed]:
    """The test bed, reused when it is up, else brought up (and down at the end of the session)."""
    if not testbed_mode():
        pytest.skip("DOCKYARD_INCLUSTER is not 'testbed'")
    if os.geteuid() != 0:
        pytest.skip("the test bed needs root (network namespace, cgroups, containerd)")
    with running_testbed() as session:
        yield session
