"""The generated CRDs: up to date, structural, and useful with kubectl."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dockyard_core import crdgen
from dockyard_core.resources import GROUP
from dockyard_core.resources.base import KubeObject
from dockyard_core.resources.structural import check, iter_nodes
from dockyard_core.resources.v1alpha1 import KINDS, ModelDeployment, ToolDeployment
from tests.unit.crd_validator import compile_rule

CRDS = {kind: crdgen.build_crd(kind) for kind in KINDS}
KIND_IDS = [crdgen.kind_name(kind) for kind in KINDS]


def _version(kind: type[KubeObject]) -> dict[str, Any]:
    (version,) = CRDS[kind]["spec"]["versions"]
    return version


def _schema(kind: type[KubeObject]) -> dict[str, Any]:
    schema: dict[str, Any] = _version(kind)["schema"]["openAPIV3Schema"]
    return schema


def _node(schema: dict[str, Any], json_path: str) -> dict[str, Any] | None:
    node: dict[str, Any] | None = schema
    for key in json_path.strip(".").split("."):
        node = (node or {}).get("properties", {}).get(key)
    return node


def test_crds_directory_is_up_to_date() -> None:
    stale = crdgen.stale_files(crdgen.DEFAULT_OUTPUT_DIR, crdgen.generate())
    assert stale == [], "crds/ is out of date: run `python -m dockyard_core.crdgen`"


def test_one_file_per_kind_with_header_and_valid_yaml() -> None:
    files = crdgen.generate()
    assert sorted(files) == sorted(f"{GROUP}_{kind.crd.plural}.yaml" for kind in KINDS)
    for name, content in files.items():
        assert content.startswith(crdgen.HEADER)
        assert "do not edit" in content.splitlines()[0]
        doc = yaml.safe_load(content)
        assert doc["kind"] == "CustomResourceDefinition"
        assert doc["metadata"]["name"].endswith(f".{GROUP}")
        assert "&id" not in content, f"{name} uses YAML anchors"


def test_check_and_write_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = ["--output-dir", str(tmp_path)]
    assert crdgen.main([*out, "--check"]) == 1
    assert crdgen.main(out) == 0
    assert crdgen.main([*out, "--check"]) == 0
    first = tmp_path / crdgen.crd_filename(ModelDeployment)
    first.write_text(first.read_text() + "# edited\n")
    (tmp_path / f"{GROUP}_gone.yaml").write_text(crdgen.HEADER + "{}\n")
    (tmp_path / "kept.yaml").write_text("hand-written\n")
    assert crdgen.main([*out, "--check"]) == 1
    assert "out of date" in capsys.readouterr().err
    assert crdgen.main(out) == 0
    assert crdgen.main([*out, "--check"]) == 0
    assert not (tmp_path / f"{GROUP}_gone.yaml").exists()
    assert (tmp_path / "kept.yaml").read_text() == "hand-written\n"


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_schema_is_structural_without_nullable(kind: type[KubeObject]) -> None:
    schema = _schema(kind)
    assert check(schema) == []
    assert all("nullable" not in node for _, node in iter_nodes(schema))
    assert schema["properties"]["metadata"] == {"type": "object"}
    # An App may start empty; every other kind needs its spec.
    assert schema.get("required", []) == ([] if kind.__name__ == "App" else ["spec"])


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_every_field_is_described_for_kubectl_explain(kind: type[KubeObject]) -> None:
    schema = _schema(kind)
    undocumented = [
        path
        for path, node in iter_nodes(schema)
        if path.startswith((".spec", ".status")) and not node.get("description") and not path.endswith(("[]", "{}"))
    ]
    assert undocumented == []


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_every_cel_rule_compiles(kind: type[KubeObject]) -> None:
    rules = [e["rule"] for _, node in iter_nodes(_schema(kind)) for e in node.get("x-kubernetes-validations", [])]
    for rule in rules:
        compile_rule(rule)


EXPECTED_NAMES = {
    "Model": ("models", ["mdl"]),
    "ModelDeployment": ("modeldeployments", ["mdep"]),
    "Tool": ("tools", ["tool"]),
    "ToolDeployment": ("tooldeployments", ["tdep"]),
    "KnowledgeBase": ("knowledgebases", ["kb"]),
    "App": ("apps", ["app"]),
    "AppVersion": ("appversions", ["appv"]),
    "Environment": ("environments", ["env"]),
}


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_names_scope_and_status_subresource(kind: type[KubeObject]) -> None:
    spec = CRDS[kind]["spec"]
    plural, short = EXPECTED_NAMES[crdgen.kind_name(kind)]
    assert spec["group"] == GROUP
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["plural"] == plural
    assert spec["names"]["shortNames"] == short
    assert spec["names"]["categories"] == ["dockyard"]
    assert "status" in _version(kind)["subresources"]
    assert _version(kind)["served"]
    assert _version(kind)["storage"]


@pytest.mark.parametrize("kind", [ModelDeployment, ToolDeployment], ids=["ModelDeployment", "ToolDeployment"])
def test_scale_subresource_points_at_real_fields(kind: type[KubeObject]) -> None:
    scale = _version(kind)["subresources"]["scale"]
    schema = _schema(kind)
    assert (_node(schema, scale["specReplicasPath"]) or {}).get("type") == "integer"
    assert (_node(schema, scale["statusReplicasPath"]) or {}).get("type") == "integer"
    assert (_node(schema, scale["labelSelectorPath"]) or {}).get("type") == "string"


def test_only_deployments_have_a_scale_subresource() -> None:
    scaled = {crdgen.kind_name(k) for k in KINDS if "scale" in _version(k)["subresources"]}
    assert scaled == {"ModelDeployment", "ToolDeployment"}


COLUMN_TYPES = {"string": "string", "integer": "integer", "number": "number", "boolean": "boolean", "date": "string"}


@pytest.mark.parametrize("kind", KINDS, ids=KIND_IDS)
def test_printer_columns_and_selectable_fields_point_at_real_fields(kind: type[KubeObject]) -> None:
    schema = _schema(kind)
    for column in _version(kind)["additionalPrinterColumns"]:
        if column["jsonPath"] == ".metadata.creationTimestamp":
            assert column["type"] == "date"
            continue
        node = _node(schema, column["jsonPath"])
        assert node is not None, column
        assert COLUMN_TYPES[column["type"]] == node["type"], column
    for field in _version(kind).get("selectableFields", []):
        node = _node(schema, field["jsonPath"])
        assert node is not None, field
        assert node["type"] in ("string", "integer", "boolean"), field


@pytest.mark.parametrize(
    ("kind_name", "columns"),
    [
        ("ModelDeployment", ["Model", "Device", "Replicas", "Status", "Age"]),
        ("Environment", ["App", "Version", "Status", "Age"]),
    ],
)
def test_kubectl_get_shows_the_asked_for_columns(kind_name: str, columns: list[str]) -> None:
    (kind,) = [k for k in KINDS if crdgen.kind_name(k) == kind_name]
    shown = [c["name"] for c in _version(kind)["additionalPrinterColumns"] if not c.get("priority")]
    assert [c for c in shown if c in columns] == columns


def test_model_deployment_spec_uses_the_spec_field_names() -> None:
    spec = _schema(ModelDeployment)["properties"]["spec"]["properties"]
    assert {"name", "isDeployedPreviously", "hyperParameters", "scalingParameters", "deviceType"} <= spec.keys()
    assert spec["optimizationInfo"]["properties"].keys() == {"optimizationType", "quantizationType"}
    assert spec["hyperParameters"]["properties"].keys() == {"temperature", "maxTokens", "topP", "topK", "stopSequence"}
    assert spec["scalingParameters"]["properties"].keys() == {
        "maxBatchSize",
        "minReplicas",
        "maxReplicas",
        "scaleUpDelay",
        "scaleDownDelay",
    }
    job = _schema(ModelDeployment)["properties"]["status"]["properties"]["job"]["properties"]
    assert {"dockStatusId", "jobType", "action", "status"} <= job.keys()
