"""Guardrails, compiled (docs/guardrails.md): the policies of an app version's ``spec.guardrails`` turned into
checks the runtime runs on each text of a turn: the user's message (``input``), the agent's answer
(``output``), a tool call's arguments (``toolArguments``) and a tool's answer (``toolResults``).

Pure: :func:`compile_guardrails` compiles once (the runtime caches the result with the version, so a turn
compiles nothing) and :meth:`Guardrails.screen` checks one text. Every policy but ``guardModel`` runs here,
synchronously (regular expressions and set lookups: microseconds); a ``guardModel`` policy asks a
:data:`Judge` the caller supplies (the runtime calls the named model). :func:`compile_problems` is what the
version webhook refuses a version for, each problem naming its field.

Policies run in their listed order; a redaction changes the text the next policies see; the first block
ends the checks. An :class:`~dockyard_core.interventions.Intervention`'s reason names the rule that matched
(``denied term #2``), never the text it matched.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonschema
import orjson

from dockyard_core.interventions import Action, Intervention, Stage
from dockyard_core.problems import Problem
from dockyard_core.resources.v1alpha1.guardrails import DEFAULT_BLOCK_MESSAGE, FIELDS_OF, REDACTABLE

STAGES: tuple[Stage, ...] = ("input", "output", "toolArguments", "toolResults")
REDACTED = "[redacted]"
ACTIONS: Mapping[str, Action] = {"block": "block", "redact": "redact", "record": "record"}
WORD = re.compile(r"\w+")

PROMPT_INJECTION_RULES: tuple[tuple[str, str], ...] = (
    ("ignore-instructions", r"\b(ignore|disregard|forget|override|bypass)\b[^.\n]{0,40}\b(previous|prior|above|earlier|"
     r"preceding|all|any|your|the|system)\b[^.\n]{0,20}\b(instructions?|prompts?|rules|directions|guidelines|context)\b"),
    ("reveal-prompt", r"\b(reveal|show|print|repeat|output|tell me|display|leak)\b[^.\n]{0,30}\b(system|hidden|"
     r"initial|original|secret)\s+(prompt|instructions?|message)"),
    ("role-override", r"\byou\s+are\s+(now|no\s+longer)\b|\bfrom\s+now\s+on\s+you\b|\bpretend\s+(to\s+be|you\s+are)\b"),
    ("jailbreak", r"\b(jailbreak|jailbroken|developer\s+mode|DAN\s+mode|do\s+anything\s+now|no\s+restrictions|"
     r"without\s+(any\s+)?(restrictions|limits|filters))\b"),
    ("chat-markup", r"<\|(im_start|im_end|system|endoftext|start_header_id)\|>|\[/?INST\]|^\s*#{2,}\s*(system|"
     r"instructions?)\s*:?\s*$|^\s*system\s*:"),
    ("new-instructions", r"\b(new|updated|real|actual)\s+(instructions?|system\s+prompt)\s*:"),
)  # fmt: skip
"""The prompt-injection screen: known phrasings of instruction overrides, prompt extraction, role changes,
jailbreaks and chat-template markup smuggled into a text (docs/guardrails.md lists them)."""
_INJECTION = tuple((name, re.compile(rule, re.IGNORECASE | re.MULTILINE)) for name, rule in PROMPT_INJECTION_RULES)


class GuardrailsError(ValueError):
    """Guardrails that do not compile (each :class:`Problem` names its field)."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        super().__init__("; ".join(str(p) for p in problems))
        self.problems = tuple(problems)


@dataclass(frozen=True)
class Match:
    """What one policy found in one text: why (never the matched value), and the text redacted (redact only)."""

    reason: str
    redacted: str | None = None


@dataclass(frozen=True)
class Verdict:
    """A guard model's answer: allowed or not, and its reason."""

    allow: bool
    reason: str


