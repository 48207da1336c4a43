"""CEL validation rules (``x-kubernetes-validations``), each declared once with its Python twin.

The API server evaluates the CEL expression; pydantic evaluates :attr:`Rule.check`, so the facade and
the operator reject the same objects without a round trip. Transition rules (those that read
``oldSelf``, e.g. immutability) compare an update with the stored object, which a lone pydantic model
cannot see; they carry no Python check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Reason = Literal["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"]


@dataclass(frozen=True)
class Rule:
    """One ``x-kubernetes-validations`` entry."""

    rule: str
    """The CEL expression; ``self`` is the value of the schema node the rule is attached to."""
    message: str
    """What the API server (and pydantic) report when the rule fails."""
    check: Callable[[Any], bool] | None = None
    """The same rule in Python, given the validated pydantic model; ``None`` only for transition rules."""
    field_path: str | None = None
    """Where the API server reports the error, relative to ``self`` (e.g. ``.maxReplicas``)."""
    reason: Reason | None = None
    """The machine-readable reason the API server reports (default ``FieldValueInvalid``)."""

    def __post_init__(self) -> None:
        if self.check is None and not self.is_transition:
            raise ValueError(f"CEL rule {self.rule!r} needs a Python check (only transition rules may omit it)")

    @property
    def is_transition(self) -> bool:
        """Whether the rule compares with the stored object (reads ``oldSelf``)."""
        return "oldSelf" in self.rule

    def to_schema(self) -> dict[str, str]:
        """The ``x-kubernetes-validations`` entry."""
        entry = {"rule": self.rule, "message": self.message}
        if self.field_path is not None:
            entry["fieldPath"] = self.field_path
        if self.reason is not None:
            entry["reason"] = self.reason
        return entry


class RuleViolation(ValueError):
    """A failed :class:`Rule` in pydantic: the message, and the field the API server would name."""

    def __init__(self, rule: Rule) -> None:
        super().__init__(rule.message)
        self.rule = rule

    @property
    def field_path(self) -> tuple[str, ...]:
        """The rule's fieldPath as path segments (``.minReplicas`` -> ``("minReplicas",)``)."""
        return tuple(p for p in (self.rule.field_path or "").split(".") if p)


def validations(*rules: Rule) -> dict[str, Any]:
    """``json_schema_extra`` that attaches ``rules`` to a field's schema."""
    return {"x-kubernetes-validations": [r.to_schema() for r in rules]}


def immutable(field: str, hint: str = "") -> Rule:
    """The transition rule that forbids changing a field once the object exists.

    Attach it to the field itself (``Field(json_schema_extra=validations(immutable("x")))``); the API
    server then reports ``spec.x: Invalid value: ...: x is immutable``. A field-level transition rule
    only runs when the field is present in both the old and the new object, so an optional field also
    needs a presence rule on its parent.
    """
    message = f"{field} is immutable" + (f": {hint}" if hint else "")
    return Rule("self == oldSelf", message)
