"""Each rewrite of dockyard_core.resources.structural, on small schemas, and the structural check."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import BaseModel, Field

from dockyard_core.resources import structural as st


def test_inline_refs_replaces_refs_and_drops_defs() -> None:
    schema = {
        "$defs": {"Inner": {"type": "object", "description": "Inner doc.", "properties": {"x": {"type": "integer"}}}},
        "type": "object",
        "properties": {
            "a": {"$ref": "#/$defs/Inner", "description": "Field doc."},
            "b": {"type": "array", "items": {"$ref": "#/$defs/Inner"}},
            "c": {"allOf": [{"$ref": "#/$defs/Inner"}], "default": {}},
        },
    }
    out = st.inline_refs(schema)
    assert "$defs" not in out
    assert out["properties"]["a"] == {
        "type": "object",
        "description": "Field doc.",
        "properties": {"x": {"type": "integer"}},
    }
    assert out["properties"]["b"]["items"]["description"] == "Inner doc."
    assert out["properties"]["c"]["default"] == {}
    assert out["properties"]["c"]["type"] == "object"
    assert "allOf" not in out["properties"]["c"]


def test_field_rules_add_to_the_rules_of_the_type() -> None:
    type_rule, field_rule = {"rule": "has(self.a)", "message": "a"}, {"rule": "self == oldSelf", "message": "b"}
    schema = {
        "$defs": {"T": {"type": "object", "x-kubernetes-validations": [type_rule]}},
        "properties": {
            "f": {"$ref": "#/$defs/T", "x-kubernetes-validations": [field_rule]},
            "g": {"anyOf": [{"$ref": "#/$defs/T"}, {"type": "null"}], "x-kubernetes-validations": [field_rule]},
        },
    }
    out = st.rewrite_bottom_up(st.inline_refs(schema), st.collapse_optional)
    assert out["properties"]["f"]["x-kubernetes-validations"] == [type_rule, field_rule]
    assert out["properties"]["g"]["x-kubernetes-validations"] == [type_rule, field_rule]


def test_inline_refs_copies_so_rewrites_do_not_alias() -> None:
    schema = {
        "$defs": {"I": {"type": "string"}},
        "properties": {"a": {"$ref": "#/$defs/I"}, "b": {"$ref": "#/$defs/I"}},
    }
    out = st.inline_refs(schema)
    assert out["properties"]["a"] is not out["properties"]["b"]


def test_inline_refs_refuses_recursion_and_dangling_refs() -> None:
    recursive = {"$defs": {"N": {"type": "object", "properties": {"next": {"$ref": "#/$defs/N"}}}}, "$ref": "#/$defs/N"}
    with pytest.raises(st.StructuralSchemaError, match="recursive"):
        st.inline_refs(recursive)
    with pytest.raises(st.StructuralSchemaError, match="unresolvable"):
        st.inline_refs({"$ref": "#/$defs/Missing"})


def test_collapse_optional_turns_union_with_null_into_plain_optional() -> None:
    node = {"anyOf": [{"type": "integer", "minimum": 1}, {"type": "null"}], "default": None, "description": "d"}
    assert st.collapse_optional(node) == {"type": "integer", "minimum": 1, "description": "d"}


def test_collapse_optional_keeps_outer_keywords_and_non_null_defaults() -> None:
    node = {
        "anyOf": [{"type": "string", "description": "inner"}, {"type": "null"}],
        "description": "outer",
        "default": "x",
    }
    assert st.collapse_optional(node) == {"type": "string", "description": "outer", "default": "x"}


def test_collapse_optional_handles_type_lists_and_leaves_other_unions() -> None:
    assert st.collapse_optional({"type": ["string", "null"]}) == {"type": "string"}
    union = {"anyOf": [{"type": "string"}, {"type": "integer"}]}
    assert st.collapse_optional(union) == union
    assert "nullable" not in st.collapse_optional({"anyOf": [{"type": "string"}, {"type": "null"}]})


def test_const_to_enum() -> None:
    assert st.const_to_enum({"const": "x", "type": "string"}) == {"type": "string", "enum": ["x"]}
    assert st.const_to_enum({"type": "string"}) == {"type": "string"}


def test_drop_titles_removes_the_keyword_only() -> None:
    assert st.drop_titles({"title": "Foo", "type": "string"}) == {"type": "string"}
    node = {"type": "object", "properties": {"title": {"type": "string", "title": "Title"}}}
    out = st.rewrite_bottom_up(node, st.drop_titles)
    assert out == {"type": "object", "properties": {"title": {"type": "string"}}}


def test_drop_examples_keeps_the_first_as_example() -> None:
    assert st.drop_examples({"type": "string", "examples": ["a", "b"]}) == {"type": "string", "example": "a"}


@pytest.mark.parametrize(
    ("node", "expected"),
    [
        ({"type": "number", "exclusiveMinimum": 0}, {"type": "number", "minimum": 0, "exclusiveMinimum": True}),
        ({"type": "number", "exclusiveMaximum": 2.5}, {"type": "number", "maximum": 2.5, "exclusiveMaximum": True}),
        (
            {"type": "number", "minimum": 0, "exclusiveMinimum": True},
            {"type": "number", "minimum": 0, "exclusiveMinimum": True},
        ),
    ],
)
def test_exclusive_bounds_become_openapi_3_0_booleans(node: dict[str, Any], expected: dict[str, Any]) -> None:
    assert st.exclusive_bounds(node) == expected


def test_open_objects_drops_additional_properties_false_only() -> None:
    assert st.open_objects({"type": "object", "additionalProperties": False}) == {"type": "object"}
    typed = {"type": "object", "additionalProperties": {"type": "string"}}
    assert st.open_objects(typed) == typed


@pytest.mark.parametrize(
    "node",
    [
        {"type": "object", "additionalProperties": True},
        {"type": "object", "additionalProperties": {}},
        {},
        {"description": "anything"},
    ],
)
def test_free_form_values_preserve_unknown_fields(node: dict[str, Any]) -> None:
    out = st.free_form(node)
    assert out["x-kubernetes-preserve-unknown-fields"] is True
    assert "additionalProperties" not in out


def test_free_form_leaves_typed_maps_and_objects_alone() -> None:
    typed_map = {"type": "object", "additionalProperties": {"type": "string"}}
    assert st.free_form(typed_map) == typed_map
    assert st.free_form({"type": "string"}) == {"type": "string"}


def test_unique_items_becomes_a_set_list() -> None:
    assert st.unique_items_to_set({"type": "array", "uniqueItems": True}) == {
        "type": "array",
        "x-kubernetes-list-type": "set",
    }
    assert st.unique_items_to_set({"type": "array", "uniqueItems": False}) == {"type": "array"}


def test_unwrap_description_reflows_paragraphs_and_keeps_lists() -> None:
    node = {"description": "One\nline.\n\nNext paragraph\ncontinues.\n- item one\n- item two"}
    assert (
        st.unwrap_description(node)["description"] == "One line.\n\nNext paragraph continues.\n- item one\n- item two"
    )


def test_order_keys_puts_description_and_type_first_and_rule_first() -> None:
    node = {
        "x-kubernetes-validations": [{"message": "m", "rule": "r", "fieldPath": ".a"}],
        "properties": {},
        "type": "object",
        "description": "d",
    }
    out = st.order_keys(node)
    assert list(out) == ["description", "type", "properties", "x-kubernetes-validations"]
    assert list(out["x-kubernetes-validations"][0]) == ["rule", "message", "fieldPath"]


class _Small(BaseModel):
    """Small doc."""

    kind: Literal["Small"] = "Small"
    count: Annotated[int, Field(gt=0, description="How many.")] = 1
    note: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    tags: set[str] = Field(default_factory=set)


def test_to_structural_on_a_pydantic_model() -> None:
    out = st.to_structural(_Small.model_json_schema())
    assert out == {
        "description": "Small doc.",
        "type": "object",
        "properties": {
            "kind": {"type": "string", "enum": ["Small"], "default": "Small"},
            "count": {
                "description": "How many.",
                "type": "integer",
                "default": 1,
                "minimum": 0,
                "exclusiveMinimum": True,
            },
            "note": {"type": "string"},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
            "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
        },
    }
    assert st.check(out) == []


@pytest.mark.parametrize(
    ("node", "problem"),
    [
        ({"type": "string", "title": "T"}, "unsupported keywords ['title']"),
        ({"$ref": "#/$defs/X"}, "unsupported keywords ['$ref']"),
        ({"description": "no type"}, "no type"),
        ({"type": ["string", "null"]}, "type must be one string"),
        ({"type": "array"}, "array without items"),
        ({"type": "object", "properties": {}, "additionalProperties": {"type": "string"}}, "both properties"),
        ({"type": "object", "additionalProperties": False}, "additionalProperties: false"),
        ({"type": "string", "default": None}, "default: null"),
        ({"type": "number", "exclusiveMinimum": 0}, "exclusiveMinimum must be a boolean"),
        (
            {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "properties": {"name": {"type": "string"}}},
            },
            "list-type map keys",
        ),
        ({"type": "object", "x-kubernetes-validations": [{"rule": "true"}]}, "validation rule without"),
    ],
)
def test_check_reports_what_the_api_server_would_refuse(node: dict[str, Any], problem: str) -> None:
    problems = st.check({"type": "object", "properties": {"f": node}})
    assert any(p.startswith(".f: ") and problem in p for p in problems), problems


def test_check_refuses_transition_rules_that_cannot_see_the_old_value() -> None:
    immutable = {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "m"}]}
    atomic = {"type": "array", "items": {"type": "object", "properties": {"a": immutable}}}
    keyed = {**atomic, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["a"]}
    keyed["items"] = {**keyed["items"], "required": ["a"]}
    assert any("oldSelf in a rule under a list" in p for p in st.check({"type": "object", "properties": {"l": atomic}}))
    assert st.check({"type": "object", "properties": {"l": keyed}}) == []


def test_to_structural_raises_with_the_problems() -> None:
    with pytest.raises(st.StructuralSchemaError, match="array without items"):
        st.to_structural({"type": "object", "properties": {"f": {"type": "array"}}})
