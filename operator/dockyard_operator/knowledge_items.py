"""The checklist item "Knowledge bases connected and indexed" (docs/apps-environments.md, docs/knowledge-bases.md),
pure: computed from the KnowledgeBase versions the active version pins."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def pinned_knowledge_bases(content: Mapping[str, Any] | None) -> list[str]:
    """The KnowledgeBase objects (``<name>-<version>``) a version's ``knowledgeBaseVersions`` pins."""
    return [f"{r.get('name')}-{r.get('version')}" for r in (content or {}).get("knowledgeBaseVersions") or []]


def knowledge_item(
    content: Mapping[str, Any] | None, found: Mapping[str, Mapping[str, Any] | None], version_found: bool
) -> tuple[str, str]:
    """Done when every knowledge base the version pins is Ready with an active generation and every one of
    its documents indexed (none pending, none failed); otherwise NotDone naming each that is not and why.
    ``found``: the pinned KnowledgeBases by object name (None: it does not exist)."""
    pinned = pinned_knowledge_bases(content)
    if not pinned:
        return ("Done" if version_found else "NotDone"), "the version searches no knowledge base"
    problems = []
    chunks = 0
    for name in pinned:
        kb = found.get(name)
        if kb is None:
            problems.append(f"{name}: does not exist")
            continue
        status = kb.get("status") or {}
        indexed = {(d.get("name"), d.get("fileId")) for d in status.get("indexed") or []}
        documents = (kb.get("spec") or {}).get("documents") or []
        waiting = [d["name"] for d in documents if (d.get("name"), d.get("fileId")) not in indexed]
        if status.get("phase") != "Ready" or status.get("activeGeneration") is None:
            why = status.get("message") or "not indexed yet"
            problems.append(f"{name}: {status.get('phase', 'Pending')} ({why})")
        elif not documents:
            problems.append(f"{name}: has no documents")
        elif waiting:
            shown = ", ".join(waiting[:5]) + (f" and {len(waiting) - 5} more" if len(waiting) > 5 else "")
            problems.append(f"{name}: {len(waiting)} document(s) not indexed ({shown})")
        chunks += int(status.get("chunks") or 0)
    if problems:
        return "NotDone", "; ".join(problems)
    return "Done", f"{len(pinned)} knowledge base(s) Ready, every document indexed ({chunks} chunks)"
