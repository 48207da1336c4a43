"""PII detection and redaction (docs/guardrails.md, "PII protection"): the Environment's ``spec.pii`` compiled
into a :class:`PiiPolicy` that finds personal data in a text and replaces each value by a placeholder.

Detection is a thin layer over well-kept libraries: a cheap pattern finds the candidates and the library
decides (phone numbers: ``phonenumbers``, valid for their region; payment cards: the Luhn checksum and a
card network's prefix; IBANs, and national ids: ``python-stdnum``'s checksums and formats); e-mail and IP
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
import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Literal, get_args

import phonenumbers
import regex
from stdnum import iban, luhn
from stdnum.de import idnr
from stdnum.es import dni, nie
from stdnum.fi import hetu
from stdnum.fr import nir
from stdnum.gb import nhs
from stdnum.it import codicefiscale
from stdnum.nl import bsn
from stdnum.pl import pesel
from stdnum.se import personnummer
from stdnum.us import ssn

PiiEntity = Literal[
    "EMAIL_ADDRESS",
    "PHONE_NUMBER",
    "CREDIT_CARD",
    "IBAN_CODE",
    "IP_ADDRESS",
    "US_SSN",
    "UK_NINO",
    "UK_NHS",
    "ES_NIF",
    "ES_NIE",
    "IT_FISCAL_CODE",
    "FR_NIR",
    "DE_TAX_ID",
    "NL_BSN",
    "PL_PESEL",
    "FI_PERSONAL_IDENTITY_CODE",
    "SE_PERSONNUMMER",
]
"""The entities Dockyard recognises (names as Presidio's); custom patterns add their own names."""

ENTITIES: tuple[str, ...] = get_args(PiiEntity)
DEFAULT_ENTITIES: tuple[str, ...] = ("EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS")
"""What ``spec.pii`` without ``entities`` recognises: the kinds every deployment meets; national ids are chosen."""
DEFAULT_PHONE_REGIONS: tuple[str, ...] = ("US", "GB", "DE", "FR", "ES", "IT", "NL")
"""Regions whose national phone numbers (written without +country code) are recognised by default."""

CUSTOM_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,39}$")
PATTERN_MAX_CHARS = 512
CUSTOM_TIMEOUT_S = 0.05
"""How long one custom pattern may take over one text (the ``regex`` module checks it as it goes)."""
PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*_[0-9a-f]{6}>")
CONTEXT_CHARS = 48
"""How far before a weak national id its naming word may stand."""


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


# --- detectors: a candidate pattern and a check that returns the value's normal form (None: not one) ----

Normalise = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Detector:
    entity: str
    candidates: re.Pattern[str]
    normalise: Normalise
    priority: int
    """Lower wins an overlap: checksummed values before phone numbers (a card number also parses as one)."""
    context: tuple[str, ...] = ()
    """Words one of which must stand in the CONTEXT_CHARS before the candidate (empty: none needed)."""


def _std(module: Any) -> Normalise:
    def check(text: str) -> str | None:
        return str(module.compact(text)) if module.is_valid(text) else None

    return check


CARD_PREFIX = re.compile(r"^(4|5[1-5]|2[2-7]|3[47]|3[0689]|6|50|5[6-9]|1)")


def _card(text: str) -> str | None:
    digits = re.sub(r"[ -]", "", text)
    if not 13 <= len(digits) <= 19 or not CARD_PREFIX.match(digits) or not luhn.is_valid(digits):
        return None
    return digits


def _iban(text: str) -> str | None:
    return str(iban.compact(text)) if iban.is_valid(text) else None


def _email(text: str) -> str | None:
    local = text.split("@", 1)[0]
    if local.startswith(".") or local.endswith(".") or ".." in text:
        return None
    return text.lower()


def _ip(text: str) -> str | None:
    try:
        return str(ipaddress.ip_address(text))
    except ValueError:
        return None


NINO_BAD_PREFIXES = {"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"}


def _nino(text: str) -> str | None:
    compact = text.replace(" ", "").upper()
    return None if compact[:2] in NINO_BAD_PREFIXES else compact


