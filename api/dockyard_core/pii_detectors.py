"""The detectors of :mod:`dockyard_core.pii`: for each entity, a cheap pattern that finds the candidates and
a check that returns a candidate's normal form (None: not one), by a well-kept library where there is one
(``phonenumbers``; ``python-stdnum``'s checksums and formats; ``ipaddress``)."""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, get_args

import phonenumbers
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

Normalise = Callable[[str], "str | None"]


@dataclass(frozen=True)
class Detector:
    entity: str
    candidates: re.Pattern[str]
    normalise: Normalise
    priority: float
    """Lower wins an overlap: checksummed values before phone numbers (a card number also parses as one)."""
    context: tuple[str, ...] = ()
    """Words one of which must stand in the CONTEXT_CHARS before the candidate (empty: none needed)."""
    not_after: re.Pattern[str] | None = None
    """Where this matches the (lower-case) text just before a candidate that is a bare run of digits, the
    candidate is a reference of some kind, not this entity (``order number 4155552671``)."""
    blocks: float | None = None
    """A candidate that fails its check still keeps the detectors ranked after this out of its span (an
    IBAN whose check fails holds no card number, a card number that fails holds no phone number)."""
    shrink: bool = False
    """A candidate that fails is tried again without its last space-separated group, and so on (an IBAN
    followed by an upper-case word, a phone number by another number)."""


def _std(module: Any) -> Normalise:
    def check(text: str) -> str | None:
        compact = text.replace(" ", "")  # not every module's compact() drops spaces (us.ssn does not)
        return str(module.compact(compact)) if module.is_valid(compact) else None

    return check


CARD_NETWORKS = (
    (re.compile(r"4"), (13, 16, 19)),  # Visa
    (re.compile(r"5[1-5]|222[1-9]|22[3-9]\d|2[3-6]\d\d|27[01]\d|2720"), (16,)),  # Mastercard
    (re.compile(r"3[47]"), (15,)),  # American Express
    (re.compile(r"3(?:0[0-5]|095|[689])"), (14, 15, 16, 17, 18, 19)),  # Diners Club
    (re.compile(r"35(?:2[89]|[3-8]\d)"), (16, 17, 18, 19)),  # JCB
    (re.compile(r"6011|64[4-9]|65|62|5[06-9]|6\d"), (12, 13, 14, 15, 16, 17, 18, 19)),  # Discover, UnionPay, Maestro
)
"""Issuer prefixes and the lengths of their card numbers."""


def _card(text: str) -> str | None:
    digits = re.sub(r"[ -]", "", text)
    if not any(prefix.match(digits) and len(digits) in lengths for prefix, lengths in CARD_NETWORKS):
        return None
    return digits if luhn.is_valid(digits) else None


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


def _plausible_in(regions: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """The regions a national number's digits could be written in: its trunk prefix written (the 0 of most
    regions; optional for NANP's 1) and the rest of a length the region has. Saves most parses."""
    shapes = []
    for region in regions:
        meta = phonenumbers.PhoneMetadata.metadata_for_region(region)
        if meta is not None and meta.general_desc is not None:
            lengths = frozenset(meta.general_desc.possible_length or ())
            shapes.append((region, meta.national_prefix or "", lengths, meta.country_code == 1))

    def plausible(digits: str) -> tuple[str, ...]:
        out = []
        for region, prefix, lengths, nanp in shapes:
            if prefix and digits.startswith(prefix):
                rest = digits[len(prefix) :]
            elif prefix and not nanp:
                continue
            else:
                rest = digits
            if len(rest) in lengths or (nanp and len(digits) in lengths):
                out.append(region)
        return tuple(out)

    return plausible


def _phone(regions: tuple[str, ...]) -> Normalise:
    plausible = _plausible_in(regions)

    def check(text: str) -> str | None:
        number = text.strip()
        if DATE_LIKE.match(number):
            return None
        digits = "".join(c for c in number if c.isdigit())
        if number.startswith("00"):
            number = "+" + number[2:]
        if not number.startswith("+") and len(digits) < 8:
            return None
        tries: tuple[str | None, ...] = (None,) if number.startswith("+") else plausible(digits)
        for region in tries:
            try:
                parsed = phonenumbers.parse(number, region)
            except phonenumbers.NumberParseException:
                continue
            if phonenumbers.is_valid_number(parsed) and (region is None or _as_written(number, parsed)):
                return phonenumbers.format_number(parsed, phonenumbers.PhoneNumberFormat.E164)
        return None

    return check


REFERENCE = re.compile(
    r"(?:order|ref|reference|invoice|ticket|tracking|booking|confirmation|transaction|case|account|customer|member"
    r"|parcel|shipment|serial|commit|build|code|id|no\.?|nr\.?|#)\W{0,3}(?:number|no\.?|nr\.?|id|#)?\W{0,3}$"
)
"""The words that make a bare run of digits after them a reference (an order, a ticket, a booking)."""


def _c(pattern: str, flags: int = 0) -> re.Pattern[str]:
    return re.compile(pattern, flags)


_B, _E = r"(?<![\w@.+-])", r"(?![\w@]|[.-]\w)"
"""A candidate stands alone: not inside a word, an address or a longer number."""

EMAIL = _c(r"(?<![\w.%+-])[A-Za-z0-9][A-Za-z0-9._%+-]*@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?"
           r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*\.[A-Za-z]{2,24}(?![\w-]|\.\w)")  # fmt: skip
IPV4 = _c(r"(?<![\w.])(?:(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)(?![\w]|\.\d)")
IPV6 = _c(r"(?<![\w:])(?:[0-9A-Fa-f]{0,4}:){2,7}[0-9A-Fa-f]{0,4}(?![\w:])")
CARD = _c(_B + r"(?:\d{4}([ -]?)\d{4}\1\d{4}\1\d{1,7}|\d{4}([ -]?)\d{6}\2\d{4,5})" + _E)
IBAN = _c(r"(?<!\w)(?:[A-Z]{2}\d{2}(?: ?[A-Z0-9]{4}){2,7}(?: ?[A-Z0-9]{1,4})?|(?i:[a-z]{2}\d{2}[a-z0-9]{11,30}))(?!\w)")
"""Grouped by four in capitals as printed, or in one piece in either case (grouped in lower case, it would
take the words after it for groups)."""
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


def detectors(entities: frozenset[str], regions: tuple[str, ...]) -> tuple[Detector, ...]:
    ssn_check = _std(ssn)
    every = (
        Detector("EMAIL_ADDRESS", EMAIL, _email, 0),
        Detector("IBAN_CODE", IBAN, _iban, 1, blocks=0.5, shrink=True),
        Detector("CREDIT_CARD", CARD, _card, 1, blocks=3.5),
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
        Detector("PHONE_NUMBER", PHONE, _phone(regions), 4, not_after=REFERENCE, shrink=True),
    )
    return tuple(d for d in every if d.entity in entities)
