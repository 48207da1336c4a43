"""A problem with an object a webhook or the facade refuses, and the field it is about (pure).

One type for every rule that names fields (an AppVersion's guardrails and evaluation suite, its MCP
servers and agents, a KnowledgeBase): ``Problem("spec.guardrails.policies[1].patterns[0]", "...")``, shown
as ``<field>: <message>`` in a refusal and as a field cause by the management API.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong, and the field it is about."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"