Judge = Callable[["Policy", Stage, str], Awaitable[Verdict]]
"""Asks a ``guardModel`` policy's model about a text (the runtime's)."""


@dataclass(frozen=True)
class Policy:
    """One compiled policy. ``check`` is None for a guardModel policy (its :data:`Judge` decides)."""

    name: str
    type: str
    stages: frozenset[str]
    action: Action
    message: str
    check: Callable[[str], Match | None] | None = None
    model: str = ""
    instructions: str = ""


@dataclass
class Screened:
    """A text after the policies of one stage: the text to go on with (redacted where a policy redacted),
    what acted on it, and the block (its message is the turn's answer) when one blocked."""

    text: str
    interventions: list[Intervention] = field(default_factory=list)
    blocked: str | None = None
    """The block message, when a policy blocked."""


@dataclass(frozen=True)
class Guardrails:
    """An app version's compiled guardrails."""

    block_message: str
    policies: tuple[Policy, ...]
    by_stage: Mapping[Stage, tuple[Policy, ...]]

    def applies(self, stage: Stage) -> bool:
        return bool(self.by_stage.get(stage))

    def judged(self, stage: Stage) -> bool:
        """Whether a guard model runs at ``stage``."""
        return any(p.check is None for p in self.by_stage.get(stage, ()))

    async def screen(self, stage: Stage, text: str, *, judge: Judge | None = None, tool: str = "") -> Screened:
        """Run the policies of ``stage`` on ``text`` in order (a guard model through ``judge``)."""
        out = Screened(text)
        for policy in self.by_stage.get(stage, ()):
            if policy.check is not None:
                found = policy.check(out.text)
            else:
                if judge is None:
                    raise RuntimeError(f"guard model policy {policy.name} needs a judge")
                verdict = await judge(policy, stage, out.text)
                found = None if verdict.allow else Match(f"guard model: {verdict.reason}")
            if found is not None and self._act(policy, found, out, stage, tool):
                break
        return out

    def screen_local(self, stage: Stage, text: str, *, tool: str = "") -> Screened:
        """:meth:`screen` for a stage without a guard model: no await, for the hot path."""
        out = Screened(text)
        for policy in self.by_stage.get(stage, ()):
            found = policy.check(out.text) if policy.check is not None else None
            if found is not None and self._act(policy, found, out, stage, tool):
                break
        return out

    def _act(self, policy: Policy, found: Match, out: Screened, stage: Stage, tool: str) -> bool:
        """Record what ``policy`` found and apply its action to ``out``; True when it blocked (the end)."""
        out.interventions.append(Intervention(policy.name, stage, policy.action, found.reason[:512], tool))
        if policy.action == "block":
            out.blocked = policy.message or self.block_message
            return True
        if policy.action == "redact" and found.redacted is not None:
            out.text = found.redacted
        return False


# --- compiling ---------------------------------------------------------------------------------------


def _phrase_regex(phrase: str) -> str:
    return r"\s+".join(re.escape(w) for w in phrase.split())


def _terms(terms: Sequence[str], redact: bool) -> Callable[[str], Match | None]:
    index = {" ".join(t.lower().split()): i for i, t in reversed(list(enumerate(terms)))}
    alternation = "|".join(_phrase_regex(t) for t in sorted(terms, key=len, reverse=True))
    regex = re.compile(rf"(?<!\w)(?:{alternation})(?!\w)", re.IGNORECASE)

    def check(text: str) -> Match | None:
        found = regex.search(text)
        if found is None:
            return None
        which = index.get(" ".join(found.group(0).lower().split()), 0)
        count = len(regex.findall(text)) if redact else 1
        reason = f"denied term #{which + 1}" + (f" ({count} matches)" if count > 1 else "")
        return Match(reason, regex.sub(REDACTED, text) if redact else None)

    return check


