"""The ``kb`` command group: knowledge bases through the public API (docs/knowledge-bases.md) with an
environment's API key: create a version, import documents (the chunked import with fileContext document,
then attached), list and show them with their index state, delete a document, re-index."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

import typer

from dockyard_client._calls import Call
from dockyard_client.client import DockyardClient
from dockyard_client.upload import ChunkedUpload

from .exits import EXIT_FAILED, errors
from .output import err, fields, print_json, table
from .state import CONTEXT, JsonFlag, state_of

kb_app = typer.Typer(
    help="Knowledge bases: documents imported, indexed and searched by agents (docs/knowledge-bases.md).",
    epilog="\b\nExamples:\n"
    "  dockyard kb create harbour 1.0.0 --embedding tiny-embed --description 'Port rules and fees'\n"
    "  dockyard kb import guide.md rules.pdf --kb harbour --version 1.0.0\n"
    "  dockyard kb show harbour 1.0.0\n"
    "  dockyard kb delete-document harbour 1.0.0 guide.md\n"
    "  dockyard kb reindex harbour 1.0.0",
    rich_markup_mode=None,
    no_args_is_help=True,
    context_settings=CONTEXT,
)

Name = Annotated[str, typer.Argument(metavar="NAME", help="the knowledge base's name")]
Version = Annotated[str, typer.Argument(metavar="VERSION", help="its version, MAJOR.MINOR.PATCH")]


def _path(client: DockyardClient, rest: str = "") -> str:
    return client.calls.public(f"/knowledge-bases{rest}")


def _send(client: DockyardClient, method: str, rest: str = "", body: Any = None) -> Any:
    return client.send(Call(method, _path(client, rest), "api-key", json=body))


def _where(name: str, version: str) -> str:
    return f"/{quote(name, safe='')}/{quote(version, safe='')}"


def _show(kb: dict[str, Any]) -> None:
    status = kb.get("status") or {}
    fields(
        [
            ("Knowledge base", f"{kb['name']} {kb['version']} ({kb['knowledgeBaseId']})"),
            ("Description", kb.get("description")),
            ("Embedding", (kb.get("embedding") or {}).get("modelDeployment") or "none (keyword search)"),
            ("Status", status.get("phase")),
            (
                "Indexed",
                f"{status.get('documents', 0)} document(s), {status.get('chunks', 0)} chunks, "
                f"{status.get('bytes', 0)} bytes",
            ),
            ("Last indexed", status.get("lastIndexed")),
            ("Message", status.get("message")),
        ]
    )
    table(
        ["DOCUMENT", "STATE", "CHUNKS", "BYTES", "ERROR"],
        [(d["name"], d["state"], d.get("chunks", 0), d.get("size", 0), d.get("error", "")) for d in kb["documents"]],
    )


@kb_app.command("list", epilog="\b\nExamples:\n  dockyard kb list\n  dockyard kb list --json")
def list_kbs(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """The knowledge base versions of the namespace with their index state."""
    with errors(json_output), state_of(ctx).client() as client:
        found = _send(client, "GET")["knowledgeBases"]
        if json_output:
            print_json(found)
            return
        table(
            ["NAME", "VERSION", "DOCUMENTS", "CHUNKS", "STATUS", "LAST INDEXED"],
            [
                (
                    k["name"],
                    k["version"],
                    k["status"]["documents"],
                    k["status"]["chunks"],
                    k["status"]["phase"],
                    k["status"].get("lastIndexed") or "",
                )
                for k in found
            ],
        )


@kb_app.command(
    "create",
    epilog=(
        "\b\n"
        "Examples:\n"
        '  dockyard kb create harbour 1.0.0 --embedding tiny-embed --description "Port rules and fees"\n'
        "  dockyard kb create notes 0.1.0 --mode keyword --max-chars 800 --overlap-chars 80"
    ),
)
def create(
    ctx: typer.Context,
    name: Name,
    version: Version,
    description: Annotated[str, typer.Option(help="what it holds (the agents' tool description)")] = "",
    embedding: Annotated[str | None, typer.Option(help="a ModelDeployment serving /v1/embeddings")] = None,
    max_chars: Annotated[int | None, typer.Option("--max-chars", help="characters per chunk")] = None,
    overlap_chars: Annotated[int | None, typer.Option("--overlap-chars", help="overlap between chunks")] = None,
    mode: Annotated[str | None, typer.Option(help="retrieval mode: hybrid, keyword or vector")] = None,
    top_k: Annotated[int | None, typer.Option("--top-k", help="passages per search")] = None,
    json_output: JsonFlag = False,
) -> None:
    """Create a knowledge base version (a KnowledgeBase named NAME-VERSION)."""
    chunking = {k: v for k, v in (("maxChars", max_chars), ("overlapChars", overlap_chars)) if v is not None}
    retrieval = {k: v for k, v in (("mode", mode), ("topK", top_k)) if v is not None}
    body: dict[str, Any] = {"name": name, "version": version, "description": description}
    if embedding:
        body["embedding"] = {"modelDeployment": embedding}
    if chunking:
        body["chunking"] = chunking
    if retrieval:
        body["retrieval"] = retrieval
    with errors(json_output), state_of(ctx).client() as client:
        kb = _send(client, "POST", body=body)
        print_json(kb) if json_output else _show(kb)


@kb_app.command(
    "show", epilog="\b\nExamples:\n  dockyard kb show harbour 1.0.0\n  dockyard kb show harbour 1.0.0 --json"
)
def show(ctx: typer.Context, name: Name, version: Version, json_output: JsonFlag = False) -> None:
    """A knowledge base version: its documents (indexed, pending or failed, with the reason) and its index."""
    with errors(json_output), state_of(ctx).client() as client:
        kb = _send(client, "GET", _where(name, version))
        print_json(kb) if json_output else _show(kb)


@kb_app.command(
    "import",
    epilog="\b\nExamples:\n  dockyard kb import guide.md rules.pdf --kb harbour --version 1.0.0\n"
    "  dockyard kb import docs/*.md --kb harbour --version 1.0.0 --json",
)
def import_documents(
    ctx: typer.Context,
    files: Annotated[list[Path], typer.Argument(exists=True, dir_okay=False, readable=True, help="documents")],
    kb: Annotated[str, typer.Option("--kb", help="the knowledge base's name")],
    version: Annotated[str, typer.Option("--version", help="its version")],
    json_output: JsonFlag = False,
) -> None:
    """Import documents (text, Markdown, HTML, PDF) through the chunked import (fileContext document) and attach
    each to the knowledge base version; one that cannot be read is reported with the reason and the others
    go on (exit status 1 when any failed)."""
    results: list[dict[str, Any]] = []
    with errors(json_output), state_of(ctx).client() as client:
        for file in files:
            upload = ChunkedUpload(client, file, file_context="document", retry_for=30.0, resume=False)
            plan = upload.prepare()
            if plan.completed_job is None:
                upload.start_hashing()
                upload.upload(plan, lambda _: None)
                upload.sha256()
            job = upload.complete(plan)
            upload.finished()
            entry: dict[str, Any] = {"file": str(file), "fileId": job.model_id, "status": job.status}
            if job.status != "SUCCESS":
                entry["reason"] = job.message
            else:
                attached = _send(client, "POST", _where(kb, version) + "/documents",
                                 {"fileId": job.model_id, "name": file.name})  # fmt: skip
                entry["document"] = attached["document"]["name"]
            results.append(entry)
            if not json_output:
                what = f"attached as {entry['document']}" if "document" in entry else f"FAILED: {entry['reason']}"
                err.print(f"{file}: {what}")
    if json_output:
        print_json(results)
    if any(r["status"] != "SUCCESS" for r in results):
        raise typer.Exit(EXIT_FAILED)


@kb_app.command("delete-document", epilog="\b\nExamples:\n  dockyard kb delete-document harbour 1.0.0 guide.md")
def delete_document(
    ctx: typer.Context,
    name: Name,
    version: Version,
    document: Annotated[str, typer.Argument(metavar="DOCUMENT", help="the document's name")],
    json_output: JsonFlag = False,
) -> None:
    """Delete a document: the next indexing run removes its chunks, and answers stop citing it."""
    with errors(json_output), state_of(ctx).client() as client:
        kb = _send(client, "DELETE", _where(name, version) + f"/documents/{quote(document, safe='')}")
        print_json(kb) if json_output else _show(kb)


@kb_app.command("reindex", epilog="\b\nExamples:\n  dockyard kb reindex harbour 1.0.0")
def reindex(ctx: typer.Context, name: Name, version: Version, json_output: JsonFlag = False) -> None:
    """Re-index from scratch into a new generation, switched to when it is ready (agents keep answering)."""
    with errors(json_output), state_of(ctx).client() as client:
        kb = _send(client, "POST", _where(name, version) + "/reindex")
        if json_output:
            print_json(kb)
        else:
            err.print(f"re-index of {name} {version} asked; follow it with: dockyard kb show {name} {version}")
