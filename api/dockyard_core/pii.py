"""PII detection and redaction (docs/guardrails.md, "PII protection"): the Environment's ``spec.pii`` compiled
into a :class:`PiiPolicy` that finds personal data in a text and replaces each value by a placeholder.

Detection is a thin layer over well-kept libraries: a cheap pattern finds the candidates and the library
decides (phone numbers: ``phonenumbers``, valid for their region; payment cards: the Luhn checksum and a
card network's prefix and length; IBANs, and national ids: ``python-stdnum``'s checksums and formats); e-mail and IP
addresses by their syntax (``ipaddress``). National ids that are bare digit runs with a weak checksum (a BSN,
a German tax id, a PESEL, an NHS number, an unformatted SSN) count only after a word naming them
(``SSN``, ``BSN``, ``PESEL``, ...), as Presidio's context words do. Custom patterns are regular expressions
(the ``regex`` module) matched with a time limit: a text they cannot finish in time is withheld whole.

A placeholder is ``<ENTITY_xxxxxx>``: six hex digits of an HMAC-SHA256, keyed with the namespace's PII key
(:func:`pii_key`), of the session, the entity and the value in a normal form (an e-mail in lower case, a
phone number in E.164, a card's digits). The same value gets the same placeholder within a session (the
agent can follow the conversation), another one in another session, and no mapping is kept anywhere: what
was redacted cannot be recovered from what is stored.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import phonenumbers
import regex

from dockyard_core.pii_detectors import (
    DEFAULT_ENTITIES,
    DEFAULT_PHONE_REGIONS,
    ENTITIES,
    Detector,
    PiiEntity,
    detectors,
)

__all__ = [
    "DEFAULT_ENTITIES",
    "DEFAULT_PHONE_REGIONS",
    "ENTITIES",
    "PiiEntity",
    "PiiPolicy",
    "PiiSpecError",
    "Redacted",
    "pii_key",
    "spec_problems",
]

CUSTOM_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,39}$")
PATTERN_MAX_CHARS = 512
CUSTOM_TIMEOUT_S = 0.05
"""How long one custom pattern may take over one text (the ``regex`` module checks it as it goes)."""
PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*_[0-9a-f]{6}>")
CONTEXT_CHARS = 48


@dataclass(frozen=True)
class Redacted:
    """A text with its PII replaced, and how many values of each entity were (never the values)."""

    text: str
    found: Mapping[str, int] = field(default_factory=dict)
    withheld: bool = False
    """A custom pattern could not finish in time: the whole text was replaced (fail closed)."""

    @property
    def count(self) -> int:
        return sum(self.found.values())


class PiiSpecError(ValueError):
    """``spec.pii`` cannot be compiled; ``field`` names where (``spec.pii.customPatterns[1].pattern``)."""

    def __init__(self, field_path: str, message: str) -> None:
        super().__init__(f"{field_path}: {message}")
        self.field = field_path
        self.message = message


class PatternTimeout(Exception):
    """A custom pattern did not finish within CUSTOM_TIMEOUT_S on a text."""

    def __init__(self, name: str) -> None:
        super().__init__(f"custom pattern {name} did not finish in {CUSTOM_TIMEOUT_S} s")
        self.name = name


def pii_key(signing_key: bytes) -> bytes:
    """The key placeholders are derived from, derived from the namespace's widget signing key (a separate
    key: a placeholder reveals nothing about the signing key, and a token nothing about placeholders)."""
    return hmac.new(signing_key, b"dockyard/pii-placeholders/v1", hashlib.sha256).digest()


def placeholder(key: bytes, session: str, entity: str, value: str) -> str:
    digest = hmac.new(key, f"{session}\x00{entity}\x00{value}".encode(), hashlib.sha256).hexdigest()
    return f"<{entity}_{digest[:6]}>"


@dataclass(frozen=True)
class CustomPattern:
    name: str
    pattern: regex.Pattern[str]


@dataclass(frozen=True)
class Span:
    """A value found: where, its entity and its normal form."""

    start: int
    end: int
    entity: str
    value: str
    priority: float
    distance: int = 0
    """How far before it the word naming it stands (detectors that need one)."""


class PiiPolicy:
    """The compiled ``spec.pii`` of an Environment: what to recognise, and where the runtime redacts."""

    def __init__(
        self,
        entities: tuple[str, ...] = DEFAULT_ENTITIES,
        *,
        phone_regions: tuple[str, ...] = DEFAULT_PHONE_REGIONS,
        custom: tuple[CustomPattern, ...] = (),
        storage: bool = True,
        model: bool = False,
        tools: bool = False,
        answer: bool = False,
    ) -> None:
        self.entities = entities
        self.custom = custom
        self.redact_storage, self.redact_model, self.redact_tools, self.redact_answer = storage, model, tools, answer
        self._detectors: tuple[Detector, ...] = detectors(frozenset(entities), phone_regions)

    @classmethod
    def compile(cls, spec: Mapping[str, Any] | None) -> PiiPolicy | None:
        """``spec.pii`` as stored (camelCase); None when it is absent (PII protection not configured).
        Raises :class:`PiiSpecError` naming the field that cannot be used. Compiled policies are cached."""
        if spec is None:
            return None
        return _compile_cached(json.dumps(spec, sort_keys=True, default=str))

    def redact(self, text: str, *, key: bytes, session: str) -> Redacted:
        """``text`` with each recognised value replaced by its placeholder (placeholders already in the text
        are left alone, so redacting twice changes nothing)."""
        if not text:
            return Redacted(text)
        try:
            spans = self.find(text)
        except PatternTimeout as timeout:
            return Redacted(f"<{timeout.name}_UNCHECKED>", {timeout.name: 1}, withheld=True)
        if not spans:
            return Redacted(text)
        out: list[str] = []
        found: dict[str, int] = {}
        at = 0
        for span in spans:
            out += [text[at : span.start], placeholder(key, session, span.entity, span.value)]
            found[span.entity] = found.get(span.entity, 0) + 1
            at = span.end
        out.append(text[at:])
        return Redacted("".join(out), found)

    def find(self, text: str) -> list[Span]:
        """The values found, in text order, without overlaps (:class:`PatternTimeout`: a custom pattern ran
        longer than CUSTOM_TIMEOUT_S)."""
        taken = [Span(m.start(), m.end(), "", "", -1) for m in PLACEHOLDER.finditer(text)]
        candidates: list[Span] = []
        for custom in self.custom:
            try:
                matches = list(custom.pattern.finditer(text, timeout=CUSTOM_TIMEOUT_S))
            except TimeoutError:
                raise PatternTimeout(custom.name) from None
            candidates += [Span(m.start(), m.end(), custom.name, m.group(0).strip(), 0) for m in matches if m.group(0)]
        lowered: str | None = None
        for d in self._detectors:
            for m in d.candidates.finditer(text):
                distance = 0
                if d.context:  # the nearest naming word counts (an SSN named just before a BSN is no BSN)
                    lowered = lowered if lowered is not None else text.lower()
                    window = lowered[max(0, m.start() - CONTEXT_CHARS) : m.start()]
                    distance = min((len(window) - window.rfind(w) for w in d.context if w in window), default=-1)
                    if distance < 0:
                        continue
                matched = m.group(0)
                if d.not_after is not None and matched.isdigit():
                    lowered = lowered if lowered is not None else text.lower()
                    if d.not_after.search(lowered[max(0, m.start() - 32) : m.start()]):
                        continue
                value = d.normalise(matched)
                while value is None and d.shrink and " " in matched:
                    matched = matched.rsplit(" ", 1)[0].rstrip(" -./")
                    value = d.normalise(matched)
                if value is not None:
                    candidates.append(Span(m.start(), m.start() + len(matched), d.entity, value, d.priority, distance))
                elif d.blocks is not None:  # shaped like one but not one: what ranks after it is not inside it
                    candidates.append(Span(m.start(), m.end(), "", "", d.blocks))
        chosen: list[Span] = []
        for span in sorted(candidates, key=lambda s: (s.priority, s.start - s.end, s.distance, s.start)):
            if not any(span.start < t.end and t.start < span.end for t in taken):
                taken.append(span)
                if span.entity:
                    chosen.append(span)
        return sorted(chosen, key=lambda s: s.start)


def pattern_problem(pattern: str) -> str | None:
    """Why a custom pattern cannot be used (None: it can)."""
    if not pattern:
        return "must not be empty"
    if len(pattern) > PATTERN_MAX_CHARS:
        return f"must be at most {PATTERN_MAX_CHARS} characters"
    try:
        compiled = regex.compile(pattern)
    except regex.error as exc:
        return f"is not a valid regular expression: {exc}"
    if compiled.fullmatch(""):
        return "matches the empty text: it must match at least one character"
    return None


def spec_problems(spec: Mapping[str, Any] | None, prefix: str = "spec.pii") -> list[tuple[str, str]]:
    """What in ``spec.pii`` cannot be compiled, as (field, message); empty when all can."""
    if not spec:
        return []
    problems: list[tuple[str, str]] = []
    for i, entity in enumerate(spec.get("entities") or ()):
        if entity not in ENTITIES:
            problems.append((f"{prefix}.entities[{i}]", f"unknown entity {entity!r} (one of {', '.join(ENTITIES)})"))
    names: set[str] = set()
    for i, item in enumerate(spec.get("customPatterns") or ()):
        name, pattern = str((item or {}).get("name") or ""), (item or {}).get("pattern")
        if not CUSTOM_NAME.match(name):
            problems.append((f"{prefix}.customPatterns[{i}].name", "must be 1-40 of A-Z, 0-9 and _, from a letter"))
        elif name in ENTITIES or name in names:
            problems.append((f"{prefix}.customPatterns[{i}].name", f"{name} is already an entity's name"))
        names.add(name)
        problem = pattern_problem(pattern) if isinstance(pattern, str) else "must be a string"
        if problem:
            problems.append((f"{prefix}.customPatterns[{i}].pattern", problem))
    for i, region in enumerate(spec.get("phoneRegions") or ()):
        if region not in phone_regions():
            problems.append((f"{prefix}.phoneRegions[{i}]", f"{region!r} is not a region phone numbers know"))
    return problems


def phone_regions() -> frozenset[str]:
    """The regions whose phone numbers ``phonenumbers`` knows."""
    return frozenset(phonenumbers.SUPPORTED_REGIONS)


@lru_cache(maxsize=256)
def _compile_cached(spec_json: str) -> PiiPolicy:
    spec: dict[str, Any] = json.loads(spec_json)
    problems = spec_problems(spec)
    if problems:
        raise PiiSpecError(*problems[0])
    redact = spec.get("redact") or {}
    custom = tuple(CustomPattern(c["name"], regex.compile(c["pattern"])) for c in spec.get("customPatterns") or ())
    entities = spec.get("entities")
    return PiiPolicy(
        tuple(entities) if entities is not None else DEFAULT_ENTITIES,
        phone_regions=tuple(regions) if (regions := spec.get("phoneRegions")) is not None else DEFAULT_PHONE_REGIONS,
        custom=custom,
        storage=bool(redact.get("storage", True)),
        model=bool(redact.get("model", False)),
        tools=bool(redact.get("tools", False)),
        answer=bool(redact.get("answer", False)),
    )
