"""Parsed documents to chunks: the pieces a knowledge base indexes, retrieves and cites.

Settings (:class:`ChunkSettings`, a knowledge base's ``chunking``):

- ``maxChars`` (default 1,200): the most characters in one chunk;
- ``overlapChars`` (default 150, less than half of ``maxChars``): how much of the previous chunk's end a
  chunk repeats, cut at a word boundary, so that a passage split between two chunks is whole in one;
- ``splitBy``: ``heading`` (default) starts a new chunk at every heading, so a chunk never mixes two
  sections; ``paragraph`` packs paragraphs regardless of headings (for documents whose headings are
  dense or meaningless).

Blocks (paragraphs, list items, table rows, headings) are packed whole while they fit; a block longer
than ``maxChars`` is cut at the last sentence end or space before the limit. Every chunk is a slice of
the parsed text: ``text == document.text[start:end]``, with its ordinal in the document, the path of the
headings it sits under and, for a PDF, its page.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from dockyard_core.errors import InvalidError
from dockyard_core.knowledge.parsing import Block, ParsedDocument

SplitBy = Literal["heading", "paragraph"]
_SENTENCE_END = re.compile(r"[.!?;:]\s")


@dataclass(frozen=True)
class ChunkSettings:
    max_chars: int = 1200
    overlap_chars: int = 150
    split_by: SplitBy = "heading"

    def __post_init__(self) -> None:
        if not 100 <= self.max_chars <= 20_000:
            raise InvalidError("chunking.maxChars must be between 100 and 20000", details={"field": "maxChars"})
        if not 0 <= self.overlap_chars < self.max_chars // 2:
            raise InvalidError(
                "chunking.overlapChars must be at least 0 and less than half of maxChars",
                details={"field": "overlapChars"},
            )
        if self.split_by not in ("heading", "paragraph"):
            raise InvalidError("chunking.splitBy must be heading or paragraph", details={"field": "splitBy"})

    @classmethod
    def from_spec(cls, spec: dict[str, Any] | None) -> ChunkSettings:
        """From a resource's camelCase ``chunking`` (absent fields take the defaults)."""
        spec = spec or {}
        default = cls()
        return cls(
            max_chars=int(spec.get("maxChars", default.max_chars)),
            overlap_chars=int(spec.get("overlapChars", default.overlap_chars)),
            split_by=spec.get("splitBy", default.split_by),
        )


@dataclass(frozen=True)
class Chunk:
    document_id: str
    ordinal: int
    text: str
    start: int
    end: int
    heading_path: tuple[str, ...]
    page: int | None = None


def chunk_document(document_id: str, document: ParsedDocument, settings: ChunkSettings | None = None) -> list[Chunk]:
    settings = settings or ChunkSettings()
    spans: list[tuple[int, int, Block]] = []
    for group in _groups(document.blocks, settings.split_by):
        spans.extend(_pack(document.text, group, settings))
    return [
        Chunk(document_id, ordinal, document.text[start:end], start, end, anchor.heading_path, anchor.page)
        for ordinal, (start, end, anchor) in enumerate(spans)
    ]


def _groups(blocks: tuple[Block, ...], split_by: SplitBy) -> Iterator[list[Block]]:
    """Runs of blocks no chunk crosses: each heading starts a new one (``heading``), or one run."""
    group: list[Block] = []
    for block in blocks:
        if split_by == "heading" and block.heading_level and group:
            yield group
            group = []
        group.append(block)
    if group:
        yield group


def _pack(text: str, blocks: list[Block], settings: ChunkSettings) -> Iterator[tuple[int, int, Block]]:
    limit, overlap = settings.max_chars, settings.overlap_chars
    start = end = -1
    anchor = blocks[0]
    for block in blocks:
        if block.end - block.start > limit:
            if start >= 0:
                yield start, end, anchor
                start = -1
            yield from ((s, e, block) for s, e in _split_long(text, block.start, block.end, limit, overlap))
        elif start < 0:
            start, end, anchor = block.start, block.end, block
        elif block.end - start <= limit:
            end = block.end
        else:
            yield start, end, anchor
            carried = _word_start(text, max(start, end - overlap), end) if overlap else end
            start = carried if block.end - carried <= limit and carried < end else block.start
            end, anchor = block.end, block
    if start >= 0:
        yield start, end, anchor


def _split_long(text: str, start: int, end: int, limit: int, overlap: int) -> Iterator[tuple[int, int]]:
    """Windows of at most ``limit`` over one long block, each cut at a sentence end or a space in the
    second half of the window when there is one, each starting ``overlap`` before the last one's end."""
    while start < end:
        stop = min(start + limit, end)
        if stop < end:
            window = text[start + limit // 2 : stop]
            sentence = [m.end() for m in _SENTENCE_END.finditer(window)]
            space = window.rfind(" ")
            cut = sentence[-1] if sentence else (space + 1 if space >= 0 else 0)
            if cut:
                stop = start + limit // 2 + cut
        yield start, _trim_end(text, start, stop)
        if stop >= end:
            return
        following = _word_start(text, max(start + 1, stop - overlap), stop) if overlap else stop
        start = following if following < stop else stop
        while start < end and text[start].isspace():
            start += 1


def _word_start(text: str, position: int, stop: int) -> int:
    """The first word start at or after ``position`` (``stop`` when none before it)."""
    if position > 0 and not text[position - 1].isspace():
        while position < stop and not text[position].isspace():
            position += 1
    while position < stop and text[position].isspace():
        position += 1
    return position


def _trim_end(text: str, start: int, stop: int) -> int:
    while stop > start + 1 and text[stop - 1].isspace():
        stop -= 1
    return stop
