"""The console's Knowledge bases pages (docs/knowledge-bases.md): the namespace's knowledge base versions with
their index state, and one version's documents (indexed, pending or failed with the reason; chunks, bytes,
last indexed, errors) with its actions: upload a document (parsed at once, as a completed import; one that
cannot be read is refused with the reason), delete a document, re-index. As the signed-in person, through
the knowledge-bases service (:mod:`dockyard_api.public.knowledge.service`)."""

from __future__ import annotations

from typing import Any

import anyio
from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse
from starlette.datastructures import UploadFile

from dockyard_api.console.common import Ctx, context, form, page, redirect, render
from dockyard_api.deps import DocumentName, NamespaceParam, VersionParam, app_state
from dockyard_api.deps import KnowledgeBaseName as KbName
from dockyard_api.public.imports.documents import store_document
from dockyard_api.public.knowledge.service import KnowledgeService
from dockyard_core.errors import DockyardError

routes = APIRouter(include_in_schema=False)

MAX_UPLOAD_BYTES = 32 * 1024 * 1024
"""A document uploaded in the console (one request); larger ones go through the chunked import (dockyard kb import)."""


async def _service(ctx: Ctx) -> KnowledgeService:
    state = app_state(ctx.request)
    user = await state.authenticator.user(f"Bearer {ctx.session.token}")
    return KnowledgeService(state.kube, state.imports.documents.files, user=user)


def _indexing(kb: dict[str, Any]) -> bool:
    """A run is on its way (the page refreshes): indexing, waiting, or a change not indexed yet (a failed
    run waits for the next change)."""
    status = kb["status"]
    return status["phase"] in ("Pending", "Indexing") or (status["phase"] != "Failed" and not status["upToDate"])


@routes.get("/ns/{namespace}/knowledge", response_class=HTMLResponse)
@page
async def knowledge_bases(request: Request, namespace: NamespaceParam) -> Response:
    ctx = await context(request, namespace)
    found = await (await _service(ctx)).list(namespace)
    busy = any(_indexing(k) for k in found)
    return render(ctx, "knowledge.html", knowledgeBases=found, busy=busy)


@routes.get("/ns/{namespace}/knowledge/{name}/{version}", response_class=HTMLResponse)
@page
async def knowledge_base(request: Request, namespace: NamespaceParam, name: KbName, version: VersionParam) -> Response:
    ctx = await context(request, namespace)
    kb = await (await _service(ctx)).get(namespace, name, version)
    busy = _indexing(kb)
    return render(ctx, "knowledge_base.html", kb=kb, busy=busy, maxUpload=MAX_UPLOAD_BYTES)


def _here(ctx: Ctx, name: str, version: str) -> str:
    return f"{ctx.base}/knowledge/{name}/{version}"


@routes.post("/ns/{namespace}/knowledge/{name}/{version}/documents", response_class=HTMLResponse)
@page
async def upload(request: Request, namespace: NamespaceParam, name: KbName, version: VersionParam) -> Response:
    ctx = await context(request, namespace)
    sent = (await form(ctx)).get("document")
    if not isinstance(sent, UploadFile) or not sent.filename:
        return redirect(ctx, _here(ctx, name, version), {"error": "Choose a document to upload."})
    data = await sent.read(MAX_UPLOAD_BYTES + 1)
    if len(data) > MAX_UPLOAD_BYTES:
        limit = MAX_UPLOAD_BYTES // 1024 // 1024
        why = f"{sent.filename} is larger than {limit} MiB: import it in chunks (dockyard kb import)."
        return redirect(ctx, _here(ctx, name, version), {"error": why})
    if not data:
        return redirect(ctx, _here(ctx, name, version), {"error": f"{sent.filename} is empty."})
    files = app_state(request).imports.documents.files
    record = await anyio.to_thread.run_sync(store_document, files, namespace, sent.filename, data)
    if record["status"] != "SUCCESS":
        return redirect(
            ctx, _here(ctx, name, version), {"error": f"{sent.filename} cannot be read: {record['reason']}"}
        )
    try:
        await (await _service(ctx)).attach(namespace, name, version, record["fileId"], sent.filename)
    except DockyardError as error:
        return redirect(ctx, _here(ctx, name, version), {"error": f"{sent.filename}: {error.message}"})
    return redirect(ctx, _here(ctx, name, version), {"ok": f"{sent.filename} added; it is being indexed."})


@routes.post("/ns/{namespace}/knowledge/{name}/{version}/documents/{document}/delete", response_class=HTMLResponse)
@page
async def delete_document(
    request: Request, namespace: NamespaceParam, name: KbName, version: VersionParam, document: DocumentName
) -> Response:
    ctx = await context(request, namespace)
    await form(ctx)
    try:
        await (await _service(ctx)).detach(namespace, name, version, document)
    except DockyardError as error:
        return redirect(ctx, _here(ctx, name, version), {"error": f"{document}: {error.message}"})
    return redirect(
        ctx, _here(ctx, name, version), {"ok": f"{document} deleted; answers stop citing it once re-indexed."}
    )


@routes.post("/ns/{namespace}/knowledge/{name}/{version}/reindex", response_class=HTMLResponse)
@page
async def reindex(request: Request, namespace: NamespaceParam, name: KbName, version: VersionParam) -> Response:
    ctx = await context(request, namespace)
    await form(ctx)
    await (await _service(ctx)).reindex(namespace, name, version)
    return redirect(ctx, _here(ctx, name, version), {"ok": "Re-indexing into a new generation; agents keep answering."})