DATE_LIKE = re.compile(r"^(\d{4}[-/.]\d{1,2}[-/.]\d{1,2}|\d{1,2}[-/.]\d{1,2}[-/.]\d{2,4})$")


def _as_written(number: str, parsed: phonenumbers.PhoneNumber) -> bool:
    """A national number counts as written in its region's national format (with its trunk prefix, e.g. the
    0 of 020 7946 0958; a NANP number may start with 1): parsing alone also takes a bare run of digits."""
    written = "".join(c for c in number if c.isdigit())
    national = "".join(c for c in phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.NATIONAL)
                       if c.isdigit())  # fmt: skip
    return written == national or (parsed.country_code == 1 and written == "1" + national)


def _phone(regions: tuple[str, ...]) -> Normalise:
    def check(text: str) -> str | None:
        number = text.strip()
        if DATE_LIKE.match(number):
            return None
        digits = sum(c.isdigit() for c in number)
        if number.startswith("00"):
            number = "+" + number[2:]
        tries: tuple[str | None, ...] = (None,) if number.startswith("+") else regions
        if not number.startswith("+") and digits < 8:
            return None
        for region in tries:
            try:
                parsed = phonenumbers.parse(number, region)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(parsed) and (region is None or _as_written(number, parsed)):
                return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)
        return None

    return check


