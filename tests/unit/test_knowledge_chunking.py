"""Chunking: every chunk a slice of the parsed text within maxChars, sections kept apart (splitBy heading)
or packed together (paragraph), long paragraphs cut at sentence ends with the configured overlap."""

from __future__ import annotations

import itertools
import random

import pytest

from dockyard_core.errors import InvalidError
from dockyard_core.knowledge import Chunk, ChunkSettings, ParsedDocument, chunk_document, parse_document
from tests.support.knowledge import make_pdf

WORDS = (
    "harbour",
    "pilot",
    "berth",
    "tanker",
    "fender",
    "buoy",
    "channel",
    "tide",
    "anchor",
    "crane",
    "quay",
    "lock",
    "ferry",
    "dock",
)


def check(doc: ParsedDocument, chunks: list[Chunk], settings: ChunkSettings) -> None:
    assert [c.ordinal for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert c.text == doc.text[c.start : c.end]
        assert 0 < len(c.text) <= settings.max_chars
        assert c.text == c.text.strip()
    covered = set()
    for c in chunks:
        covered.update(range(c.start, c.end))
    assert all(doc.text[i].isspace() for i in range(len(doc.text)) if i not in covered)  # no word left out


def sentences(rng: random.Random, n: int) -> str:
    return " ".join(" ".join(rng.choices(WORDS, k=rng.randint(5, 14))).capitalize() + "." for _ in range(n))


def markdown(rng: random.Random) -> str:
    parts = []
    for s in range(6):
        parts.append(f"## Section {s}")
        parts.extend(sentences(rng, rng.randint(1, 12)) for _ in range(rng.randint(1, 5)))
    return "# Manual\n\n" + "\n\n".join(parts)


def test_by_heading_no_chunk_mixes_two_sections_and_each_carries_its_heading_path() -> None:
    rng = random.Random(7)
    settings = ChunkSettings(max_chars=400, overlap_chars=60)
    for _ in range(20):
        doc = parse_document(markdown(rng).encode(), filename="m.md")
        chunks = chunk_document("m", doc, settings)
        check(doc, chunks, settings)
        for c in chunks:
            headings = [b for b in doc.blocks if b.heading_level and c.start < b.start < c.end]
            assert not headings  # a heading only ever starts a chunk
            section = c.heading_path[-1]
            assert section == "Manual" or c.text.startswith(section) or section in doc.text[: c.start]
        assert {c.heading_path for c in chunks} >= {("Manual", f"Section {s}") for s in range(6)}


def test_by_paragraph_packs_across_headings_up_to_max_chars() -> None:
    doc = parse_document(b"# A\n\nshort one.\n\n# B\n\nshort two.\n\n# C\n\nshort three.", filename="x.md")
    by_heading = chunk_document("x", doc, ChunkSettings(max_chars=200, overlap_chars=0))
    by_paragraph = chunk_document("x", doc, ChunkSettings(max_chars=200, overlap_chars=0, split_by="paragraph"))
    assert [c.text for c in by_heading] == ["A\n\nshort one.", "B\n\nshort two.", "C\n\nshort three."]
    assert [c.heading_path for c in by_heading] == [("A",), ("B",), ("C",)]
    assert [c.text for c in by_paragraph] == [doc.text]
    assert by_paragraph[0].heading_path == ("A",)


def test_a_long_paragraph_is_cut_at_sentence_ends_with_the_overlap_at_word_starts() -> None:
    rng = random.Random(3)
    text = sentences(rng, 80)
    doc = parse_document(text.encode(), filename="long.txt")
    settings = ChunkSettings(max_chars=300, overlap_chars=80)
    chunks = chunk_document("l", doc, settings)
    check(doc, chunks, settings)
    assert len(chunks) > len(text) // 300
    for before, after in itertools.pairwise(chunks):
        assert after.start < before.end  # overlapping
        assert before.end - after.start <= 80
        assert doc.text[after.start - 1] == " "  # at a word start
    assert sum(c.text.endswith(".") for c in chunks) >= len(chunks) - 2  # cut at sentence ends


def test_packed_chunks_repeat_the_end_of_the_previous_one_as_overlap() -> None:
    paragraphs = [f"Paragraph {i} " + " ".join(WORDS) for i in range(6)]
    doc = parse_document("\n\n".join(paragraphs).encode(), filename="p.txt")
    chunks = chunk_document("p", doc, ChunkSettings(max_chars=250, overlap_chars=40))
    assert len(chunks) >= 3
    for before, after in itertools.pairwise(chunks):
        assert 0 < before.end - after.start <= 40
    no_overlap = chunk_document("p", doc, ChunkSettings(max_chars=250, overlap_chars=0))
    assert all(b.end <= a.start for b, a in itertools.pairwise(no_overlap))


def test_a_word_longer_than_max_chars_is_cut_hard() -> None:
    doc = parse_document(("x" * 450).encode(), filename="x.txt")
    chunks = chunk_document("x", doc, ChunkSettings(max_chars=200, overlap_chars=10))
    assert [len(c.text) for c in chunks][:2] == [200, 200]
    assert chunks[-1].end == 450


def test_pdf_chunks_carry_the_page_they_start_on() -> None:
    doc = parse_document(make_pdf([["One."], ["Two."], ["Three."]]), filename="p.pdf")
    chunks = chunk_document("p", doc, ChunkSettings(max_chars=100, overlap_chars=0))
    assert [(c.text, c.page) for c in chunks] == [("One.\n\nTwo.\n\nThree.", 1)]
    pages = [[f"Page {n} " + " ".join(WORDS[:8])] for n in range(1, 4)]
    doc = parse_document(make_pdf(pages), filename="q.pdf")
    chunks = chunk_document("q", doc, ChunkSettings(max_chars=100, overlap_chars=0))
    assert [(c.text.split()[1], c.page) for c in chunks] == [("1", 1), ("2", 2), ("3", 3)]


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"maxChars": 50}, "maxChars"),
        ({"maxChars": 30_000}, "maxChars"),
        ({"maxChars": 200, "overlapChars": 100}, "overlapChars"),
        ({"overlapChars": -1}, "overlapChars"),
        ({"splitBy": "sentence"}, "splitBy"),
    ],
)
def test_bad_settings_name_the_field(spec: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidError, match=f"chunking.{field}") as caught:
        ChunkSettings.from_spec(spec)
    assert caught.value.details == {"field": field}


def test_settings_from_a_spec_take_the_defaults_for_what_is_absent() -> None:
    assert ChunkSettings.from_spec(None) == ChunkSettings(1200, 150, "heading")
    assert ChunkSettings.from_spec({"maxChars": 500, "splitBy": "paragraph"}) == ChunkSettings(500, 150, "paragraph")
