"""The checklist item "Knowledge bases connected and indexed", computed from the KnowledgeBase versions the
active version pins (dockyard_operator.knowledge_items, through environments.checklist)."""

from __future__ import annotations

from typing import Any

from dockyard_operator import environments as envs

CONTENT = {"knowledgeBaseVersions": [{"name": "harbour", "version": "1.0.0"}, {"name": "fees", "version": "2.0.0"}]}


def _kb(phase: str = "Ready", docs: tuple[str, ...] = ("a.md",), indexed: tuple[str, ...] = ("a.md",),
        **status: Any) -> dict[str, Any]:  # fmt: skip
    return {
        "spec": {"documents": [{"name": d, "fileId": f"f-{d}"} for d in docs]},
        "status": {"phase": phase, "activeGeneration": 3 if phase == "Ready" else None, "chunks": 7,
                   "indexed": [{"name": d, "fileId": f"f-{d}"} for d in indexed], **status},
    }  # fmt: skip


def _item(content: dict[str, Any], found: dict[str, Any]) -> tuple[str, str]:
    items = envs.checklist(content=content, tool_jobs={}, key_count=1, version_found=True, knowledge_bases=found)
    got = next(i for i in items if i.item == "Knowledge bases connected and indexed")
    assert got.category == "Configuration"
    return got.state, got.detail


def test_done_when_every_pinned_knowledge_base_is_ready_with_every_document_indexed() -> None:
    assert _item(CONTENT, {"harbour-1.0.0": _kb(), "fees-2.0.0": _kb()}) == (
        "Done",
        "2 knowledge base(s) Ready, every document indexed (14 chunks)",
    )
    assert _item({}, {}) == ("Done", "the version searches no knowledge base")
    assert "Knowledge bases connected and indexed" not in envs.MANUAL


def test_not_done_names_each_knowledge_base_and_why() -> None:
    state, detail = _item(
        CONTENT,
        {"harbour-1.0.0": _kb(phase="Indexing", message=""), "fees-2.0.0": None},
    )
    assert state == "NotDone"
    assert "harbour-1.0.0: Indexing (not indexed yet)" in detail
    assert "fees-2.0.0: does not exist" in detail
    state, detail = _item(CONTENT, {"harbour-1.0.0": _kb(docs=("a.md", "b.pdf")), "fees-2.0.0": _kb(docs=())})
    assert state == "NotDone"
    assert "harbour-1.0.0: 1 document(s) not indexed (b.pdf)" in detail
    assert "fees-2.0.0: has no documents" in detail
    failed = _kb(phase="Failed", message="the indexing process exited with 1")
    assert _item(CONTENT, {"harbour-1.0.0": failed, "fees-2.0.0": _kb()})[1] == (
        "harbour-1.0.0: Failed (the indexing process exited with 1)"
    )
