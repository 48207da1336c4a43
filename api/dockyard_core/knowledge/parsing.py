"""Documents to text: plain text, Markdown (markdown-it-py), HTML (selectolax's Lexbor parser) and PDF
(pypdf), each to one :class:`ParsedDocument`: its plain text and its blocks (a heading, a paragraph, a
list item, a table row, a code block, a PDF page's paragraph), each with its offsets in that text, the
path of headings it sits under and, for a PDF, its page.

A document that cannot be read raises :class:`DocumentError` with the reason (not UTF-8, a broken or
encrypted PDF, a PDF without extractable text, an unsupported type, no text at all); the reason is meant
for the import's status, so it names the problem and never the document's content.
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import PurePosixPath

from markdown_it import MarkdownIt
from markdown_it.token import Token
from pypdf import PdfReader
from pypdf.errors import FileNotDecryptedError
from selectolax.lexbor import LexborHTMLParser, LexborNode

from dockyard_core.errors import InvalidError

MAX_DOCUMENT_BYTES = 64 * 1024 * 1024
"""The largest document parsed (64 MiB): larger ones fail with a reason instead of filling memory."""

MEDIA_TYPES = {
    ".txt": "text/plain",
    ".text": "text/plain",
    ".md": "text/markdown",
    ".markdown": "text/markdown",
    ".html": "text/html",
    ".htm": "text/html",
    ".pdf": "application/pdf",
}
SUPPORTED = frozenset(MEDIA_TYPES.values())


class DocumentError(InvalidError):
    """A document that cannot be parsed; ``reason`` says why (answered as 422 ``invalid_document``)."""

    code = "invalid_document"

    def __init__(self, reason: str, *, document: str = "") -> None:
        self.reason = reason
        self.document = document
        where = f"document {document!r}: " if document else ""
        super().__init__(f"{where}{reason}", details={"document": document, "reason": reason})


@dataclass(frozen=True)
class Block:
    """One block of a document: ``text == ParsedDocument.text[start:end]``."""

    start: int
    end: int
    heading_path: tuple[str, ...]
    heading_level: int = 0
    """1-6 for a heading block (its own title is the last item of ``heading_path``), else 0."""
    page: int | None = None
    """The 1-based page of a PDF's block; None for other formats."""


@dataclass(frozen=True)
class ParsedDocument:
    media_type: str
    title: str
    text: str
    """The blocks' texts joined by blank lines."""
    blocks: tuple[Block, ...]

    def block_text(self, block: Block) -> str:
        return self.text[block.start : block.end]


def media_type_of(filename: str = "", media_type: str = "", data: bytes = b"") -> str:
    """The media type to parse with: the given one (without parameters), else the file name's extension,
    else ``%PDF-`` at the start of the data; "" when none fits."""
    given = media_type.split(";", 1)[0].strip().lower()
    if given in SUPPORTED:
        return given
    if given in ("text/x-markdown", "application/xhtml+xml"):
        return "text/markdown" if "markdown" in given else "text/html"
    found = MEDIA_TYPES.get(PurePosixPath(filename.lower()).suffix, "")
    if found:
        return found
    return "application/pdf" if data.startswith(b"%PDF-") else ""


def parse_document(data: bytes, *, filename: str = "", media_type: str = "", name: str = "") -> ParsedDocument:
    """Parse ``data`` by its media type (:func:`media_type_of`). Raises :class:`DocumentError`."""
    document = name or filename
    kind = media_type_of(filename, media_type, data)
    if not kind:
        raise DocumentError(
            f"unsupported document type {media_type or PurePosixPath(filename).suffix or 'unknown'!r}: "
            "text, Markdown, HTML and PDF are supported",
            document=document,
        )
    if len(data) > MAX_DOCUMENT_BYTES:
        raise DocumentError(f"{len(data)} bytes: larger than {MAX_DOCUMENT_BYTES} bytes", document=document)
    try:
        if kind == "application/pdf":
            parsed = _pdf(data)
        else:
            text = _decode(data)
            parsed = {"text/plain": _plain, "text/markdown": _markdown, "text/html": _html}[kind](text)
    except DocumentError as exc:
        raise DocumentError(exc.reason, document=document) from exc
    if not parsed.blocks:
        raise DocumentError("the document has no text", document=document)
    return parsed


