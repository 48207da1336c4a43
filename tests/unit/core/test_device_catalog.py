"""The device catalog file (DOCKYARD_DEVICE_CATALOG / the chart's deviceCatalog) laid over the built-in one."""

from __future__ import annotations

from pathlib import Path

import pytest

from dockyard_core.devices import BUILT_IN, DeviceCatalogError, load_catalog


def test_no_file_is_the_built_in_catalog() -> None:
    assert load_catalog(None) == BUILT_IN


@pytest.mark.parametrize("wrapped", [False, True])
def test_a_file_corrects_figures_of_known_types(tmp_path: Path, wrapped: bool) -> None:
    entries = "- {name: g5.xlarge, memory_gib: 15}\n"
    text = "devices:\n  - {name: g5.xlarge, memory_gib: 15}\n" if wrapped else entries
    path = tmp_path / "devices.yaml"
    path.write_text(text)
    catalog = load_catalog(str(path))
    assert catalog["g5.xlarge"].memory_gib == 15
    assert catalog["g5.xlarge"].gpus == 1
    assert catalog["g4dn.metal"] == BUILT_IN["g4dn.metal"]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("- {name: p5.48xlarge, gpus: 8}\n", "not one of the device types"),
        ("- {name: g5.xlarge, cores: 4}\n", "unknown field(s) cores"),
        ("- {name: g5.xlarge, gpus: 0}\n", "must be positive"),
        ("just text\n", "expected a list"),
    ],
)
def test_bad_files_are_refused_with_the_reason(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "devices.yaml"
    path.write_text(text)
    with pytest.raises(DeviceCatalogError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        load_catalog(str(path))