def _topics(topics: Sequence[Mapping[str, Any]]) -> Callable[[str], Match | None]:
    compiled = [
        (str(t.get("name")), [frozenset(w.lower() for w in WORD.findall(str(p))) for p in t.get("phrases") or ()])
        for t in topics
    ]

    def check(text: str) -> Match | None:
        words = set(WORD.findall(text.lower()))
        for name, phrases in compiled:
            for i, phrase in enumerate(phrases):
                if phrase and phrase <= words:
                    return Match(f"denied topic {name} (phrase #{i + 1})")
        return None

    return check


def _patterns(regexes: Sequence[re.Pattern[str]], redact: bool) -> Callable[[str], Match | None]:
    def check(text: str) -> Match | None:
        hits = [i for i, r in enumerate(regexes) if r.search(text) is not None]
        if not hits:
            return None
        reason = "pattern " + ", ".join(f"#{i + 1}" for i in hits)
        if not redact:
            return Match(reason)
        for i in hits:
            text = regexes[i].sub(REDACTED, text)
        return Match(reason, text)

    return check


def _max_length(limit: int) -> Callable[[str], Match | None]:
    def check(text: str) -> Match | None:
        if len(text) <= limit:
            return None
        return Match(f"{len(text)} characters, over the limit of {limit}", text[:limit])

    return check


def _output_schema(schema: Mapping[str, Any]) -> Callable[[str], Match | None]:
    validator = jsonschema.Draft202012Validator(schema)
    fence = re.compile(r"^\s*```(?:json)?\s*\n(.*)\n\s*```\s*$", re.DOTALL)

    def check(text: str) -> Match | None:
        body = fence.match(text)
        try:
            document = orjson.loads((body.group(1) if body else text).strip())
        except orjson.JSONDecodeError:
            return Match("the answer is not a JSON document")
        error = jsonschema.exceptions.best_match(validator.iter_errors(document))
        if error is None:
            return None
        where = "/".join(str(p) for p in error.absolute_path) or "(the document)"
        return Match(f"the answer does not match the schema: {where} fails {error.validator}")

    return check


def _injection(text: str) -> Match | None:
    for name, rule in _INJECTION:
        if rule.search(text) is not None:
            return Match(f"prompt injection: {name}")
    return None


def _policy_problems(i: int, policy: Mapping[str, Any]) -> tuple[list[Problem], list[re.Pattern[str]]]:
    at = f"spec.guardrails.policies[{i}]"
    problems: list[Problem] = []
    kind, action = str(policy.get("type")), str(policy.get("action") or "block")
    if kind not in (*FIELDS_OF, "promptInjection"):
        problems.append(Problem(f"{at}.type", f"unknown policy type {kind!r}"))
    needed = FIELDS_OF.get(kind)
    if needed is not None and policy.get(needed) in (None, [], {}, ""):
        problems.append(Problem(f"{at}.{needed}", f"a {kind} policy needs {needed}"))
    if action not in ("block", "redact", "record"):
        problems.append(Problem(f"{at}.action", f"unknown action {action!r} (block, redact or record)"))
    elif action == "redact" and kind not in REDACTABLE:
        problems.append(Problem(f"{at}.action", f"a {kind} policy cannot redact: block or record"))
    stages = list(policy.get("appliesTo") or ("input", "output"))
    for j, stage in enumerate(stages):
        if stage not in STAGES:
            problems.append(Problem(f"{at}.appliesTo[{j}]", f"unknown stage {stage!r} ({', '.join(STAGES)})"))
    if kind == "outputSchema" and stages != ["output"]:
        problems.append(Problem(f"{at}.appliesTo", "an outputSchema policy applies to the output only"))
    regexes: list[re.Pattern[str]] = []
    if kind == "pattern":
        for j, pattern in enumerate(policy.get("patterns") or ()):
            try:
                regex = re.compile(str(pattern))
            except re.error as exc:
                problems.append(Problem(f"{at}.patterns[{j}]", f"not a valid regular expression: {exc}"))
                continue
            if regex.search("") is not None:
                problems.append(Problem(f"{at}.patterns[{j}]", "matches the empty text, so it would match every text"))
            regexes.append(regex)
    if kind == "outputSchema" and isinstance(policy.get("schema"), Mapping):
        try:
            jsonschema.Draft202012Validator.check_schema(policy["schema"])
        except jsonschema.exceptions.SchemaError as exc:
            where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in exc.absolute_path)
            problems.append(Problem(f"{at}.schema{where}", f"not a valid JSON Schema: {exc.message[:300]}"))
    if kind == "deniedTopics":
        for j, topic in enumerate(policy.get("topics") or ()):
            for k, phrase in enumerate(topic.get("phrases") or ()):
                if not WORD.search(str(phrase)):
                    problems.append(Problem(f"{at}.topics[{j}].phrases[{k}]", "a phrase needs at least one word"))
    return problems, regexes