def _decode(data: bytes) -> str:
    """UTF-8 (a BOM dropped), or UTF-16 when it starts with its BOM."""
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            return data.decode("utf-16")
        except UnicodeDecodeError as exc:
            raise DocumentError(f"not UTF-16 text (invalid bytes at offset {exc.start})") from exc
    if b"\x00" in data[:8192]:
        raise DocumentError("binary content (NUL bytes), not text")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise DocumentError(f"not UTF-8 text (invalid byte at offset {exc.start})") from exc


_SPACES = re.compile(r"[ \t\r\f\v\u00a0]+")
_BLANK_LINES = re.compile(r"\n\s*\n")


def _squash(text: str) -> str:
    """Runs of spaces to one, lines trimmed, no blank lines."""
    lines = (_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    return "\n".join(line for line in lines if line)


class _Builder:
    """Appends blocks to one text, tracking the heading path."""

    def __init__(self, media_type: str) -> None:
        self.media_type = media_type
        self.parts: list[str] = []
        self.length = 0
        self.blocks: list[Block] = []
        self.headings: list[tuple[int, str]] = []
        self.title = ""

    def path(self) -> tuple[str, ...]:
        return tuple(title for _, title in self.headings)

    def heading(self, level: int, text: str) -> None:
        text = _squash(text).replace("\n", " ")
        if not text:
            return
        while self.headings and self.headings[-1][0] >= level:
            self.headings.pop()
        self.headings.append((level, text))
        self.title = self.title or text
        self._append(text, level)

    def paragraph(self, text: str, *, keep_lines: bool = False, page: int | None = None) -> None:
        text = text.strip("\n") if keep_lines else _squash(text)
        if text.strip():
            self._append(text, 0, page)

    def _append(self, text: str, level: int, page: int | None = None) -> None:
        if self.parts:
            self.parts.append("\n\n")
            self.length += 2
        start = self.length
        self.parts.append(text)
        self.length += len(text)
        self.blocks.append(Block(start, self.length, self.path(), level, page))

    def build(self, title: str = "") -> ParsedDocument:
        return ParsedDocument(self.media_type, title or self.title, "".join(self.parts), tuple(self.blocks))


def _plain(text: str) -> ParsedDocument:
    out = _Builder("text/plain")
    for paragraph in _BLANK_LINES.split(text):
        out.paragraph(paragraph)
    first = out.build()
    return ParsedDocument(first.media_type, _first_line(first.text), first.text, first.blocks)


def _first_line(text: str) -> str:
    return text.split("\n", 1)[0][:200]


_MARKDOWN = MarkdownIt("commonmark").enable("table")


def _inline_text(token: Token) -> str:
    """The plain text of an inline token: markup dropped, images by their alt text, soft breaks as spaces."""
    parts: list[str] = []
    for child in token.children or []:
        if child.type in ("text", "code_inline", "html_inline"):
            parts.append(child.content if child.type != "html_inline" else "")
        elif child.type == "softbreak":
            parts.append(" ")
        elif child.type == "hardbreak":
            parts.append("\n")
        elif child.type == "image":
            parts.append(_inline_text(child))
    return "".join(parts)


def _markdown(text: str) -> ParsedDocument:
    out = _Builder("text/markdown")
    tokens = _MARKDOWN.parse(text)
    row: list[str] | None = None
    for i, token in enumerate(tokens):
        if token.type == "heading_open":
            out.heading(int(token.tag[1:]), _inline_text(tokens[i + 1]))
        elif token.type == "inline" and i and tokens[i - 1].type == "paragraph_open":
            out.paragraph(_inline_text(token))
        elif token.type in ("fence", "code_block"):
            out.paragraph(token.content, keep_lines=True)
        elif token.type == "html_block":
            out.paragraph(LexborHTMLParser(token.content).text(separator=" "))
        elif token.type == "tr_open":
            row = []
        elif token.type == "inline" and row is not None:
            row.append(_squash(_inline_text(token)))
        elif token.type == "tr_close" and row is not None:
            out.paragraph(" | ".join(row))
            row = None
    return out.build()


# Elements whose start and end end the current block of text; headings and table cells apart.
_BLOCKS = frozenset(
    [
        "address",
        "article",
        "aside",
        "blockquote",
        "body",
        "caption",
        "dd",
        "details",
        "dialog",
        "div",
        "dl",
        "dt",
        "fieldset",
        "figcaption",
        "figure",
        "footer",
        "form",
        "header",
        "hgroup",
        "hr",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "pre",
        "section",
        "summary",
        "table",
        "tbody",
        "thead",
        "tfoot",
        "tr",
        "ul",
    ]
)
_SKIPPED = frozenset(
    ["script", "style", "noscript", "template", "svg", "math", "head", "iframe", "object", "canvas", "button", "select"]
)
_HEADINGS = {f"h{n}": n for n in range(1, 7)}


def _html(text: str) -> ParsedDocument:
    tree = LexborHTMLParser(text)
    title_node = tree.css_first("title")
    title = _squash(title_node.text()) if title_node is not None else ""
    out = _Builder("text/html")
    root = tree.body or tree.root
    if root is not None:
        _walk_html(root, out)
    return out.build(title.replace("\n", " "))


def _walk_html(root: LexborNode, out: _Builder) -> None:
    """Depth first without recursion (a deeply nested page cannot exhaust the stack): text nodes fill a
    buffer that each block element's start and end flushes as a paragraph; a heading flushes as one."""
    buffer: list[str] = []
    preformatted = 0

    def flush() -> None:
        if buffer:
            out.paragraph("".join(buffer), keep_lines=preformatted > 0)
            buffer.clear()

    stack: list[tuple[LexborNode, bool]] = [(root, False)]
    while stack:
        node, leaving = stack.pop()
        tag = node.tag or ""
        if leaving:
            if tag in _HEADINGS:
                out.heading(_HEADINGS[tag], "".join(buffer))
                buffer.clear()
            elif tag in _BLOCKS:
                if tag == "tr" and buffer and buffer[-1] == " | ":
                    buffer.pop()
                flush()
                preformatted -= tag == "pre"
            elif tag in ("td", "th"):
                buffer.append(" | ")
            continue
        if node.is_text_node:
            text = node.text_content or ""
            buffer.append(text if preformatted else text.replace("\n", " "))  # source line breaks are spaces
            continue
        if not node.is_element_node or tag in _SKIPPED:
            continue
        if tag == "br":
            buffer.append("\n")
            continue
        if tag in _BLOCKS or tag in _HEADINGS:
            flush()
            preformatted += tag == "pre"
        stack.append((node, True))
        stack.extend((child, False) for child in reversed(list(_children(node))))
    flush()


def _children(node: LexborNode) -> Iterable[LexborNode]:
    child = node.first_child
    while child is not None:
        yield child
        child = child.next


def _pdf(data: bytes) -> ParsedDocument:
    # pypdf's own error types do not cover every way a damaged file breaks it (a bad stream can raise
    # ValueError, KeyError, TypeError or an AssertionError deep in a filter), and the document is untrusted
    # input: whatever pypdf raises becomes the document's reason, named by its type.
    out = _Builder("application/pdf")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted and not reader.decrypt(""):
            raise DocumentError("the PDF is encrypted with a password")
        metadata = reader.metadata
        title = str(metadata.title or "") if metadata is not None else ""
        for number, page in enumerate(reader.pages, start=1):
            for paragraph in _BLANK_LINES.split(page.extract_text() or ""):
                out.paragraph(paragraph, page=number)
    except DocumentError:
        raise
    except FileNotDecryptedError as exc:
        raise DocumentError("the PDF is encrypted with a password") from exc
    except Exception as exc:
        raise DocumentError(f"unreadable PDF ({type(exc).__name__}: {str(exc)[:200]})") from exc
    if not out.blocks:
        raise DocumentError("the PDF has no extractable text (a scanned PDF needs OCR first)")
    return out.build(title or _first_line(out.parts[0]))
