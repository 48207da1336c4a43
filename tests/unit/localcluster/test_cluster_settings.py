"""The test suite's local cluster is not ``make run``'s (issue 26): another kwokctl name, state dir, kwok work
dir and kubeconfig, ports from another range, settings of its own (``DOCKYARD_TEST_*``); the session points
``LocalClusterSettings()`` at it (``as_env``), and refuses settings that name the demo's cluster."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from dockyard_localcluster.cluster import PORT_OPTIONS, LocalCluster
from dockyard_localcluster.settings import DEMO_CLUSTER, SUITE_CLUSTER, LocalClusterSettings, SuiteClusterSettings
from tests.support.cluster import suite_cluster


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Neither cluster's variables from the shell (or from a test session that points at its cluster)."""
    for key in list(os.environ):
        if key.startswith("DOCKYARD_") and key[len("DOCKYARD_") :].lower() in LocalClusterSettings.model_fields:
            monkeypatch.delenv(key)
        if key.startswith("DOCKYARD_TEST_"):
            monkeypatch.delenv(key)


def ephemeral_low() -> int:
    """The kernel's lowest ephemeral port (32768 where /proc does not say)."""
    path = Path("/proc/sys/net/ipv4/ip_local_port_range")
    return int(path.read_text().split()[0]) if path.is_file() else 32768


def test_the_suites_cluster_differs_from_make_runs_in_name_state_and_kubeconfig() -> None:
    demo, suite = LocalClusterSettings(), SuiteClusterSettings()
    assert (demo.cluster_name, suite.cluster_name) == (DEMO_CLUSTER, SUITE_CLUSTER)
    assert suite.state_dir != demo.state_dir
    assert suite.kwok_workdir != demo.kwok_workdir
    assert suite.kubeconfig != demo.kubeconfig
    assert not suite.same_cluster(demo)
    # still gitignored: under the checkout's .dockyard, beside the demo's state
    assert suite.state_dir.parent == demo.state_dir


def test_the_demos_variables_do_not_reach_the_suites_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DOCKYARD_CLUSTER_NAME", "mine")
    monkeypatch.setenv("DOCKYARD_APISERVER_PORT", "6443")
    monkeypatch.setenv("DOCKYARD_NODES_PER_TYPE", "9")
    suite = SuiteClusterSettings()
    assert (suite.cluster_name, suite.apiserver_port, suite.nodes_per_type) == (SUITE_CLUSTER, 0, 2)
    monkeypatch.setenv("DOCKYARD_TEST_NODES_PER_TYPE", "1")
    assert SuiteClusterSettings().nodes_per_type == 1


def test_component_ports_never_meet(tmp_path: Path) -> None:
    """kwokctl counts down from 32767 for the demo (no port given here); the suite's six come from the
    ephemeral range above it, so a stopped cluster's ports are never handed to the other one."""
    assert LocalCluster(LocalClusterSettings()).component_ports() == {}
    ports = LocalCluster(SuiteClusterSettings()).component_ports()
    assert set(ports) == set(PORT_OPTIONS)
    assert len(set(ports.values())) == len(PORT_OPTIONS)
    assert min(ports.values()) >= ephemeral_low() > 32767
    fixed = LocalCluster(SuiteClusterSettings(apiserver_port=40000)).component_ports()
    assert fixed["kubeApiserverPort"] == 40000


def test_as_env_makes_local_cluster_settings_name_the_suites_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    suite = SuiteClusterSettings(node_pools="g5.xlarge=1")
    for key, value in suite.as_env().items():
        monkeypatch.setenv(key, value)
    pointed = LocalClusterSettings()
    assert pointed.same_cluster(suite)
    assert pointed.model_dump() == suite.model_dump()


def test_the_suite_refuses_settings_that_name_the_demos_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    demo = LocalClusterSettings()
    monkeypatch.setenv("DOCKYARD_TEST_CLUSTER_NAME", demo.cluster_name)
    monkeypatch.setenv("DOCKYARD_TEST_STATE_DIR", str(demo.state_dir))
    with pytest.raises(RuntimeError, match="make run"):
        suite_cluster()
