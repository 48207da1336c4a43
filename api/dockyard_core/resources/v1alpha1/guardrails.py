"""Guardrails of an app (``spec.guardrails`` of an App's draft and of an AppVersion): policies the runtime
applies to the user's message, the agent's answer and the tool calls of every turn (docs/guardrails.md).

The schema's own rules (CEL, checked by the API server and by pydantic alike) refuse what can be seen
without compiling: a policy without the fields of its type, an action its type cannot take, an output
schema on another stage. What needs compiling (a regular expression, a JSON Schema) or another object
(the guard model's ModelDeployment) is checked by the version webhook
(:func:`dockyard_core.guardrails.compile_problems`).
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Literal

from pydantic import Field

from dockyard_core.resources.base import DockyardModel, ListMap, ListSet
from dockyard_core.resources.cel import Rule
from dockyard_core.resources.v1alpha1.common import DnsLabel

PolicyType = Literal[
    "deniedTerms", "deniedTopics", "pattern", "maxLength", "outputSchema", "promptInjection", "guardModel"
]
GuardStage = Literal["input", "output", "toolArguments", "toolResults"]
GuardAction = Literal["block", "redact", "record"]

DEFAULT_STAGES: tuple[GuardStage, ...] = ("input", "output")
REDACTABLE = ("deniedTerms", "pattern", "maxLength")
"""The types that can redact (replace what matched, or cut the text); the others block or record."""
FIELDS_OF: dict[str, str] = {
    "deniedTerms": "terms",
    "deniedTopics": "topics",
    "pattern": "patterns",
    "maxLength": "maxChars",
    "outputSchema": "schema",
    "guardModel": "model",
}
"""The field each type needs (promptInjection needs none)."""
DEFAULT_BLOCK_MESSAGE = "Sorry, I can't help with that request."

Phrase = Annotated[str, Field(min_length=1, max_length=256)]
Pattern = Annotated[str, Field(min_length=1, max_length=1024)]


class DeniedTopic(DockyardModel):
    """A topic the app must not discuss, recognised by its phrases."""

    name: DnsLabel
    """The topic's name (it appears in the intervention's reason)."""
    phrases: Annotated[list[Phrase], Field(min_length=1, max_length=64)]
    """Example phrases or keywords: a text is on the topic when it holds every word of one phrase (in any
    order, whole words, ignoring case)."""


def _has_fields(policy: GuardrailPolicy) -> bool:
    field = FIELDS_OF.get(policy.type)
    return field is None or policy.model_dump(by_alias=True).get(field) not in (None, [], {})


def _action_fits(policy: GuardrailPolicy) -> bool:
    return policy.action != "redact" or policy.type in REDACTABLE


def _output_only(policy: GuardrailPolicy) -> bool:
    return policy.type != "outputSchema" or list(policy.applies_to) == ["output"]


class GuardrailPolicy(DockyardModel):
    """One policy: what it checks (``type`` and that type's fields), where (``appliesTo``), and what it does
    when the text matches (``action``)."""

    cel_rules: ClassVar[tuple[Rule, ...]] = (
        Rule(
            "(self.type != 'deniedTerms' || has(self.terms)) && (self.type != 'deniedTopics' || has(self.topics))"
            " && (self.type != 'pattern' || has(self.patterns)) && (self.type != 'maxLength' || has(self.maxChars))"
            " && (self.type != 'outputSchema' || has(self.schema)) && (self.type != 'guardModel' || has(self.model))",
            "a policy needs the field of its type: deniedTerms terms, deniedTopics topics, pattern patterns, "
            "maxLength maxChars, outputSchema schema, guardModel model",
            check=_has_fields,
            reason="FieldValueRequired",
        ),
        Rule(
            "!has(self.action) || self.action != 'redact' || self.type in ['deniedTerms', 'pattern', 'maxLength']",
            "action redact is for deniedTerms, pattern and maxLength policies only (the others block or record)",
            check=_action_fits,
            field_path=".action",
        ),
        Rule(
            "self.type != 'outputSchema' || (has(self.appliesTo) && self.appliesTo == ['output'])",
            "an outputSchema policy applies to the output only: set appliesTo: [output]",
            check=_output_only,
            field_path=".appliesTo",
        ),
    )

    name: DnsLabel
    """The policy's name, unique in the app (interventions and metrics name it)."""
    type: PolicyType
    """What the policy checks: deniedTerms, deniedTopics, pattern, maxLength, outputSchema, promptInjection or
    guardModel (docs/guardrails.md)."""
    applies_to: Annotated[list[GuardStage], Field(min_length=1, max_length=4), ListSet()] = Field(
        default_factory=lambda: list(DEFAULT_STAGES)
    )
    """Where it runs: input (the user's message), output (the agent's answer), toolArguments (each tool call's
    arguments), toolResults (each tool's answer). Default input and output."""
    action: GuardAction = "block"
    """block: the turn answers the block message instead; redact: the matched parts are replaced (deniedTerms,
    pattern) or the text is cut (maxLength); record: the text passes and the intervention is recorded."""
    message: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    """The answer when this policy blocks (default: the guardrails' blockMessage)."""
    terms: Annotated[list[Phrase], Field(min_length=1, max_length=256)] | None = None
    """deniedTerms: words or phrases matched as whole words, ignoring case."""
    topics: Annotated[list[DeniedTopic], Field(min_length=1, max_length=32), ListMap("name")] | None = None
    """deniedTopics: the topics, each with its phrases."""
    patterns: Annotated[list[Pattern], Field(min_length=1, max_length=32)] | None = None
    """pattern: regular expressions (Python syntax); a text matches when any of them is found in it."""
    max_chars: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    """maxLength: the most characters a text may have."""
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    """outputSchema: the JSON Schema (draft 2020-12) the answer must be a JSON document of."""
    model: Annotated[str, Field(min_length=1, max_length=253)] | None = None
    """guardModel: the ModelDeployment (in this namespace) asked for a verdict, by object name or display name."""
    instructions: Annotated[str, Field(max_length=8192)] = ""
    """guardModel: what the guard model must refuse (its system instructions say the rest)."""


class Guardrails(DockyardModel):
    """The app's guardrails: the policies, in the order they run, and the default block message."""

    block_message: Annotated[str, Field(min_length=1, max_length=1024)] = DEFAULT_BLOCK_MESSAGE
    """What a blocked turn answers when the policy that blocked has no message of its own."""
    policies: Annotated[list[GuardrailPolicy], Field(max_length=32), ListMap("name")] = Field(default_factory=list)
    """The policies; at each stage they run in this order and the first block ends the checks."""
