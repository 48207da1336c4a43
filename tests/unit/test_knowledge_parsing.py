"""Documents to text: each format through its library (markdown-it-py, selectolax, pypdf), blocks with
offsets into the text and their heading path, and one error type with the reason for what cannot be read."""

from __future__ import annotations

import io

import pytest
from pypdf import PdfReader, PdfWriter

from dockyard_core.knowledge import DocumentError, ParsedDocument, parse_document
from dockyard_core.knowledge.parsing import MAX_DOCUMENT_BYTES, media_type_of
from tests.support.knowledge import make_pdf


def blocks(doc: ParsedDocument) -> list[tuple[str, tuple[str, ...]]]:
    for block in doc.blocks:  # every block is a slice of the text, and the text is the blocks joined
        assert doc.text[block.start : block.end] == doc.block_text(block)
    assert doc.text == "\n\n".join(doc.block_text(b) for b in doc.blocks)
    return [(doc.block_text(b), b.heading_path) for b in doc.blocks]


def test_plain_text_is_split_into_paragraphs_at_blank_lines() -> None:
    doc = parse_document("\ufeffFirst line\nstill first.\n\n\n  Second   paragraph.\t\n".encode(), filename="a.txt")
    assert doc.media_type == "text/plain"
    assert doc.title == "First line"
    assert blocks(doc) == [("First line\nstill first.", ()), ("Second paragraph.", ())]
    assert parse_document("Ünïcode with a BOM".encode("utf-16"), filename="w.txt").text == "Ünïcode with a BOM"


def test_markdown_headings_make_the_path_and_markup_is_dropped() -> None:
    source = """# Guide

Intro with *emphasis*, `code` and a [link](https://example.org) ![alt text](x.png).

## Install

- item one
- item two

| key | value |
|-----|-------|
| a   | 1     |

```
code line
  indented
```

### Deeper

Text.

## Use

Last.
"""
    doc = parse_document(source.encode(), filename="guide.md")
    assert doc.title == "Guide"
    assert blocks(doc) == [
        ("Guide", ("Guide",)),
        ("Intro with emphasis, code and a link alt text.", ("Guide",)),
        ("Install", ("Guide", "Install")),
        ("item one", ("Guide", "Install")),
        ("item two", ("Guide", "Install")),
        ("key | value", ("Guide", "Install")),
        ("a | 1", ("Guide", "Install")),
        ("code line\n  indented", ("Guide", "Install")),
        ("Deeper", ("Guide", "Install", "Deeper")),
        ("Text.", ("Guide", "Install", "Deeper")),
        ("Use", ("Guide", "Use")),  # a level-2 heading closes the level-3 one
        ("Last.", ("Guide", "Use")),
    ]
    assert [b.heading_level for b in doc.blocks if b.heading_level] == [1, 2, 3, 2]


def test_html_text_by_block_without_scripts_styles_or_the_head() -> None:
    page = """<!doctype html><html><head><title> The  Page </title><style>p{}</style></head><body>
    <nav><a href="/">Home</a></nav>
    <h1>Top</h1><p>Para <b>bold</b>
    one &amp; more.</p><ul><li>l1</li><li><p>l2</p></li></ul>
    <table><tr><th>a</th><th>b</th></tr><tr><td>1</td><td>2</td></tr></table>
    <h2>Sub</h2><div>div text<br>next line</div><script>alert("no")</script><pre>a
  b</pre><noscript>no</noscript></body></html>"""
    doc = parse_document(page.encode(), media_type="text/html; charset=utf-8")
    assert doc.title == "The Page"
    assert blocks(doc) == [
        ("Home", ()),
        ("Top", ("Top",)),
        ("Para bold one & more.", ("Top",)),
        ("l1", ("Top",)),
        ("l2", ("Top",)),
        ("a | b", ("Top",)),
        ("1 | 2", ("Top",)),
        ("Sub", ("Top", "Sub")),
        ("div text\nnext line", ("Top", "Sub")),
        ("a\n  b", ("Top", "Sub")),
    ]


def test_deeply_nested_html_does_not_exhaust_the_stack() -> None:
    page = "<div>" * 20_000 + "deep text" + "</div>" * 20_000
    assert blocks(parse_document(page.encode(), filename="deep.html")) == [("deep text", ())]


def test_pdf_text_by_page_with_the_title_from_its_metadata() -> None:
    data = make_pdf([["Harbour pilots board ships.", "They guide (them) in."], ["Page two text."]], title="Pilots")
    doc = parse_document(data, filename="pilots.pdf")
    assert doc.media_type == "application/pdf"
    assert doc.title == "Pilots"
    assert blocks(doc) == [("Harbour pilots board ships.\nThey guide (them) in.", ()), ("Page two text.", ())]
    assert [b.page for b in doc.blocks] == [1, 2]
    assert parse_document(data, media_type="application/octet-stream").media_type == "application/pdf"  # sniffed


def test_a_truncated_or_damaged_pdf_fails_with_the_reason() -> None:
    whole = make_pdf([["Some text."]])
    damaged = (
        whole[: len(whole) // 2],
        b"%PDF-1.4\n1 0 obj << /Type /Catalog >> garbage",
        whole.replace(b"/Pages", b"/Pagez"),
    )
    for broken in damaged:
        with pytest.raises(DocumentError, match="unreadable PDF") as caught:
            parse_document(broken, filename="broken.pdf")
        assert caught.value.code == "invalid_document"
        assert caught.value.details == {"document": "broken.pdf", "reason": caught.value.reason}
        assert caught.value.status_code == 422


def test_a_pdf_without_text_or_with_a_password_fails_with_the_reason() -> None:
    with pytest.raises(DocumentError, match="no extractable text"):
        parse_document(make_pdf([[], []]), filename="scan.pdf")
    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(make_pdf([["Secret."]]))))
    writer.encrypt("pw", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    with pytest.raises(DocumentError, match="encrypted with a password"):
        parse_document(out.getvalue(), filename="locked.pdf")


@pytest.mark.parametrize(
    ("data", "filename", "reason"),
    [
        (b"caf\xe9 au lait", "a.txt", "not UTF-8 text \\(invalid byte at offset 3\\)"),
        (b"abc\x00def", "a.md", "binary content"),
        (b"   \n\n  ", "empty.txt", "has no text"),
        (b"<html><body><script>x</script></body></html>", "a.html", "has no text"),
        (b"PK\x03\x04", "sheet.xlsx", "unsupported document type '.xlsx'"),
    ],
)
def test_unreadable_documents_fail_with_one_error_type_and_the_reason(data: bytes, filename: str, reason: str) -> None:
    with pytest.raises(DocumentError, match=reason) as caught:
        parse_document(data, filename=filename, name="doc-1")
    assert str(caught.value).startswith("document 'doc-1': ")


def test_too_large_documents_are_refused_before_parsing() -> None:
    with pytest.raises(DocumentError, match="larger than"):
        parse_document(b"x" * (MAX_DOCUMENT_BYTES + 1), filename="big.txt")


def test_media_type_from_the_given_type_the_extension_or_the_pdf_signature() -> None:
    assert media_type_of("x.PDF") == "application/pdf"
    assert media_type_of("notes.markdown") == "text/markdown"
    assert media_type_of("page.htm") == "text/html"
    assert media_type_of("x.bin", "text/markdown; charset=utf-8") == "text/markdown"
    assert media_type_of("x.bin", "application/xhtml+xml") == "text/html"
    assert media_type_of("", "", b"%PDF-1.7") == "application/pdf"
    assert media_type_of("x.docx") == ""
