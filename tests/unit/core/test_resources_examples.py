"""docs/examples/: one valid, commented example per kind, accepted by pydantic and by the CRD schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dockyard_core.crdgen import kind_name, openapi_schema
from dockyard_core.resources.base import KubeObject
from dockyard_core.resources.v1alpha1 import API_VERSION, KINDS
from tests.unit.crd_validator import CrdValidator, admit

EXAMPLES_DIR = Path(__file__).resolve().parents[3] / "docs" / "examples"
BY_KIND: dict[str, type[KubeObject]] = {kind_name(kind): kind for kind in KINDS}


def _documents() -> list[tuple[str, dict[str, Any]]]:
    docs = []
    for path in sorted(EXAMPLES_DIR.glob("*.yaml")):
        for i, doc in enumerate(yaml.safe_load_all(path.read_text(encoding="utf-8"))):
            docs.append((f"{path.name}#{i}", doc))
    return docs


DOCUMENTS = _documents()


def _without_empty(value: Any) -> Any:
    """``value`` without empty lists and maps (pydantic fills them in; the API server leaves them out)."""
    if isinstance(value, dict):
        cleaned = {k: _without_empty(v) for k, v in value.items()}
        return {k: v for k, v in cleaned.items() if v not in ({}, [])}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return value


def test_every_kind_has_an_example() -> None:
    assert {doc["kind"] for _, doc in DOCUMENTS} == set(BY_KIND)
    assert {p.stem for p in EXAMPLES_DIR.glob("*.yaml")} == {k.lower() for k in BY_KIND}


@pytest.mark.parametrize(("name", "doc"), DOCUMENTS, ids=[n for n, _ in DOCUMENTS])
def test_example_is_valid(name: str, doc: dict[str, Any]) -> None:
    assert doc["apiVersion"] == API_VERSION
    kind = BY_KIND[doc["kind"]]
    obj = kind.model_validate(doc)
    assert CrdValidator(openapi_schema(kind)).errors(doc) == []
    assert CrdValidator(openapi_schema(kind)).errors(obj.to_manifest()) == []


@pytest.mark.parametrize(("name", "doc"), DOCUMENTS, ids=[n for n, _ in DOCUMENTS])
def test_pydantic_and_crd_defaults_agree(name: str, doc: dict[str, Any]) -> None:
    """What the API server stores (defaults applied) is what pydantic makes of the same manifest."""
    kind = BY_KIND[doc["kind"]]
    stored = admit(openapi_schema(kind), doc)
    assert _without_empty(kind.model_validate(doc).to_manifest()["spec"]) == _without_empty(stored["spec"])
