"""PII detection and redaction (dockyard_core.pii; docs/guardrails.md, "PII protection"): what each entity
recognises and what it leaves alone, placeholders consistent within a session and different across
sessions, the spec's compile errors naming the field, and custom patterns that cannot finish in time."""

from __future__ import annotations

import re

import pytest

from dockyard_core.pii import ENTITIES, PiiPolicy, PiiSpecError, pii_key, placeholder, spec_problems

KEY = pii_key(b"widget-signing-key-of-the-namespace")
EVERY = PiiPolicy.compile({"entities": list(ENTITIES)})
assert EVERY is not None


def found(text: str, policy: PiiPolicy = EVERY) -> dict[str, int]:
    return dict(policy.redact(text, key=KEY, session="s1").found)


@pytest.mark.parametrize(
    ("entity", "text"),
    [
        ("EMAIL_ADDRESS", "write to Jane.Doe+shop@mail.example.co.uk please"),
        ("PHONE_NUMBER", "call +44 20 7946 0958 today"),
        ("PHONE_NUMBER", "call (415) 555-2671 today"),
        ("PHONE_NUMBER", "ruf an: 0049 30 901820"),
        ("PHONE_NUMBER", "appelez le 01 42 68 53 00"),
        ("CREDIT_CARD", "card 4111 1111 1111 1111 exp 12/29"),
        ("CREDIT_CARD", "amex 3782-822463-10005"),
        ("IBAN_CODE", "IBAN GB82 WEST 1234 5698 7654 32."),
        ("IBAN_CODE", "iban de89370400440532013000"),
        ("IP_ADDRESS", "from 192.168.1.20, port 80"),
        ("IP_ADDRESS", "from 2001:db8::8a2e:370:7334"),
        ("US_SSN", "my SSN is 536-90-4399"),
        ("US_SSN", "social security number 536904399"),
        ("US_SSN", "SSN 650 27 9163"),
        ("PHONE_NUMBER", "call me: 4155552671"),
        ("PHONE_NUMBER", "Transfer it to me, then call 02079460958"),
        ("UK_NINO", "NI number AB 12 34 56 C"),
        ("UK_NHS", "NHS number 943 476 5919"),
        ("ES_NIF", "DNI 12345678Z"),
        ("ES_NIE", "NIE X1234567L"),
        ("IT_FISCAL_CODE", "codice fiscale RCCMNL83S18D969H"),
        ("FR_NIR", "NIR 2 95 10 99 126 111 93"),
        ("DE_TAX_ID", "Steuer-ID 36574261809"),
        ("NL_BSN", "mijn BSN is 111222333"),
        ("PL_PESEL", "PESEL 44051401359"),
        ("FI_PERSONAL_IDENTITY_CODE", "hetu 131052-308T"),
        ("SE_PERSONNUMMER", "personnummer 880320-0016"),
    ],
)
def test_each_entity_is_recognised_and_replaced(entity: str, text: str) -> None:
    redacted = EVERY.redact(text, key=KEY, session="s1")
    assert dict(redacted.found) == {entity: 1}, redacted.text
    assert re.search(rf"<{entity}_[0-9a-f]{{6}}>", redacted.text)
    rest = re.sub(r"<[A-Z_]+_[0-9a-f]{6}>", "", redacted.text).replace("12/29", "")
    assert not re.search(r"\d{4}", rest), redacted.text


@pytest.mark.parametrize(
    "text",
    [
        "order #4829133 shipped, tracking ORD-2024-000183",
        "card 4111 1111 1111 1112 was declined",  # fails the Luhn check
        "IBAN GB82 WEST 1234 5698 7654 33",  # fails mod 97
        "upgraded to v2.14.3, then 10.2.1",
        "meeting on 2024-05-12 at 10:30, or 12/05/2024",
        "build 1.2.3.4.5 and 999.1.1.1",
        "SSN 000-12-3456",  # no area 000
        "user@localhost has no domain",
        "MAC 00:1a:2b:3c:4d:5e",
        "call extension 4421",
        "booking reference 4155552671 is confirmed",  # a valid US number as written, but a reference
        "my ticket #4155552671 is open",
        "The IBAN AT58 3988 3071 9976 1379 was rejected",  # fails mod 97; the card number inside is no card
        "serial 119077508539084",  # 15 digits: no card network has this prefix and length
    ],
)
def test_look_alikes_are_left_alone(text: str) -> None:
    assert found(text) == {}


def test_weak_national_ids_need_a_word_naming_them() -> None:
    weak = PiiPolicy.compile({"entities": ["NL_BSN", "DE_TAX_ID", "PL_PESEL", "UK_NHS", "US_SSN"]})
    assert weak is not None
    for bare in ("111222333", "36574261809", "44051401359", "9434765919", "536904399"):
        assert found(f"invoice {bare}", weak) == {}
    assert found("BSN: 111222333, IdNr 36574261809, PESEL 44051401359", weak) == {
        "NL_BSN": 1, "DE_TAX_ID": 1, "PL_PESEL": 1}  # fmt: skip


def test_national_ids_only_when_selected() -> None:
    policy = PiiPolicy.compile({})
    assert policy is not None
    assert policy.entities == ("EMAIL_ADDRESS", "PHONE_NUMBER", "CREDIT_CARD", "IBAN_CODE", "IP_ADDRESS")
    assert found("my SSN is 536-90-4399", policy) == {}
    assert found("DNI 12345678Z", policy) == {}