def _c(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


_B, _E = r"(?<![\w@.+-])", r"(?![\w@]|[.-]\w)"
"""A candidate stands alone: not inside a word, an address or a longer number."""

EMAIL = _c(r"(?<![\w.%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
           r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![\w-]|\.\w)")  # fmt: skip
IPV4 = _c(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\w]|\.\d)")
IPV6 = _c(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
CARD = _c(_B + r"\d{4}([ -]?)\d{4}\1\d{4}\1\d{1,7}" + _E + r"|" + _B + r"3[47]\d{2}[ -]?\d{6}[ -]?\d{5}" + _E)
IBAN = _c(r"(?<![\w])[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?(?!\w)", re.IGNORECASE)
PHONE = _c(r"(?<![\w@.+/-])(?:\+|00)?(?:\(\d{1,5}\)[ .-]?)?\d(?:[ .\-/]?(?:\(\d{1,5}\)|\d)){5,16}(?![\w@/]|[.-]\d)")
SSN_FORMATTED = _c(_B + r"\d{3}([- ])\d{2}\1\d{4}" + _E)
DIGITS_9 = _c(_B + r"\d{9}" + _E)
NINO = _c(r"(?<!\w)[A-CEGHJ-PR-TW-Z][A-CEGHJ-NPR-TW-Z] ?\d{2} ?\d{2} ?\d{2} ?[A-D](?!\w)")
NHS = _c(_B + r"\d{3}([ -]?)\d{3}\1\d{4}" + _E)
ES_DNI = _c(r"(?<!\w)\d{8}-?[A-Z](?!\w)")
ES_NIE = _c(r"(?<!\w)[XYZ]-?\d{7}-?[A-Z](?!\w)")
IT_CF = _c(r"(?<!\w)[A-Z]{6}[\dLMNP-V]{2}[A-EHLMPR-T][\dLMNP-V]{2}[A-Z][\dLMNP-V]{3}[A-Z](?!\w)")
FR_NIR = _c(_B + r"[12] ?\d{2} ?\d{2} ?(?:\d{2}|2[AB]) ?\d{3} ?\d{3} ?\d{2}" + _E)
DE_IDNR = _c(_B + r"\d{2} ?\d{3} ?\d{3} ?\d{3}" + _E)
NL_BSN = _c(_B + r"\d{4}\.?\d{2}\.?\d{3}" + _E)
PL_PESEL = _c(_B + r"\d{11}" + _E)
FI_HETU = _c(r"(?<!\w)\d{6}[-+A-FU-Y]\d{3}[0-9A-Y](?!\w)")
SE_PNR = _c(_B + r"(?:\d{2})?\d{6}[-+]\d{4}" + _E)
SE_PNR_BARE = _c(_B + r"(?:\d{2})?\d{10}" + _E)


def _detectors(entities: frozenset[str], regions: tuple[str, ...]) -> tuple[Detector, ...]:
    ssn_check = _std(ssn)
    every = (
        Detector("EMAIL_ADDRESS", EMAIL, _email, 0),
        Detector("IBAN_CODE", IBAN, _iban, 1),
        Detector("CREDIT_CARD", CARD, _card, 1),
        Detector("US_SSN", SSN_FORMATTED, ssn_check, 2),
        Detector("US_SSN", DIGITS_9, ssn_check, 2, ("ssn", "social security")),
        Detector("UK_NINO", NINO, _nino, 2),
        Detector("UK_NHS", NHS, _std(nhs), 2, ("nhs",)),
        Detector("ES_NIF", ES_DNI, _std(dni), 2),
        Detector("ES_NIE", ES_NIE, _std(nie), 2),
        Detector("IT_FISCAL_CODE", IT_CF, _std(codicefiscale), 2),
        Detector("FR_NIR", FR_NIR, _std(nir), 2),
        Detector("FI_PERSONAL_IDENTITY_CODE", FI_HETU, _std(hetu), 2),
        Detector("SE_PERSONNUMMER", SE_PNR, _std(personnummer), 2),
        Detector("SE_PERSONNUMMER", SE_PNR_BARE, _std(personnummer), 2, ("personnummer", "personal number")),
        Detector("DE_TAX_ID", DE_IDNR, _std(idnr), 2, ("steuer", "idnr", "identifikationsnummer", "tax id", "tin")),
        Detector("NL_BSN", NL_BSN, _std(bsn), 2, ("bsn", "burgerservicenummer", "sofinummer")),
        Detector("PL_PESEL", PL_PESEL, _std(pesel), 2, ("pesel",)),
        Detector("IP_ADDRESS", IPV4, _ip, 3),
        Detector("IP_ADDRESS", IPV6, _ip, 3),
        Detector("PHONE_NUMBER", PHONE, _phone(regions), 4),
    )
    return tuple(d for d in every if d.entity in entities)


@dataclass(frozen=True)
class CustomPattern:
    name: str
    pattern: regex.Pattern[str]


@dataclass(frozen=True)
class _Span:
    start: int
    end: int
    entity: str
    value: str
    priority: int


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
        self._detectors = _detectors(frozenset(entities), phone_regions)

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

    def find(self, text: str) -> list[_Span]:
        """The values found, in text order, without overlaps (:class:`PatternTimeout`: a custom pattern ran
        longer than CUSTOM_TIMEOUT_S)."""
        taken = [_Span(m.start(), m.end(), "", "", -1) for m in PLACEHOLDER.finditer(text)]
        candidates: list[_Span] = []
        for custom in self.custom:
            try:
                matches = list(custom.pattern.finditer(text, timeout=CUSTOM_TIMEOUT_S))
            except TimeoutError:
                raise PatternTimeout(custom.name) from None
            candidates += [_Span(m.start(), m.end(), custom.name, m.group(0).strip(), 0) for m in matches if m.group(0)]
        lowered: str | None = None
        for d in self._detectors:
            for m in d.candidates.finditer(text):
                if d.context:
                    lowered = lowered if lowered is not None else text.lower()
                    window = lowered[max(0, m.start() - CONTEXT_CHARS) : m.start()]
                    if not any(word in window for word in d.context):
                        continue
                value = d.normalise(m.group(0))
                if value is not None:
                    candidates.append(_Span(m.start(), m.end(), d.entity, value, d.priority))
        chosen: list[_Span] = []
        for span in sorted(candidates, key=lambda s: (s.priority, s.start - s.end, s.start)):
            if not any(span.start < t.end and t.start < span.end for t in taken):
                taken.append(span)
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
        phone_regions=tuple(spec.get("phoneRegions") or DEFAULT_PHONE_REGIONS),
        custom=custom,
        storage=bool(redact.get("storage", True)),
        model=bool(redact.get("model", False)),
        tools=bool(redact.get("tools", False)),
        answer=bool(redact.get("answer", False)),
    )
