"""The knowledge pages: a tenant's document collections, their documents and chunks, a search.

``/knowledge`` lists the active collections; ``/knowledge/{code}`` shows one:
its documents (each with its chunks, in document order, a page at a time),
an upload (admin keys) and a search with each hit's similarity and score.
Everything goes through ``ph.knowledge`` with the logged-in key's tenant.

``POST /ui/knowledge/{code}/upload`` answers Server-Sent Events while the
documents are read, chunked and embedded: ``progress`` for each step
(:class:`~pilothouse.types.IngestProgress`), then ``result`` (what became
of each document) or ``error`` (the refusal).
"""

from __future__ import annotations

__all__ = ["router"]

import asyncio
import json
from collections.abc import AsyncGenerator
from dataclasses import asdict
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse, StreamingResponse

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError, NotFoundError, PilothouseError
from pilothouse.server._ui._base import UiAdmin, UiFacade, render
from pilothouse.types import FileDocument, IngestProgress, IngestResult

router = APIRouter(include_in_schema=False)

CHUNKS_PAGE = 20
"""Chunks shown at a time."""
MAX_FILES = 20
"""Files one upload may hold."""


async def _collections(ph: Pilothouse) -> list[dict[str, str]]:
    return [
        {
            "code": e.key,
            "name": str(e.document.get("name") or ""),
            "store": str(e.document.get("store") or ""),
            "model": str(e.document.get("model") or "packaged MiniLM"),
        }
        for e in await ph.catalog.list_entries("document_collections", active=True)
    ]


async def _collection(ph: Pilothouse, code: str) -> dict[str, Any]:
    """The collection's catalog entry, as the page shows it; NotFoundError when inactive."""
    entry = await ph.catalog.get("document_collections", code)
    if not entry.active:
        raise NotFoundError(f"document collection '{code}' is inactive")
    return {"code": entry.key, **entry.document}


@router.get("/knowledge")
async def knowledge_home(request: Request, user: UiFacade) -> HTMLResponse:
    """The tenant's active document collections."""
    return render(
        request, "knowledge_list.html", user=user, collections=await _collections(user.ph)
    )


@router.get("/knowledge/{code}")
async def collection_page(request: Request, user: UiFacade, code: str) -> HTMLResponse:
    """One collection: its documents, an upload, a search."""
    collection = await _collection(user.ph, code)
    return render(
        request,
        "knowledge.html",
        user=user,
        collection=collection,
        documents=await user.ph.knowledge.documents(code),
        max_files=MAX_FILES,
    )


@router.get("/ui/knowledge/{code}/documents")
async def documents(request: Request, user: UiFacade, code: str) -> HTMLResponse:
    """The collection's documents (a fragment, refreshed after an upload)."""
    await _collection(user.ph, code)
    return render(
        request,
        "_knowledge_documents.html",
        collection={"code": code},
        documents=await user.ph.knowledge.documents(code),
    )


@router.get("/ui/knowledge/{code}/chunks")
async def chunks(
    request: Request,
    user: UiFacade,
    code: str,
    source: Annotated[str, Query(min_length=1, max_length=2000)],
    offset: Annotated[int, Query(ge=0)] = 0,
) -> HTMLResponse:
    """A document's chunks in document order, a page at a time (a fragment)."""
    found = await user.ph.knowledge.chunks(code, source, limit=CHUNKS_PAGE + 1, offset=offset)
    return render(
        request,
        "_knowledge_chunks.html",
        code=code,
        source=source,
        chunks=found[:CHUNKS_PAGE],
        offset=offset,
        more=len(found) > CHUNKS_PAGE,
        page=CHUNKS_PAGE,
    )


@router.get("/ui/knowledge/{code}/search")
async def search(
    request: Request,
    user: UiFacade,
    code: str,
    q: Annotated[str, Query(max_length=2000)] = "",
    top_k: Annotated[str, Query(max_length=4)] = "",
    mode: Literal["", "hybrid", "vector", "text"] = "",
) -> HTMLResponse:
    """Try a search: the hits with their similarity and score (a fragment).

    ``top_k`` left empty (the form's field untouched) is the collection's own.
    """
    if not q.strip():
        return render(request, "_notice.html", status_code=422, error="Type what to search for.")
    limit = None
    if top_k.strip():
        if not top_k.strip().isdigit() or not 1 <= int(top_k) <= 50:
            raise InvalidFieldError("top_k", f"must be a whole number from 1 to 50, not {top_k!r}")
        limit = int(top_k)
    result = await user.ph.knowledge.search(code, q, top_k=limit, mode=mode or None)
    return render(request, "_knowledge_hits.html", result=result, query=q)


def _sse(name: str, data: dict[str, Any]) -> bytes:
    return f"event: {name}\ndata: {json.dumps(data, default=str)}\n\n".encode()


def _result_json(result: IngestResult) -> dict[str, Any]:
    return {
        "documents": [asdict(d) for d in result.documents],
        "chunk_size": result.chunk_size,
        "model": result.model,
    }


async def _ingesting(
    ph: Pilothouse, code: str, uploads: list[FileDocument]
) -> AsyncGenerator[bytes]:
    """Run the ingestion in a task of its own; yield its progress as it comes."""
    steps: asyncio.Queue[IngestProgress | None] = asyncio.Queue()

    async def run() -> IngestResult:
        try:
            return await ph.knowledge.ingest(code, uploads, progress=steps.put_nowait)
        finally:
            steps.put_nowait(None)

    task = asyncio.create_task(run())
    try:
        while (step := await steps.get()) is not None:
            yield _sse("progress", asdict(step))
        try:
            result = task.result()
        except PilothouseError as exc:
            yield _sse("error", {"detail": str(exc), "category": exc.category.value})
            return
        yield _sse("result", _result_json(result))
    finally:
        # A browser that goes away stops the ingestion: documents already
        # written stay (each is its own transaction), the rest are not read.
        if not task.done():
            task.cancel()
            await asyncio.wait([task])


@router.post("/ui/knowledge/{code}/upload")
async def upload(request: Request, user: UiAdmin, code: str) -> StreamingResponse:
    """Upload files into the collection; the ingestion's progress as Server-Sent Events."""
    await _collection(user.ph, code)
    uploads: list[FileDocument] = []
    async with request.form(max_files=MAX_FILES) as form:
        unknown = sorted(set(form.keys()) - {"files"})
        if unknown:
            raise InvalidFieldError(unknown[0], "unknown form field (known: files)")
        for value in form.getlist("files"):
            if isinstance(value, str) or not value.filename:
                raise InvalidFieldError("files", "every file part needs a file name")
            name = value.filename
            uploads.append(FileDocument(source=name, data=await value.read(), file_name=name))
    if not uploads:
        raise InvalidFieldError("files", "choose at least one file")
    return StreamingResponse(
        _ingesting(user.ph, code, uploads),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
