"""Pydantic JSON Schema (draft 2020-12) → Kubernetes *structural* OpenAPI v3 schema.

A CRD's ``openAPIV3Schema`` must be structural: every node has a type, no references, no
``anyOf``/``oneOf`` that introduce types, OpenAPI 3.0 keywords only. Each rewrite below turns one
pydantic idiom into its structural form; :func:`to_structural` applies them all and :func:`check`
refuses anything that would still be rejected by the API server.

Optional fields (``X | None``) become plain optional properties, **not** ``nullable: true``:

- the API server prunes an explicit ``null`` from a non-nullable field that has no default
  (``PruneNonNullableNullsWithoutDefaults``), so ``field: null`` is still accepted, exactly as
  pydantic accepts ``None``;
- with ``nullable: true`` an ``enum`` field would reject ``null`` anyway (kube-openapi's enum
  validator never matches null), and nulls would be stored and handed to every client.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from copy import deepcopy
from typing import Any

Schema = dict[str, Any]
NodeRewrite = Callable[[Schema], Schema]

_REF_PREFIX = "#/$defs/"

# Keywords of apiextensions.k8s.io/v1 JSONSchemaProps that Dockyard emits.
ALLOWED_KEYWORDS = frozenset(
    {
        "description",
        "type",
        "format",
        "enum",
        "default",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "multipleOf",
        "minLength",
        "maxLength",
        "pattern",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "items",
        "properties",
        "additionalProperties",
        "required",
        "example",
        "x-kubernetes-preserve-unknown-fields",
        "x-kubernetes-int-or-string",
        "x-kubernetes-embedded-resource",
        "x-kubernetes-list-type",
        "x-kubernetes-list-map-keys",
        "x-kubernetes-map-type",
        "x-kubernetes-validations",
    }
)

_KEY_ORDER = (
    "description",
    "type",
    "format",
    "enum",
    "default",
    "minimum",
    "exclusiveMinimum",
    "maximum",
    "exclusiveMaximum",
    "multipleOf",
    "minLength",
    "maxLength",
    "pattern",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "items",
    "properties",
    "additionalProperties",
    "required",
)


class StructuralSchemaError(ValueError):
    """The schema cannot become (or is not) a structural CRD schema."""


# --- traversal --------------------------------------------------------------------------------------


def map_subschemas(node: Schema, fn: Callable[[Schema], Schema]) -> Schema:
    """A copy of ``node`` with ``fn`` applied to each direct subschema (not to ``node`` itself)."""
    out = dict(node)
    if isinstance(out.get("properties"), dict):
        out["properties"] = {name: fn(sub) for name, sub in out["properties"].items()}
    for key in ("items", "additionalProperties", "not"):
        if isinstance(out.get(key), dict):
            out[key] = fn(out[key])
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        if isinstance(out.get(key), list):
            out[key] = [fn(sub) for sub in out[key]]
    return out


def rewrite_bottom_up(node: Schema, rewrite: NodeRewrite) -> Schema:
    """Apply ``rewrite`` to every node of the tree, children before their parent."""
    return rewrite(map_subschemas(node, lambda sub: rewrite_bottom_up(sub, rewrite)))


def iter_nodes(node: Schema, path: str = "") -> Iterator[tuple[str, Schema]]:
    """Every node of the tree with a readable path (``.spec.scalingParameters``, ``.agents[]``)."""
    yield path, node
    for name, sub in (node.get("properties") or {}).items():
        yield from iter_nodes(sub, f"{path}.{name}")
    if isinstance(node.get("items"), dict):
        yield from iter_nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), dict):
        yield from iter_nodes(node["additionalProperties"], f"{path}{{}}")
    for key in ("anyOf", "oneOf", "allOf", "prefixItems"):
        for i, sub in enumerate(node.get(key) or []):
            yield from iter_nodes(sub, f"{path}/{key}[{i}]")
    if isinstance(node.get("not"), dict):
        yield from iter_nodes(node["not"], f"{path}/not")


# --- rewrites ---------------------------------------------------------------------------------------

_VALIDATIONS = "x-kubernetes-validations"


def merge(base: Schema, override: Schema) -> Schema:
    """``base`` with the keywords of ``override`` on top; validation rules of both are kept.

    Used where a field's keywords meet its type's schema: a field-level rule (e.g. immutability) must
    not replace the rules of the type (e.g. "exactly one of upload or hub").
    """
    out = {**base, **override}
    if _VALIDATIONS in base and _VALIDATIONS in override:
        out[_VALIDATIONS] = [*base[_VALIDATIONS], *override[_VALIDATIONS]]
    return out


def inline_refs(schema: Schema) -> Schema:
    """Replace every ``$ref`` to ``#/$defs/...`` by a copy of its target and drop ``$defs``.

    Keywords next to the reference (a field's ``description`` or ``default``) win over the target's
    (validation rules of both are kept, see :func:`merge`);
    pydantic's older ``allOf: [{$ref}]`` wrapping is unwrapped the same way. Recursive types cannot be
    structural and raise :class:`StructuralSchemaError`.
    """
    defs: dict[str, Schema] = schema.get("$defs", {})

    def resolve(node: Schema, stack: tuple[str, ...]) -> Schema:
        node = dict(node)
        node.pop("$defs", None)
        all_of = node.get("allOf")
        if isinstance(all_of, list) and len(all_of) == 1 and set(all_of[0]) == {"$ref"}:
            node.pop("allOf")
            node["$ref"] = all_of[0]["$ref"]
        ref = node.pop("$ref", None)
        if ref is not None:
            if not ref.startswith(_REF_PREFIX) or ref[len(_REF_PREFIX) :] not in defs:
                raise StructuralSchemaError(f"unresolvable reference {ref!r}")
            name = ref[len(_REF_PREFIX) :]
            if name in stack:
                raise StructuralSchemaError(f"recursive type {' -> '.join((*stack, name))} cannot be structural")
            target = resolve(deepcopy(defs[name]), (*stack, name))
            node = merge(target, node)
            stack = (*stack, name)
        return map_subschemas(node, lambda sub: resolve(sub, stack))

    return resolve(schema, ())


def _is_null(node: Schema) -> bool:
    return node.get("type") == "null"


def collapse_optional(node: Schema) -> Schema:
    """``anyOf: [X, {type: null}]`` (pydantic's ``X | None``) → ``X``; ``default: null`` is dropped.

    Keywords next to the ``anyOf`` (description, default) win over X's. The field stays optional; it
    does not become ``nullable`` (see the module docstring).
    """
    out = dict(node)
    for key in ("anyOf", "oneOf"):
        branches = out.get(key)
        if isinstance(branches, list) and any(_is_null(b) for b in branches):
            rest = [b for b in branches if not _is_null(b)]
            out.pop(key)
            if len(rest) == 1:
                out = merge(rest[0], out)
            elif rest:
                out[key] = rest
    if isinstance(out.get("type"), list):
        types = [t for t in out["type"] if t != "null"]
        out["type"] = types[0] if len(types) == 1 else types
    if "default" in out and out["default"] is None:
        del out["default"]
    return out


def const_to_enum(node: Schema) -> Schema:
    """``const: v`` → ``enum: [v]`` (OpenAPI 3.0 has no ``const``)."""
    if "const" not in node:
        return node
    out = dict(node)
    value = out.pop("const")
    out.setdefault("enum", [value])
    return out


def drop_titles(node: Schema) -> Schema:
    """Remove ``title`` (pydantic's generated "Maxreplicas" adds nothing to ``kubectl explain``)."""
    return {k: v for k, v in node.items() if k != "title"}


def drop_examples(node: Schema) -> Schema:
    """``examples: [a, ...]`` → ``example: a`` (JSONSchemaProps has the singular form only)."""
    if "examples" not in node:
        return node
    out = dict(node)
    examples = out.pop("examples")
    if isinstance(examples, list) and examples:
        out.setdefault("example", examples[0])
    return out


def exclusive_bounds(node: Schema) -> Schema:
    """Numeric ``exclusiveMinimum: n`` (JSON Schema 2020) → ``minimum: n, exclusiveMinimum: true``."""
    out = dict(node)
    for exclusive, inclusive in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        bound = out.get(exclusive)
        if isinstance(bound, (int, float)) and not isinstance(bound, bool):
            out[inclusive] = bound
            out[exclusive] = True
    return out


def open_objects(node: Schema) -> Schema:
    """Drop ``additionalProperties: false`` (forbidden in structural schemas; unknown fields are
    pruned, or rejected by strict field validation, by the API server anyway)."""
    if node.get("additionalProperties") is False:
        return {k: v for k, v in node.items() if k != "additionalProperties"}
    return node


def free_form(node: Schema) -> Schema:
    """A free-form value (``dict[str, Any]``, ``Any``) → ``x-kubernetes-preserve-unknown-fields``.

    ``dict[str, str]`` keeps ``additionalProperties: {type: string}``, which is structural.
    """
    additional = node.get("additionalProperties")
    free_object = node.get("type") == "object" and (additional is True or additional == {})
    untyped = not ({"type", "$ref", "anyOf", "oneOf", "allOf", "enum", "not"} & node.keys())
    if not (free_object or untyped):
        return node
    out = {k: v for k, v in node.items() if k != "additionalProperties"}
    out["x-kubernetes-preserve-unknown-fields"] = True
    return out


def unique_items_to_set(node: Schema) -> Schema:
    """``uniqueItems: true`` (forbidden: quadratic) → ``x-kubernetes-list-type: set``."""
    if "uniqueItems" not in node:
        return node
    out = {k: v for k, v in node.items() if k != "uniqueItems"}
    if node["uniqueItems"]:
        out.setdefault("x-kubernetes-list-type", "set")
    return out


def unwrap_description(node: Schema) -> Schema:
    """Re-flow a docstring's hard-wrapped lines; keep paragraph breaks and ``- `` list items.

    ``kubectl explain`` wraps descriptions to the terminal itself.
    """
    text = node.get("description")
    if not isinstance(text, str) or "\n" not in text:
        return node
    lines: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if lines and lines[-1] and line and not line.startswith("- "):
            lines[-1] += " " + line
        else:
            lines.append(line)
    return {**node, "description": "\n".join(lines)}


def _ordered(mapping: dict[str, Any], order: tuple[str, ...]) -> dict[str, Any]:
    rank = {key: i for i, key in enumerate(order)}
    return dict(sorted(mapping.items(), key=lambda kv: (rank.get(kv[0], len(rank)), kv[0])))


def order_keys(node: Schema) -> Schema:
    """Keywords in a fixed, readable order: description and type first, x-kubernetes-* last; each
    validation rule reads rule, message, then the rest."""
    out = _ordered(node, _KEY_ORDER)
    if "x-kubernetes-validations" in out:
        out["x-kubernetes-validations"] = [
            _ordered(entry, ("rule", "message")) for entry in out["x-kubernetes-validations"]
        ]
    return out


NODE_REWRITES: tuple[NodeRewrite, ...] = (
    collapse_optional,
    const_to_enum,
    drop_titles,
    drop_examples,
    exclusive_bounds,
    open_objects,
    unique_items_to_set,
    free_form,
    unwrap_description,
    order_keys,
)
"""The per-node rewrites, in the order :func:`to_structural` applies them."""


def _rewrite_node(node: Schema) -> Schema:
    for rewrite in NODE_REWRITES:
        node = rewrite(node)
    return node


def to_structural(json_schema: Schema) -> Schema:
    """The structural form of a pydantic ``model_json_schema()``; raises if one cannot be made."""
    schema = rewrite_bottom_up(inline_refs(json_schema), _rewrite_node)
    problems = check(schema)
    if problems:
        raise StructuralSchemaError("not a structural schema:\n  " + "\n  ".join(problems))
    return schema


# --- check ------------------------------------------------------------------------------------------


def _node_problems(node: Schema) -> Iterator[str]:
    unknown = sorted(set(node) - ALLOWED_KEYWORDS)
    if unknown:
        yield f"unsupported keywords {unknown}"
    preserve = node.get("x-kubernetes-preserve-unknown-fields") is True
    if "type" not in node and not preserve and not node.get("x-kubernetes-int-or-string"):
        yield "no type"
    node_type = node.get("type")
    if "type" in node and not isinstance(node_type, str):
        yield f"type must be one string, not {node_type!r}"
    if node_type == "array" and not isinstance(node.get("items"), dict):
        yield "array without items"
    if "properties" in node and "additionalProperties" in node:
        yield "both properties and additionalProperties"
    if node.get("additionalProperties") is False:
        yield "additionalProperties: false"
    if "default" in node and node["default"] is None:
        yield "default: null"
    for key in ("exclusiveMinimum", "exclusiveMaximum"):
        if key in node and not isinstance(node[key], bool):
            yield f"{key} must be a boolean"
    if node.get("x-kubernetes-list-type") == "map":
        items = node.get("items") or {}
        keys = node.get("x-kubernetes-list-map-keys") or []
        missing = [
            k
            for k in keys
            if k not in items.get("required", []) and "default" not in items.get("properties", {}).get(k, {})
        ]
        if not keys or missing:
            yield f"list-type map keys {keys} must be required fields of the items"
    for entry in node.get("x-kubernetes-validations", []):
        if not isinstance(entry.get("rule"), str) or not isinstance(entry.get("message"), str):
            yield f"validation rule without rule or message: {entry!r}"


def _uncorrelatable_transition_rules(node: Schema, path: str = "", correlatable: bool = True) -> Iterator[str]:
    """Transition rules (``oldSelf``) where the API server cannot pair a value with its old value.

    Only object properties, map values and items of ``x-kubernetes-list-type: map`` lists correlate.
    """
    if not correlatable and any("oldSelf" in e.get("rule", "") for e in node.get("x-kubernetes-validations", [])):
        yield f"{path or '<root>'}: oldSelf in a rule under a list that is not x-kubernetes-list-type: map"
    for name, sub in (node.get("properties") or {}).items():
        yield from _uncorrelatable_transition_rules(sub, f"{path}.{name}", correlatable)
    if isinstance(node.get("additionalProperties"), dict):
        yield from _uncorrelatable_transition_rules(node["additionalProperties"], f"{path}{{}}", correlatable)
    if isinstance(node.get("items"), dict):
        keyed = node.get("x-kubernetes-list-type") == "map"
        yield from _uncorrelatable_transition_rules(node["items"], f"{path}[]", correlatable and keyed)


def check(schema: Schema) -> list[str]:
    """Why ``schema`` is not a structural CRD schema Dockyard can ship: ``path: problem`` lines."""
    problems = [
        f"{path or '<root>'}: {problem}" for path, node in iter_nodes(schema) for problem in _node_problems(node)
    ]
    return problems + list(_uncorrelatable_transition_rules(schema))
