"""PII detection (``dockyard_core.pii``) on a generated corpus: recall and precision per entity, and the cost
per message.

The corpus: ``--messages`` chat messages (seeded, ``--seed``) made of everyday support-chat sentences, into
which values of every entity are planted, each in a sentence as people write it (an e-mail address
"reach me at ...", a card "my card is ...", a national id after its usual name: "my BSN is ...", "DNI
..."), in the formats people type (cards spaced, dashed or not; IBANs grouped or not; phone numbers
international, with 00, or national in one of the default phone regions), plus look-alikes that are no
PII: order and tracking numbers, invoice references, card numbers and IBANs whose checksum fails,
version strings, dates, times, prices, IPs' cousins (four-part version numbers are the one look-alike an
IP check cannot tell apart, so none is planted), hex hashes. Every entity is on, with one custom pattern
(``CUSTOMER_ID``: ``CU-`` and six digits).

Scored: a planted value is found when one detection of its entity covers it whole; a detection is right
when it lies on a planted value of its entity. Recall and precision per entity (targets: recall >= 0.95,
precision >= 0.9), the values redacted under another entity's name (still hidden, wrongly named), and the
cost of ``PiiPolicy.redact`` per message (every entity on, and the default five; the target: well under
1 ms for a typical 200-character message).

    .venv/bin/python -m bench.pii [--messages 1000 --seed 28 --passes 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import string
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

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

from dockyard_core.pii import DEFAULT_PHONE_REGIONS, ENTITIES, PiiPolicy, pii_key

CUSTOM = {"name": "CUSTOMER_ID", "pattern": r"CU-\d{6}"}
FILLER = [
    "Hi there, I have a question about my last order.",
    "The parcel arrived yesterday but the box was damaged.",
    "Could you tell me when the store opens on Sunday?",
    "Thanks for the quick answer, that helps a lot!",
    "I tried to log in three times and it still fails.",
    "Is the blue model still available in size 42?",
    "My colleague said the discount ends this Friday.",
    "Please cancel the subscription at the end of the month.",
    "The app crashes when I open the settings page.",
    "We would like to book a table for 4 people at 7pm.",
    "Can I change the delivery address after paying?",
    "Sorry for the long message, it has been a rough week.",
]


def digits(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(string.digits) for _ in range(n))


def until_valid(make: Callable[[], str], valid: Callable[[str], bool]) -> str:
    while True:
        value = make()
        if valid(value):
            return value


def card(rng: random.Random) -> str:
    prefix, length, groups = rng.choice(
        [
            ("4", 16, (4, 4, 4, 4)),
            ("5" + rng.choice("12345"), 16, (4, 4, 4, 4)),
            ("3" + rng.choice("47"), 15, (4, 6, 5)),
            ("6011", 16, (4, 4, 4, 4)),
        ]
    )
    body = prefix + digits(rng, length - len(prefix) - 1)
    number = body + luhn.calc_check_digit(body)
    sep = rng.choice([" ", "-", ""])
    parts, at = [], 0
    for g in groups:
        parts.append(number[at : at + g])
        at += g
    return sep.join(parts)


IBAN_SHAPES = {
    "DE": "8n10n",
    "GB": "4a6n8n",
    "FR": "5n5n11c2n",
    "ES": "4n4n1n1n10n",
    "IT": "1a5n5n12c",
    "NL": "4a10n",
    "BE": "3n7n2n",
    "CH": "5n12c",
    "AT": "5n11n",
    "PL": "8n16n",
}


def iban_value(rng: random.Random, *, valid: bool = True) -> str:
    country = rng.choice(sorted(IBAN_SHAPES))
    shape, bban, i = IBAN_SHAPES[country], "", 0
    while i < len(shape):
        j = i
        while shape[j].isdigit():
            j += 1
        count, kind = int(shape[i:j]), shape[j]
        alphabet = {"n": string.digits, "a": string.ascii_uppercase, "c": string.digits + string.ascii_uppercase}[kind]
        bban += "".join(rng.choice(alphabet) for _ in range(count))
        i = j + 1
    check = iban.calc_check_digits(country + "00" + bban)
    if valid and not iban.is_valid(country + check + bban):  # a national check of its own (BE): draw again
        return iban_value(rng, valid=valid)
    if not valid:
        check = f"{(int(check) + rng.randint(1, 90)) % 97 + 2:02d}"
    number = country + check + bban
    return " ".join(number[k : k + 4] for k in range(0, len(number), 4)) if rng.random() < 0.7 else number


def phone(rng: random.Random) -> str:
    regions = ["US", "GB", "DE", "FR", "ES", "IT", "NL", "IN", "BR", "AU", "JP", "CH", "SE", "PL", "MX"]
    region = rng.choice(regions)
    kind = rng.choice([phonenumbers.PhoneNumberType.MOBILE, phonenumbers.PhoneNumberType.FIXED_LINE])
    example = phonenumbers.example_number_for_type(region, kind)
    assert example is not None
    national = str(example.national_number)
    keep = max(1, len(national) - 5)
    candidate = example
    for _ in range(1000):  # the example's leading digits and random others, until valid (the example else)
        drawn = phonenumbers.PhoneNumber(
            country_code=example.country_code,
            national_number=int(national[:keep] + digits(rng, len(national) - keep)),
            italian_leading_zero=example.italian_leading_zero,  # Italy's fixed lines: 02 ...
        )
        if phonenumbers.is_valid_number(drawn):
            candidate = drawn
            break
    style = rng.choice(["international", "e164", "00", "national", "national digits"])
    if style.startswith("national") and region in DEFAULT_PHONE_REGIONS:
        national_text = phonenumbers.format_number(candidate, phonenumbers.PhoneNumberFormat.NATIONAL)
        return national_text if style == "national" else "".join(c for c in national_text if c.isdigit())
    if style == "e164":
        return phonenumbers.format_number(candidate, phonenumbers.PhoneNumberFormat.E164)
    text = phonenumbers.format_number(candidate, phonenumbers.PhoneNumberFormat.INTERNATIONAL)
    return "00" + text[1:] if style == "00" else text


def ip(rng: random.Random) -> str:
    if rng.random() < 0.75:
        return ".".join(str(rng.randint(1, 254)) for _ in range(4))
    groups = [f"{rng.randint(0, 0xFFFF):x}" for _ in range(8)]
    if rng.random() < 0.5:
        return "2001:db8::" + ":".join(groups[:3])
    return ":".join(groups)


def ssn(rng: random.Random) -> str:
    area = rng.choice([a for a in range(1, 900) if a != 666])
    sep = rng.choice(["-", "-", " "])
    return f"{area:03d}{sep}{rng.randint(1, 99):02d}{sep}{rng.randint(1, 9999):04d}"


def nino(rng: random.Random) -> str:
    first, second = "ABCEGHJKLMNOPRSTWXYZ", "ABCEGHJKLMNPRSTWXYZ"
    prefix = until_valid(
        lambda: rng.choice(first) + rng.choice(second), lambda p: p not in {"BG", "GB", "KN", "NK", "NT", "TN", "ZZ"}
    )
    d = digits(rng, 6)
    suffix = rng.choice("ABCD")
    return f"{prefix} {d[:2]} {d[2:4]} {d[4:]} {suffix}" if rng.random() < 0.5 else f"{prefix}{d}{suffix}"


def nhs_number(rng: random.Random) -> str:
    n = until_valid(lambda: digits(rng, 10), nhs.is_valid)
    return f"{n[:3]} {n[3:6]} {n[6:]}" if rng.random() < 0.7 else n


def fiscal_code(rng: random.Random) -> str:
    letters = "".join(rng.choice(string.ascii_uppercase) for _ in range(6))
    day = rng.randint(1, 28) + rng.choice([0, 40])
    body = (
        f"{letters}{rng.randint(0, 99):02d}{rng.choice('ABCDEHLMPRST')}{day:02d}{rng.choice('ADFHLZ')}{digits(rng, 3)}"
    )
    return body + codicefiscale.calc_check_digit(body)


def nir_number(rng: random.Random) -> str:
    body = (
        f"{rng.choice('12')}{rng.randint(0, 99):02d}{rng.randint(1, 12):02d}{rng.choice([1, 13, 33, 59, 69, 75]):02d}"
    )
    body += digits(rng, 6)
    n = body + nir.calc_check_digits(body)
    return f"{n[0]} {n[1:3]} {n[3:5]} {n[5:7]} {n[7:10]} {n[10:13]} {n[13:]}" if rng.random() < 0.5 else n


def pesel_number(rng: random.Random) -> str:
    body = f"{rng.randint(40, 99):02d}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}{digits(rng, 4)}"
    return body + pesel.calc_check_digit(body)


def hetu_number(rng: random.Random) -> str:
    born = f"{rng.randint(1, 28):02d}{rng.randint(1, 12):02d}{rng.randint(0, 99):02d}"
    body = f"{born}{rng.choice('-A')}{rng.randint(2, 899):03d}"
    return until_valid(lambda: body + rng.choice("0123456789ABCDEFHJKLMNPRSTUVWXY"), hetu.is_valid)


def personnummer_number(rng: random.Random) -> str:
    body = f"{rng.randint(40, 99):02d}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}-{digits(rng, 3)}"
    return until_valid(lambda: body + rng.choice(string.digits), personnummer.is_valid)


Planter = tuple[Callable[[random.Random], str], tuple[str, ...]]
PLANTS: dict[str, Planter] = {
    "EMAIL_ADDRESS": (
        lambda r: (
            f"{r.choice(['jane', 'j.doe', 'mario.rossi', 'li.wei', 'anna+shop', 'Bob.Smith'])}"
            f"{r.randint(1, 999)}@{r.choice(['example.com', 'mail.example.co.uk', 'post.example.de', 'EXAMPLE.org'])}"
        ),
        ("You can reach me at {}.", "my email is {} if you need it", "Send the invoice to {} please."),
    ),
    "PHONE_NUMBER": (phone, ("Call me on {} after 5pm.", "my number is {}", "Please ring {} tomorrow.")),
    "CREDIT_CARD": (card, ("My card is {}, expiry 08/27.", "I paid with {} yesterday.", "card number {}")),
    "IBAN_CODE": (iban_value, ("Refund to IBAN {} please.", "my account is {}", "Transfer it to {}.")),
    "IP_ADDRESS": (ip, ("I am connecting from {} right now.", "the error mentions host {}", "blocked IP {}?")),
    "US_SSN": (ssn, ("My SSN is {}.", "social security number {}", "SSN: {}")),
    "UK_NINO": (nino, ("My NI number is {}.", "national insurance {}", "NINO {}")),
    "UK_NHS": (nhs_number, ("My NHS number is {}.", "NHS no. {}", "nhs number: {}")),
    "ES_NIF": (lambda r: (n := digits(r, 8)) + dni.calc_check_digit(n), ("Mi DNI es {}.", "DNI {}", "NIF: {}")),
    "ES_NIE": (lambda r: (n := r.choice("XYZ") + digits(r, 7)) + nie.calc_check_digit(n), ("NIE {}", "mi NIE es {}")),
    "IT_FISCAL_CODE": (fiscal_code, ("Il mio codice fiscale è {}.", "codice fiscale {}", "CF: {}")),
    "FR_NIR": (nir_number, ("Mon numéro de sécurité sociale est {}.", "NIR {}", "n° sécu {}")),
    "DE_TAX_ID": (
        lambda r: until_valid(lambda: r.choice("123456789") + digits(r, 10), idnr.is_valid),
        ("Meine Steuer-ID ist {}.", "Steueridentifikationsnummer {}", "IdNr: {}"),
    ),
    "NL_BSN": (
        lambda r: until_valid(lambda: digits(r, 9), bsn.is_valid),
        ("Mijn BSN is {}.", "burgerservicenummer {}"),
    ),
    "PL_PESEL": (pesel_number, ("Mój PESEL to {}.", "PESEL: {}")),
    "FI_PERSONAL_IDENTITY_CODE": (hetu_number, ("Henkilötunnukseni on {}.", "hetu {}", "HETU: {}")),
    "SE_PERSONNUMMER": (personnummer_number, ("Mitt personnummer är {}.", "personnummer {}")),
    "CUSTOMER_ID": (lambda r: f"CU-{digits(r, 6)}", ("My customer id is {}.", "account {} here")),
}


def look_alike(rng: random.Random) -> str:
    good = card(rng)
    bad_card = good[:-1] + str((int(good[-1]) + rng.randint(1, 9)) % 10)  # the Luhn check fails
    options = [
        f"Order #{rng.randint(100000, 9999999)} has not arrived.",
        f"My order ORD-{rng.randint(2019, 2026)}-{digits(rng, 6)} is late.",
        f"Invoice INV-{digits(rng, 5)} shows the wrong amount.",
        f"Tracking 1Z{digits(rng, 3)}AA{digits(rng, 10)} says delivered.",
        f"I tried the card {bad_card} again.",
        f"The IBAN {iban_value(rng, valid=False)} was rejected.",
        f"After the update to v{rng.randint(1, 9)}.{rng.randint(0, 30)}.{rng.randint(0, 9)} it broke.",
        f"Version {rng.randint(1, 5)}.{rng.randint(0, 20)}.{rng.randint(0, 20)} works.",
        f"It happened on {rng.randint(2019, 2026)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}.",
        f"Delivery slot {rng.randint(1, 28):02d}/{rng.randint(1, 12):02d}/{rng.randint(2024, 2026)} "
        f"at {rng.randint(8, 20)}:{rng.choice(['00', '30'])}.",
        f"It costs ${rng.randint(1, 2999)}.{rng.randint(0, 99):02d} now.",
        f"Room {rng.randint(100, 9999)} on floor {rng.randint(1, 40)}.",
        f"Commit {''.join(rng.choice('0123456789abcdef') for _ in range(10))} fixed it.",
        f"SSN 000-{rng.randint(10, 99)}-{rng.randint(1000, 9999)} is what the form shows.",
        f"Call the extension {rng.randint(100, 9999)}.",
        f"Booking reference {rng.randint(2, 9)}{digits(rng, 9)} is confirmed.",
        f"My ticket {rng.choice(['#', 'no. ', 'number '])}{rng.randint(2, 9)}{digits(rng, rng.choice([9, 10]))} "
        "is still open.",
        f"The order number {rng.randint(1, 9)}{digits(rng, rng.choice([8, 9, 10]))} was charged twice.",
        f"It weighs {rng.randint(1, 99)}.{rng.randint(0, 9)} kg and is {rng.randint(10, 300)} cm long.",
    ]
    return rng.choice(options)


@dataclass
class Message:
    text: str
    planted: list[tuple[int, int, str]]


def corpus(seed: int, count: int) -> tuple[list[Message], int]:
    rng = random.Random(seed)
    messages, look_alikes = [], 0
    kinds = sorted(PLANTS)
    for _ in range(count):
        parts: list[str | tuple[str, str, str]] = [rng.choice(FILLER)]
        for _ in range(rng.choice([0, 1, 1, 2, 2, 3])):
            entity = rng.choice(kinds)
            make, templates = PLANTS[entity]
            parts.append((entity, rng.choice(templates), make(rng)))
        for _ in range(rng.choice([0, 1, 1, 2])):
            parts.append(look_alike(rng))
            look_alikes += 1
        rng.shuffle(parts)
        text, planted = "", []
        for part in parts:
            text += " " if text else ""
            if isinstance(part, str):
                text += part
                continue
            entity, template, value = part
            before, after = template.split("{}")
            start = len(text) + len(before)
            text += before + value + after
            planted.append((start, start + len(value), entity))
        messages.append(Message(text, planted))
    return messages, look_alikes


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=28)
    parser.add_argument("--passes", type=int, default=5, help="timed passes over the corpus (the median is kept)")
    args = parser.parse_args()
    messages, look_alikes = corpus(args.seed, args.messages)
    policy = PiiPolicy.compile({"entities": list(ENTITIES), "customPatterns": [CUSTOM]})
    default = PiiPolicy.compile({})
    assert policy is not None
    assert default is not None
    planted = Counter(entity for m in messages for _, _, entity in m.planted)
    print(
        f"inputs: seed {args.seed}, {len(messages)} messages "
        f"(mean {statistics.mean(len(m.text) for m in messages):.0f} "
        f"characters), {sum(planted.values())} planted values, {look_alikes} look-alikes; every entity on "
        f"({len(ENTITIES)}) and the custom pattern CUSTOMER_ID; phone regions {', '.join(DEFAULT_PHONE_REGIONS)}"
    )
    found, detected, right, renamed = Counter[str](), Counter[str](), Counter[str](), Counter[str]()
    misses: dict[str, list[str]] = {}
    wrong: dict[str, list[str]] = {}
    for m in messages:
        spans = policy.find(m.text)
        for start, end, entity in m.planted:
            covering = [s for s in spans if s.start <= start and end <= s.end]
            if any(s.entity == entity for s in covering):
                found[entity] += 1
            else:
                renamed[entity] += bool(covering)
                misses.setdefault(entity, []).append(m.text[start:end])
        for s in spans:
            detected[s.entity] += 1
            if any(s.start < end and start < s.end and entity == s.entity for start, end, entity in m.planted):
                right[s.entity] += 1
            else:
                wrong.setdefault(s.entity, []).append(m.text[s.start : s.end])
    print(f"\n{'entity':27} {'planted':>7} {'found':>6} {'recall':>7} {'detected':>8} {'precision':>9}  other name")
    recalls, precisions = {}, {}
    for entity in sorted(planted):
        recalls[entity] = found[entity] / planted[entity]
        precisions[entity] = right[entity] / detected[entity] if detected[entity] else 1.0
        print(
            f"{entity:27} {planted[entity]:7} {found[entity]:6} {recalls[entity]:7.3f} {detected[entity]:8} "
            f"{precisions[entity]:9.3f}  {renamed[entity] or ''}"
        )
    for label, cases in (("missed", misses), ("wrongly detected", wrong)):
        for entity, values in sorted(cases.items()):
            print(f"  {label} {entity}: {', '.join(repr(v) for v in values[:4])}{' ...' if len(values) > 4 else ''}")
    key = pii_key(b"bench")
    costs = {}
    for name, p in (("every entity", policy), ("the default five", default)):
        passes = []
        for _ in range(args.passes):
            started = time.perf_counter()
            for i, m in enumerate(messages):
                p.redact(m.text, key=key, session=f"s{i % 50}")
            passes.append((time.perf_counter() - started) * 1000 / len(messages))
        costs[name] = statistics.median(passes)
        print(f"cost per message, {name}: {costs[name]:.3f} ms (median of {args.passes} passes)")
    # the known limit: a bare run of ten digits after no word naming a reference reads as a (US) phone number
    rng = random.Random(args.seed)
    bare = [f"The loyalty card {rng.randint(2, 9)}{digits(rng, 9)} does not work." for _ in range(200)]
    read = sum(any(s.entity == "PHONE_NUMBER" for s in policy.find(text)) for text in bare)
    print(
        f"not in the corpus: of {len(bare)} bare ten-digit numbers after a neutral word ('The loyalty card "
        f"2837461923 does not work.'), {read} read as phone numbers (valid US numbers as written)"
    )
    typical = (
        "Hi, I ordered the blue jacket last week (order #4829133) and it has not arrived yet. Could you "
        "check? You can reach me at jane.doe@example.com or +44 20 7946 0958. Thanks a lot, Jane"
    )
    started = time.perf_counter()
    for _ in range(2000):
        default.redact(typical, key=key, session="s")
    typical_ms = (time.perf_counter() - started) * 1000 / 2000
    print(
        f"cost of a typical {len(typical)}-character message (an e-mail and a phone number), default five: "
        f"{typical_ms:.3f} ms"
    )
    low_recall = [e for e, v in recalls.items() if v < 0.95]
    low_precision = [e for e, v in precisions.items() if v < 0.9]
    worst_r, worst_p = min(recalls, key=lambda e: recalls[e]), min(precisions, key=lambda e: precisions[e])
    print(
        f"summary (seed {args.seed}, {len(messages)} messages, {sum(planted.values())} planted, {look_alikes} "
        f"look-alikes, {len(planted)} types): recall >= 0.95 {met(not low_recall)} for {len(planted) - len(low_recall)}"
        f"/{len(planted)} types (lowest {recalls[worst_r]:.3f} {worst_r}), precision >= 0.9 {met(not low_precision)} "
        f"for {len(planted) - len(low_precision)}/{len(planted)} (lowest {precisions[worst_p]:.3f} {worst_p}); cost "
        f"per message {costs['every entity']:.3f} ms every entity, {typical_ms:.3f} ms a typical "
        f"{len(typical)}-character "
        f"one (<= 1 ms: {met(typical_ms <= 1 and costs['every entity'] <= 1)})"
    )


def met(ok: bool) -> str:
    return "met" if ok else "NOT met"


if __name__ == "__main__":
    main()