def test_placeholders_are_consistent_in_a_session_and_differ_across_sessions() -> None:
    one = EVERY.redact("mail jane@example.com, again JANE@example.com", key=KEY, session="s1").text
    first, second = re.findall(r"<EMAIL_ADDRESS_[0-9a-f]{6}>", one)
    assert first == second  # the normal form: an address in lower case
    other = EVERY.redact("mail jane@example.com", key=KEY, session="s2").text
    assert re.findall(r"<EMAIL_ADDRESS_[0-9a-f]{6}>", other) != [first]
    phone_a = EVERY.redact("+44 20 7946 0958", key=KEY, session="s1").text
    phone_b = EVERY.redact("0044 (20) 7946-0958", key=KEY, session="s1").text
    assert phone_a == phone_b  # E.164 either way


def test_the_placeholder_depends_on_the_key() -> None:
    assert placeholder(KEY, "s", "EMAIL_ADDRESS", "a@b.io") != placeholder(
        pii_key(b"another namespace"), "s", "EMAIL_ADDRESS", "a@b.io"
    )
    assert pii_key(b"k") != b"k"
    assert len(pii_key(b"k")) == 32


def test_redacting_twice_changes_nothing_and_keeps_the_rest() -> None:
    text = "Hi! Card 4111-1111-1111-1111, mail a.b@c.org; thanks."
    once = EVERY.redact(text, key=KEY, session="s1")
    assert once.text.startswith("Hi! Card <CREDIT_CARD_")
    assert once.text.endswith("; thanks.")
    assert EVERY.redact(once.text, key=KEY, session="s1") == type(once)(once.text)
    assert once.count == 2


def test_custom_patterns_and_their_names() -> None:
    policy = PiiPolicy.compile({"entities": [], "customPatterns": [{"name": "CUSTOMER_ID", "pattern": r"CU-\d{6}"}]})
    assert policy is not None
    redacted = policy.redact("customer CU-123456 and CU-123456 again", key=KEY, session="s")
    assert dict(redacted.found) == {"CUSTOMER_ID": 2}
    assert len(set(re.findall(r"<CUSTOMER_ID_[0-9a-f]{6}>", redacted.text))) == 1


def test_a_custom_pattern_that_runs_too_long_withholds_the_text() -> None:
    policy = PiiPolicy.compile({"entities": [], "customPatterns": [{"name": "SLOW", "pattern": r"(a|aa)+$"}]})
    assert policy is not None
    redacted = policy.redact("a" * 40 + "!", key=KEY, session="s")
    assert redacted.withheld
    assert redacted.text == "<SLOW_UNCHECKED>"
    assert dict(redacted.found) == {"SLOW": 1}


@pytest.mark.parametrize(
    ("spec", "field", "message"),
    [
        ({"customPatterns": [{"name": "OK", "pattern": "a"}, {"name": "BAD", "pattern": "("}]},
         "spec.pii.customPatterns[1].pattern", "not a valid regular expression"),
        ({"customPatterns": [{"name": "EMPTY", "pattern": "x*"}]},
         "spec.pii.customPatterns[0].pattern", "matches the empty text"),
        ({"customPatterns": [{"name": "lower", "pattern": "x"}]}, "spec.pii.customPatterns[0].name", "A-Z"),
        ({"customPatterns": [{"name": "EMAIL_ADDRESS", "pattern": "x"}]},
         "spec.pii.customPatterns[0].name", "already an entity"),
        ({"entities": ["EMAIL_ADDRESS", "PASSPORT"]}, "spec.pii.entities[1]", "unknown entity 'PASSPORT'"),
        ({"phoneRegions": ["US", "XX"]}, "spec.pii.phoneRegions[1]", "not a region"),
    ],
)  # fmt: skip
def test_a_spec_that_cannot_compile_names_the_field(spec: dict[str, object], field: str, message: str) -> None:
    problems = spec_problems(spec)
    assert problems, spec
    assert problems[0][0] == field, problems
    assert message in problems[0][1], problems
    with pytest.raises(PiiSpecError) as raised:
        PiiPolicy.compile(spec)
    assert raised.value.field == field


def test_the_spec_sets_where_to_redact() -> None:
    assert PiiPolicy.compile(None) is None
    default = PiiPolicy.compile({})
    assert default is not None
    assert (default.redact_storage, default.redact_model, default.redact_tools, default.redact_answer) == (
        True, False, False, False)  # fmt: skip
    every = PiiPolicy.compile({"redact": {"storage": False, "model": True, "tools": True, "answer": True}})
    assert every is not None
    assert (every.redact_storage, every.redact_model, every.redact_tools, every.redact_answer) == (
        False, True, True, True)  # fmt: skip


def test_phone_regions_decide_which_national_numbers_count() -> None:
    international_only = PiiPolicy.compile({"phoneRegions": []})
    french = PiiPolicy.compile({"phoneRegions": ["FR"]})
    assert international_only is not None
    assert french is not None
    assert found("appelez le 01 42 68 53 00", international_only) == {}
    assert found("call +33 1 42 68 53 00", international_only) == {"PHONE_NUMBER": 1}
    assert found("appelez le 01 42 68 53 00", french) == {"PHONE_NUMBER": 1}
    assert found("call (415) 555-2671", french) == {}
