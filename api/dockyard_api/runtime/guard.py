"""The guardrails and the PII protection of one turn (docs/guardrails.md).

A :class:`TurnGuard` is made for a turn whose version has guardrails or whose environment has PII settings
(``spec.pii``), and none otherwise (a turn without either costs nothing here). It screens, in order:

- ``input``: the user's message: the input policies (on the text as sent), then the PII redaction: the
  stored message is redacted when ``redact.storage``, the model's when ``redact.model``;
- ``toolArguments``: each tool call's arguments (the JSON text the model wrote): the policies, then the PII
  redaction when ``redact.tools``;
- ``toolResults``: each tool's answer: the policies, then the PII redaction when ``redact.tools`` or
  ``redact.model``;
- the history the model reads is redacted when ``redact.model`` (and not already, by ``redact.storage``);
- ``output``: the agent's answer: the policies, then the PII redaction: the answer when ``redact.answer``,
  the stored reply when ``redact.storage``.

A block at any stage ends the turn: its answer is the block message (:class:`~dockyard_api.runtime.agent.Blocked`).
A ``guardModel`` policy asks its model (the ModelDeployment it names, through the runtime's
:class:`~dockyard_api.runtime.model.ModelClient`) for a verdict constrained to the JSON of
:data:`VERDICT_SCHEMA`; an answer that is not one is a deny (the guard fails closed).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from dockyard_api import metrics
from dockyard_api.runtime.agent import AgentSpec, Blocked
from dockyard_api.runtime.config import AppLookup, EnvironmentView
from dockyard_api.runtime.model import ModelClient, Usage
from dockyard_core.guardrails import Guardrails, Policy, Screened, Verdict
from dockyard_core.interventions import Intervention, Stage
from dockyard_core.pii import PiiPolicy

VERDICT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "verdict": {"type": "string", "enum": ["allow", "deny"]},
        "reason": {"type": "string", "maxLength": 120},
    },
    "required": ["verdict", "reason"],
}
"""What a guard model answers: allow or deny, and why (its output is constrained to this schema)."""
GUARD_MAX_TOKENS = 160
GUARD_SYSTEM = (
    "You are a guardrail. You check one text of a conversation with an AI assistant against the policy below "
    'and answer ONLY a JSON object {"verdict": "allow" or "deny", "reason": "<why, briefly, without '
    'quoting the text>"}. Deny a text that breaks the policy; allow any other.\nPolicy: '
)
STAGE_WORDS = {
    "input": "the user's message",
    "output": "the assistant's answer",
    "toolArguments": "the arguments of a tool call",
    "toolResults": "a tool's answer",
}


def guard_request(params: dict[str, Any], policy: Policy, stage: Stage, text: str) -> dict[str, Any]:
    """The chat completion a guard model is asked: the policy's instructions as the system message, the text
    as the user's, the answer constrained to :data:`VERDICT_SCHEMA` (``response_format`` json_object with a
    schema: llama.cpp's grammar). The ModelDeployment's sampling parameters apply but for its token limit
    and stop sequences, which could cut the JSON."""
    body = {k: v for k, v in params.items() if k not in ("max_tokens", "stop")}
    return {
        **body,
        "messages": [
            {"role": "system", "content": GUARD_SYSTEM + (policy.instructions or "nothing harmful or abusive")},
            {"role": "user", "content": f"Check {STAGE_WORDS[stage]}:\n\n{text}"},
        ],
        "response_format": {"type": "json_object", "schema": VERDICT_SCHEMA},
        "max_tokens": GUARD_MAX_TOKENS,
    }


def parse_verdict(content: str) -> Verdict:
    """A guard model's answer; anything but a verdict is a deny (the guard fails closed). Raw control
    characters inside its strings are tolerated: a grammar works on tokens, and a token may hold a newline."""
    try:
        answer = json.loads(content, strict=False)
    except ValueError:
        return Verdict(False, "the guard model's answer is not a verdict")
    if not isinstance(answer, dict) or answer.get("verdict") not in ("allow", "deny"):
        return Verdict(False, "the guard model's answer is not a verdict")
    reason = answer.get("reason")
    return Verdict(answer["verdict"] == "allow", " ".join(str(reason or "no reason given").split())[:200])


@dataclass
class TurnGuard:
    """The guardrails (``guardrails``) and PII protection (``pii`` with its ``key``) of one turn."""

    env: EnvironmentView
    session: str
    guardrails: Guardrails | None
    pii: PiiPolicy | None
    key: bytes
    lookup: AppLookup
    models: ModelClient
    usage: Usage
    interventions: list[Intervention] = field(default_factory=list)

    @property
    def holds_output(self) -> bool:
        """Whether the answer may change after the model wrote it (so it is not streamed as it comes)."""
        return bool(
            (self.guardrails is not None and self.guardrails.applies("output"))
            or (self.pii is not None and self.pii.redact_answer)
        )

    @property
    def guards_tools(self) -> bool:
        stages: tuple[Stage, ...] = ("toolArguments", "toolResults")
        return bool(
            (self.guardrails is not None and any(self.guardrails.applies(s) for s in stages))
            or (self.pii is not None and (self.pii.redact_tools or self.pii.redact_model))
        )

    async def _judge(self, policy: Policy, stage: Stage, text: str) -> Verdict:
        target = await self.lookup.model_target(
            self.env.namespace, AgentSpec(name=f"guardrail {policy.name}", model=policy.model)
        )
        completion = await self.models.complete(
            target.base_url, guard_request(target.params, policy, stage, text), what=target.what
        )
        self.usage.add(completion)
        verdict = parse_verdict(completion.content)
        if self.pii is not None:  # the model's reason is its own words: never a value the PII protection hides
            verdict = Verdict(verdict.allow, self._redact(verdict.reason))
        return verdict

    async def _policies(self, stage: Stage, text: str, tool: str) -> Screened:
        if self.guardrails is None or not self.guardrails.applies(stage):
            return Screened(text)
        if self.guardrails.judged(stage):
            screened = await self.guardrails.screen(stage, text, judge=self._judge, tool=tool)
        else:
            screened = self.guardrails.screen_local(stage, text, tool=tool)
        for item in screened.interventions:
            self.interventions.append(item)
            metrics.guardrail_intervention(self.env.namespace, self.env.name, item.policy, item.stage, item.action)
        return screened

    def _redact(self, text: str) -> str:
        assert self.pii is not None
        return self.pii.redact(text, key=self.key, session=self.session).text

    def _pii(self, stage: Stage, text: str, tool: str = "") -> str:
        """``text`` with the PII found replaced by placeholders; the intervention and the metrics counted."""
        assert self.pii is not None
        redacted = self.pii.redact(text, key=self.key, session=self.session)
        if redacted.found:
            reason = ", ".join(f"{entity} x{count}" for entity, count in sorted(redacted.found.items()))
            self.interventions.append(Intervention("pii", stage, "redact", reason[:512], tool))
            for entity, count in redacted.found.items():
                metrics.pii_redactions(self.env.namespace, self.env.name, entity, stage, count)
        return redacted.text

    async def input(self, message: str) -> tuple[str, str]:
        """(the message to store, the message the model reads). Raises :class:`Blocked`."""
        screened = await self._policies("input", message, "")
        if screened.blocked is not None:
            stored = self._pii("input", screened.text) if self.pii is not None and self.pii.redact_storage else None
            raise Blocked(screened.blocked, stored if stored is not None else screened.text)
        text = screened.text
        if self.pii is None or not (self.pii.redact_storage or self.pii.redact_model):
            return text, text
        redacted = self._pii("input", text)
        return (redacted if self.pii.redact_storage else text), (redacted if self.pii.redact_model else text)

    async def tool_arguments(self, tool: str, text: str) -> str:
        """The arguments a tool is called with. Raises :class:`Blocked`."""
        screened = await self._policies("toolArguments", text, tool)
        if screened.blocked is not None:
            raise Blocked(screened.blocked)
        if self.pii is not None and self.pii.redact_tools:
            return self._pii("toolArguments", screened.text, tool)
        return screened.text

    async def tool_result(self, tool: str, text: str) -> str:
        """The tool's answer as the model reads it. Raises :class:`Blocked`."""
        screened = await self._policies("toolResults", text, tool)
        if screened.blocked is not None:
            raise Blocked(screened.blocked)
        if self.pii is not None and (self.pii.redact_tools or self.pii.redact_model):
            return self._pii("toolResults", screened.text, tool)
        return screened.text

    def history(self, messages: list[dict[str, str]]) -> list[dict[str, str]]:
        """The stored history as the model reads it (redacted when the store kept it as written)."""
        if self.pii is None or not self.pii.redact_model or self.pii.redact_storage:
            return messages
        return [{**m, "content": self._redact(m["content"])} for m in messages]

    async def output(self, answer: str) -> tuple[str, str, bool]:
        """(the answer, the reply to store, whether a policy blocked it: the answer is the block message)."""
        screened = await self._policies("output", answer, "")
        if screened.blocked is not None:
            return screened.blocked, screened.blocked, True
        text = screened.text
        if self.pii is None or not (self.pii.redact_answer or self.pii.redact_storage):
            return text, text, False
        redacted = self._pii("output", text)
        return (redacted if self.pii.redact_answer else text), (redacted if self.pii.redact_storage else text), False
