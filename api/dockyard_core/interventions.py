"""What a guardrail or the PII protection did to a turn (docs/guardrails.md): the record the runtime
builds, the execute answer reports, the store keeps (without the values it acted on) and the console and
metrics show. Pure data: the runtime produces these, the store and the console read them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Stage = Literal["input", "output", "toolArguments", "toolResults"]
"""Where the check ran: the user's message, the agent's answer, a tool call's arguments, a tool's result."""

Action = Literal["block", "redact", "record"]
"""What it did: refused the text (the turn answers with the block message), replaced the offending parts,
or only recorded that it matched."""

REASON_LIMIT = 512


@dataclass(frozen=True)
class Intervention:
    """One policy acting on one text of a turn. ``reason`` never contains the matched value: it says which
    rule matched (``denied term #2``, ``EMAIL_ADDRESS x2``, ``guard model: <its reason>``)."""

    policy: str
    """The policy's name (``spec.guardrails.policies[].name``), or ``pii`` for the environment's PII redaction."""
    stage: Stage
    action: Action
    reason: str
    tool: str = ""
    """The tool whose arguments or result were checked (toolArguments / toolResults only)."""

    def as_json(self) -> dict[str, str]:
        body = {"policy": self.policy, "stage": self.stage, "action": self.action, "reason": self.reason}
        if self.tool:
            body["tool"] = self.tool
        return body
