"""An offline stand-in for the API server's validation of a custom resource against its CRD schema.

It does what kube-apiserver does to a create or update, in the same order, closely enough for unit
tests: drop nulls of non-nullable fields, apply defaults, validate the OpenAPI schema (as JSON Schema
draft 4, whose ``exclusiveMinimum`` is the same boolean as OpenAPI 3.0's), enforce
``x-kubernetes-list-type`` uniqueness, then evaluate every ``x-kubernetes-validations`` CEL rule
(with ``oldSelf`` on updates) using cel-python. Unknown fields are errors (kubectl's strict field
validation). It is no substitute for the real API server, which the e2e suite runs against.
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

import celpy
from jsonschema import Draft4Validator

Schema = dict[str, Any]
_MISSING: Any = object()


def _draft4(node: Schema) -> Schema:
    """The schema for jsonschema: objects with properties refuse unknown fields."""
    out = dict(node)
    if "properties" in out:
        out["properties"] = {k: _draft4(v) for k, v in out["properties"].items()}
        if not out.get("x-kubernetes-preserve-unknown-fields"):
            out["additionalProperties"] = False
    for key in ("items", "additionalProperties"):
        if isinstance(out.get(key), dict):
            out[key] = _draft4(out[key])
    return out


def admit(schema: Schema, value: Any) -> Any:
    """``value`` after null pruning and defaulting (the API server's order: top-down)."""
    if isinstance(value, dict) and "properties" in schema:
        out = {}
        for key, item in value.items():
            sub = schema["properties"].get(key)
            if item is None and sub is not None and "default" not in sub:
                continue  # PruneNonNullableNullsWithoutDefaults
            out[key] = item
        for key, sub in schema["properties"].items():
            if out.get(key) is None and "default" in sub:
                out[key] = copy.deepcopy(sub["default"])
        return {k: admit(schema["properties"][k], v) if k in schema["properties"] else v for k, v in out.items()}
    if isinstance(value, dict) and isinstance(schema.get("additionalProperties"), dict):
        return {k: admit(schema["additionalProperties"], v) for k, v in value.items()}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [admit(schema["items"], v) for v in value]
    return value


def _list_key(schema: Schema, item: Any) -> Any:
    if schema.get("x-kubernetes-list-type") == "map":
        return tuple(item.get(k) for k in schema["x-kubernetes-list-map-keys"])
    return repr(item)


def _list_errors(schema: Schema, value: Any, path: str) -> list[str]:
    errors: list[str] = []
    if isinstance(value, list) and schema.get("x-kubernetes-list-type") in ("map", "set"):
        keys = [_list_key(schema, item) for item in value]
        errors += [f"{path}: Duplicate value: {k!r}" for k in {k for k in keys if keys.count(k) > 1}]
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                errors += _list_errors(sub, value[key], f"{path}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += _list_errors(schema["items"], item, f"{path}[{i}]")
    return errors


@cache
def compile_rule(rule: str) -> celpy.Runner:
    """A cel-python program for one rule (raises on a syntax error)."""
    env = celpy.Environment()
    return env.program(env.compile(rule))


def _cel_errors(schema: Schema, value: Any, old: Any, path: str) -> list[str]:
    errors: list[str] = []
    for entry in schema.get("x-kubernetes-validations", []):
        transition = "oldSelf" in entry["rule"]
        if transition and old is _MISSING:
            continue
        activation = {"self": celpy.json_to_cel(value)}
        if transition:
            activation["oldSelf"] = celpy.json_to_cel(old)
        try:
            result = compile_rule(entry["rule"]).evaluate(activation)
        except celpy.CELEvalError as exc:  # pragma: no cover - a rule that cannot run is a bug
            errors.append(f"{path}: rule {entry['rule']!r} failed to run: {exc}")
            continue
        if isinstance(result, celpy.CELEvalError) or not bool(result):
            errors.append(f"{path}{entry.get('fieldPath', '')}: Invalid value: {entry['message']}")
    if isinstance(value, dict):
        subs = schema.get("properties") or {}
        for key, item in value.items():
            sub = subs.get(key, schema.get("additionalProperties"))
            if isinstance(sub, dict):
                old_item = old.get(key, _MISSING) if isinstance(old, dict) else _MISSING
                errors += _cel_errors(sub, item, old_item, f"{path}.{key}")
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        correlated: dict[Any, Any] = {}
        if schema.get("x-kubernetes-list-type") == "map" and isinstance(old, list):
            correlated = {_list_key(schema, item): item for item in old}
        for i, item in enumerate(value):
            old_item = correlated.get(_list_key(schema, item), _MISSING) if correlated else _MISSING
            errors += _cel_errors(schema["items"], item, old_item, f"{path}[{i}]")
    return errors


class CrdValidator:
    """Validates objects of one kind against the ``openAPIV3Schema`` of its CRD."""

    def __init__(self, schema: Schema) -> None:
        self.schema = schema
        self._validator = Draft4Validator(_draft4(schema), format_checker=Draft4Validator.FORMAT_CHECKER)

    def errors(self, obj: dict[str, Any], old: dict[str, Any] | None = None) -> list[str]:
        """Why the API server would refuse ``obj`` (an update of ``old`` if given); empty if accepted."""
        obj = admit(self.schema, obj)
        errors = [
            f"{'.'.join(str(p) for p in e.absolute_path) or '<root>'}: {e.message}"
            for e in self._validator.iter_errors(obj)
        ]
        errors += _list_errors(self.schema, obj, "")
        if errors:
            return errors
        old_admitted = _MISSING if old is None else admit(self.schema, old)
        return _cel_errors(self.schema, obj, old_admitted, "")