def compile_problems(spec: Mapping[str, Any] | None) -> list[Problem]:
    """What makes ``spec.guardrails`` (``spec``) impossible to compile, each problem with its field; empty:
    it compiles. Guard models are not looked up here (the webhook checks them against the namespace)."""
    problems: list[Problem] = []
    names: set[str] = set()
    for i, policy in enumerate((spec or {}).get("policies") or ()):
        name = str(policy.get("name") or "")
        if name in names:
            problems.append(Problem(f"spec.guardrails.policies[{i}].name", f"policy names must be unique: {name}"))
        names.add(name)
        problems += _policy_problems(i, policy)[0]
    return problems


def compile_guardrails(spec: Mapping[str, Any] | None) -> Guardrails | None:
    """``spec.guardrails`` compiled; None when there are no policies. Raises :class:`GuardrailsError`."""
    policies_spec = list((spec or {}).get("policies") or ())
    if not policies_spec:
        return None
    problems = compile_problems(spec)
    if problems:
        raise GuardrailsError(problems)
    policies = []
    for i, raw in enumerate(policies_spec):
        kind, action = str(raw["type"]), str(raw.get("action") or "block")
        redact = action == "redact"
        check: Callable[[str], Match | None] | None
        if kind == "deniedTerms":
            check = _terms([str(t) for t in raw["terms"]], redact)
        elif kind == "deniedTopics":
            check = _topics(raw["topics"])
        elif kind == "pattern":
            check = _patterns(_policy_problems(i, raw)[1], redact)
        elif kind == "maxLength":
            check = _max_length(int(raw["maxChars"]))
        elif kind == "outputSchema":
            check = _output_schema(raw["schema"])
        elif kind == "promptInjection":
            check = _injection
        else:
            check = None
        policies.append(
            Policy(
                name=str(raw["name"]),
                type=kind,
                stages=frozenset(raw.get("appliesTo") or ("input", "output")),
                action=ACTIONS[action],
                message=str(raw.get("message") or ""),
                check=check,
                model=str(raw.get("model") or ""),
                instructions=str(raw.get("instructions") or ""),
            )
        )
    by_stage: dict[Stage, tuple[Policy, ...]] = {
        stage: tuple(p for p in policies if stage in p.stages) for stage in STAGES
    }
    return Guardrails(str((spec or {}).get("blockMessage") or DEFAULT_BLOCK_MESSAGE), tuple(policies), by_stage)


def header_value(interventions: Sequence[Intervention], limit: int = 1024) -> str:
    """The ``X-Dockyard-Guardrails`` header: ``<action>=<stage>:<policy>`` per intervention, comma-separated
    (``block=input:no-competitors, redact=output:pii``), cut at ``limit`` characters."""
    parts = []
    for item in interventions:
        tool = f"({item.tool})" if item.tool else ""
        parts.append(f"{item.action}={item.stage}:{item.policy}{tool}")
    value = ", ".join(parts)
    return value if len(value) <= limit else value[: limit - 3] + "..."
