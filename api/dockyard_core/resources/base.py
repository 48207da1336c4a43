"""Pydantic base classes shared by every API version of Dockyard's custom resources.

- :class:`DockyardModel`: snake_case attributes, exact camelCase wire names, unknown fields rejected,
  attribute docstrings become schema descriptions (what ``kubectl explain`` prints), and class-level
  CEL rules (:attr:`DockyardModel.cel_rules`) both go into the schema and run in pydantic.
- :class:`ListMap` / :class:`ListSet`: Kubernetes list semantics (``x-kubernetes-list-type``) with the
  same uniqueness check in pydantic.
- :class:`ObjectMeta` and :class:`KubeObject`: the envelope of a custom resource.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, ClassVar, Self

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler, model_validator
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

from dockyard_core.resources.cel import Rule, RuleViolation, validations
from dockyard_core.resources.crdinfo import CrdInfo


class DockyardModel(BaseModel):
    """Base of every object inside a Dockyard custom resource."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )

    cel_rules: ClassVar[tuple[Rule, ...]] = ()
    """Rules on this object as a whole: emitted as ``x-kubernetes-validations`` and checked here too."""

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        schema = handler(core_schema)
        if cls.cel_rules:
            target = handler.resolve_ref_schema(schema)
            target["x-kubernetes-validations"] = [r.to_schema() for r in cls.cel_rules]
        return schema

    @model_validator(mode="after")
    def _check_cel_rules(self) -> Self:
        for rule in type(self).cel_rules:
            if rule.check is not None and not rule.check(self):
                raise RuleViolation(rule)
        return self


@dataclass(frozen=True)
class _ListSemantics:
    """Shared machinery of :class:`ListMap` and :class:`ListSet`."""

    def _schema_extra(self) -> dict[str, Any]:
        raise NotImplementedError

    def _identity(self, item: Any) -> Any:
        raise NotImplementedError

    def _check_unique(self, items: list[Any]) -> list[Any]:
        seen: set[Any] = set()
        for item in items:
            identity = self._identity(item)
            if identity in seen:
                raise ValueError(f"duplicate entry {identity!r}")
            seen.add(identity)
        return items

    def __get_pydantic_core_schema__(self, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_after_validator_function(self._check_unique, handler(source))

    def __get_pydantic_json_schema__(self, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        json_schema = handler(schema)
        json_schema.update(self._schema_extra())
        return json_schema


@dataclass(frozen=True)
class ListMap(_ListSemantics):
    """``Annotated[list[Item], ListMap("name")]``: a list keyed by ``name``, like a map.

    Server-side apply merges such lists per key, and both the API server and pydantic reject two
    entries with the same key. Key fields must be required in the item type.
    """

    keys: tuple[str, ...]

    def __init__(self, *keys: str) -> None:
        object.__setattr__(self, "keys", keys)

    def _schema_extra(self) -> dict[str, Any]:
        return {"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [to_camel(k) for k in self.keys]}

    def _identity(self, item: Any) -> Any:
        return tuple(getattr(item, k) for k in self.keys)


@dataclass(frozen=True)
class ListSet(_ListSemantics):
    """``Annotated[list[str], ListSet()]``: a list of unique scalars."""

    def _schema_extra(self) -> dict[str, Any]:
        return {"x-kubernetes-list-type": "set"}

    def _identity(self, item: Any) -> Any:
        return item


class ObjectMeta(DockyardModel):
    """The standard Kubernetes object metadata; fields Dockyard does not model are kept as given.

    Collections default to ``None`` rather than empty, so that a manifest built from scratch never
    sends ``finalizers: []`` or ``labels: {}`` that would overwrite what is stored.
    """

    model_config = ConfigDict(extra="allow")

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: datetime | None = None
    deletion_timestamp: datetime | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    finalizers: list[str] | None = None
    owner_references: list[dict[str, Any]] | None = None


class KubeObject(DockyardModel):
    """A custom resource: ``apiVersion``, ``kind``, ``metadata``, ``spec`` and ``status``.

    Subclasses narrow ``api_version`` and ``kind`` to literals, declare ``spec`` and ``status`` and set
    :attr:`crd`. Build one from what the API server returns with ``Kind.model_validate(body)``; turn it
    back into a manifest with :meth:`to_manifest`.
    """

    crd: ClassVar[CrdInfo]
    """The CRD's names, printer columns and subresources."""

    api_version: str
    kind: str
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)

    def to_manifest(self) -> dict[str, Any]:
        """The object as the API server takes it: camelCase keys, JSON values, unset fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


def field_rules(*rules: Rule) -> Any:
    """Annotation attaching CEL rules to a field: ``Annotated[str, field_rules(immutable("x"))]``."""
    return Field(json_schema_extra=validations(*rules))


def name_check(parts: Callable[[Any], Sequence[str]]) -> Callable[[Any], bool]:
    """Python twin of a root rule ``self.metadata.name == a + '-' + b``.

    An object whose name is not set yet (the facade fills it in from the same parts) passes.
    """

    def check(obj: Any) -> bool:
        name = obj.metadata.name
        return name is None or name == "-".join(parts(obj))

    return check
