"""Knowledge routes: ingest into, search, list and delete the documents of a collection.

Under ``/v1/knowledge/collections/{code}``, scoped to the API key's tenant
(another tenant's collection is a 404, exactly as a missing one):

- ``POST .../documents`` ingests, from a ``multipart/form-data`` upload
  (``files``, optional ``metadata`` as a JSON object, optional ``reingest``)
  or a JSON body ``{urls, texts, metadata, reingest}``. Each document ends
  ``added``, ``replaced``, ``unchanged``, ``skipped`` or ``failed`` (with
  the reason; nothing of it written); the others go on. URLs (and their
  redirects) are checked against the egress policy. Admin scope: it writes.
- ``POST .../search`` runs retrieval ``{query, top_k, threshold, filters,
  mode, rerank}``; no model is called but the embedding model, and the
  collection's ``qa_model`` when the collection reranks.
- ``POST .../jobs`` starts the same ingestion in the background and answers
  202 with a job id at once; ``GET .../jobs/{job_id}`` reads its status and
  progress (documents done, chunks cut and embedded so far) and, when it is
  ``done``, the per-document result; a job whose process stopped reads
  ``failed`` with why. Another tenant's job is a 404.
- ``GET .../documents`` lists the documents; ``DELETE
  .../documents?source=...`` deletes one (admin; 404 when there is none).

Errors are ``application/problem+json`` like every route's.
"""

from __future__ import annotations

__all__ = ["router"]

import json
from typing import Annotated, Any, Literal, TypeVar, cast

from fastapi import APIRouter, Query, Request, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from pilothouse.api import loads_json
from pilothouse.errors import NotFoundError
from pilothouse.server._deps import AdminFacade, CheckedJsonRoute, Facade
from pilothouse.server._problems import (
    PROBLEM_RESPONSES,
    ProblemError,
    field_path,
    problem_responses,
)
from pilothouse.types import (
    DocumentInfo,
    FileDocument,
    IngestJobStatus,
    IngestResult,
    SearchResult,
    TextDocument,
)

router = APIRouter(
    prefix="/v1/knowledge/collections",
    tags=["knowledge"],
    responses=PROBLEM_RESPONSES,
    route_class=CheckedJsonRoute,
)

_M = TypeVar("_M", bound=BaseModel)

_MAX_FILES = 100
"""Files one upload may carry (the body size limit applies to all of them together)."""


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TextInput(_Body):
    """A document given as text."""

    source: str = Field(
        min_length=1, max_length=2048, description="Its identity in the collection."
    )
    text: str = Field(min_length=1)
    format: Literal["text", "markdown", "html"] = "text"
    title: str | None = Field(default=None, max_length=512)
    metadata: dict[str, Any] = Field(default_factory=dict[str, Any])


class IngestRequest(_Body):
    """A JSON ingestion: URLs to fetch and texts given inline."""

    urls: list[str] = Field(default_factory=list[str], max_length=1000)
    texts: list[TextInput] = Field(default_factory=list[TextInput], max_length=1000)
    metadata: dict[str, Any] = Field(
        default_factory=dict[str, Any], description="Added to every document and its chunks."
    )
    reingest: bool = Field(
        default=False, description="Delete each document first: embed it again even if unchanged."
    )


class SearchRequest(_Body):
    """A search without a model."""

    query: str = Field(min_length=1, max_length=10_000)
    top_k: int | None = Field(default=None, ge=1, le=100)
    threshold: float | None = Field(default=None, ge=-1.0, le=1.0)
    filters: dict[str, Any] = Field(default_factory=dict[str, Any])
    mode: Literal["hybrid", "vector", "text"] | None = None
    rerank: bool | None = Field(
        default=None,
        description="false skips the collection's reranking; true requires it; "
        "absent: as the collection says.",
    )


def _invalid(field: str, rule: str) -> ProblemError:
    return ProblemError(
        422,
        "Request validation failed",
        f"{field}: {rule}",
        errors=[{"field": field, "rule": rule}],
    )


def _validated(model: type[_M], data: Any) -> _M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = [
            {"field": field_path(e["loc"], model), "rule": e["msg"]}
            for e in exc.errors(include_url=False, include_input=False)
        ]
        detail = "; ".join(f"{e['field']}: {e['rule']}" for e in errors)
        raise ProblemError(422, "Request validation failed", detail, errors=errors) from None


def _ingest_json(result: IngestResult) -> dict[str, Any]:
    counts = {
        status: result.count(status)
        for status in ("added", "replaced", "unchanged", "skipped", "failed")
    }
    return {
        "collection": result.collection,
        "chunk_size": result.chunk_size,
        "chunk_overlap": result.chunk_overlap,
        "model": result.model,
        "counts": counts,
        "documents": [
            {
                "source": d.source,
                "status": d.status,
                "chunks": d.chunks,
                "document_id": d.document_id,
                "error": d.error,
            }
            for d in result.documents
        ],
    }


def search_json(result: SearchResult) -> dict[str, Any]:
    """A search result as JSON: hits with what a citation needs."""
    return {
        "collection": result.collection,
        "query": result.query,
        "status": result.status,
        "top_k": result.top_k,
        "threshold": result.threshold,
        "mode": result.mode,
        "best_similarity": result.best_similarity,
        "below_threshold": result.below_threshold,
        "query_truncated": result.query_truncated,
        "rerank": None
        if result.reranked_by is None
        else {
            "model": result.reranked_by,
            "candidates": result.rerank_candidates,
            "ms": round(result.rerank_ms, 1),
            "input_tokens": result.rerank_tokens[0],
            "output_tokens": result.rerank_tokens[1],
        },
        "hits": [
            {
                "chunk_id": h.chunk_id,
                "document_id": h.document_id,
                "source": h.source,
                "title": h.title,
                "heading": h.heading,
                "position": h.position,
                "similarity": h.similarity,
                "relevance": h.relevance,
                "score": h.score,
                "rerank_score": h.rerank_score,
                "text": h.text,
                "metadata": h.metadata,
            }
            for h in result.hits
        ],
    }


def _document_json(info: DocumentInfo) -> dict[str, Any]:
    return {
        "id": info.id,
        "source": info.source,
        "title": info.title,
        "chunks": info.chunks,
        "content_hash": info.content_hash,
        "metadata": info.metadata,
        "updated_at": info.updated_at.isoformat() if info.updated_at else None,
    }


async def _from_form(request: Request) -> tuple[list[FileDocument], dict[str, Any], bool]:
    # The form's spooled files are closed when the block ends.
    async with request.form(max_files=_MAX_FILES) as form:
        unknown = sorted(set(form.keys()) - {"files", "metadata", "reingest"})
        if unknown:
            raise _invalid(unknown[0], "unknown form field (known: files, metadata, reingest)")
        uploads: list[FileDocument] = []
        for value in form.getlist("files"):
            if isinstance(value, str) or not value.filename:
                raise _invalid(
                    "files", "every file part needs a filename (its ending gives the format)"
                )
            name = value.filename
            uploads.append(FileDocument(source=name, data=await value.read(), file_name=name))
        raw = form.get("metadata")
        flag = str(form.get("reingest") or "false").lower()
    if not uploads:
        raise _invalid("files", "give at least one file")
    metadata: dict[str, Any] = {}
    if raw is not None:
        try:
            parsed: Any = loads_json(str(raw), check=False)
        except json.JSONDecodeError:
            raise _invalid("metadata", "must be a JSON object") from None
        if not isinstance(parsed, dict):
            raise _invalid("metadata", "must be a JSON object")
        metadata = cast(dict[str, Any], parsed)
    if flag not in ("true", "false"):
        raise _invalid("reingest", "must be true or false")
    return uploads, metadata, flag == "true"


async def _from_json(request: Request) -> tuple[list[str | TextDocument], dict[str, Any], bool]:
    try:
        data = loads_json(await request.body(), check=False)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProblemError(
            400, "Malformed JSON", f"the request body is not valid JSON: {exc}"
        ) from None
    body = _validated(IngestRequest, data)
    for index, url in enumerate(body.urls):
        if not url.startswith(("http://", "https://")):
            raise _invalid(f"urls[{index}]", "must be an http(s) URL (server paths are not read)")
    if not body.urls and not body.texts:
        raise _invalid("body", "give urls or texts (or upload files as multipart/form-data)")
    sources: list[str | TextDocument] = [*body.urls]
    sources += [
        TextDocument(t.source, t.text, t.format, t.title, dict(t.metadata)) for t in body.texts
    ]
    return sources, dict(body.metadata), body.reingest


def _inlined(schema: dict[str, Any]) -> dict[str, Any]:
    """A model's JSON schema with its ``$defs`` put in place of their references.

    ``openapi_extra`` is copied into the OpenAPI document as it is, where a
    ``#/$defs/...`` reference points at the document's root and so at nothing:
    ReDoc refuses the whole page for it. None of these models is recursive.
    """
    defs: dict[str, Any] = schema.pop("$defs", {})

    def resolve(node: Any) -> Any:
        if isinstance(node, dict):
            items = cast("dict[str, Any]", node)
            ref = items.get("$ref")
            if isinstance(ref, str) and ref.startswith("#/$defs/"):
                return resolve(defs[ref.removeprefix("#/$defs/")])
            return {key: resolve(value) for key, value in items.items()}
        if isinstance(node, list):
            return [resolve(value) for value in cast("list[Any]", node)]
        return node

    return cast("dict[str, Any]", resolve(schema))


_INGEST_BODY = {
    "required": True,
    "content": {
        "application/json": {"schema": _inlined(IngestRequest.model_json_schema())},
        "multipart/form-data": {
            "schema": {
                "type": "object",
                "required": ["files"],
                "properties": {
                    "files": {"type": "array", "items": {"type": "string", "format": "binary"}},
                    "metadata": {"type": "string", "description": "A JSON object."},
                    "reingest": {"type": "boolean"},
                },
            }
        },
    },
}


@router.post(
    "/{code}/documents",
    summary="Ingest documents: files (multipart), URLs or texts (JSON) (admin)",
    openapi_extra={"requestBody": _INGEST_BODY},
    responses=problem_responses(415),
)
async def ingest(code: str, request: Request, ph: AdminFacade) -> dict[str, Any]:
    """Read, chunk, embed and store; one entry per document with its status."""
    sources, metadata, again = await _sources_of(request)
    call = ph.knowledge.reingest if again else ph.knowledge.ingest
    return _ingest_json(await call(code, sources, metadata=metadata))


def _job_json(job: IngestJobStatus) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "collection": job.collection,
        "status": job.status,
        "progress": {
            "documents_total": job.documents_total,
            "documents_done": job.documents_done,
            "chunks_total": job.chunks_total,
            "chunks_embedded": job.chunks_embedded,
        },
        "result": job.result,
        "error": job.error,
        "created_at": job.created_at.isoformat(),
        "updated_at": job.updated_at.isoformat(),
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
    }


@router.post(
    "/{code}/jobs",
    status_code=202,
    summary="Start an ingestion in the background: files, URLs or texts as for documents (admin)",
    openapi_extra={"requestBody": _INGEST_BODY},
    responses=problem_responses(415),
)
async def start_ingest_job(
    code: str, request: Request, response: Response, ph: AdminFacade
) -> dict[str, Any]:
    """202 with the job; ``GET .../jobs/{job_id}`` reads its progress, then its result."""
    sources, metadata, again = await _sources_of(request)
    job = await ph.knowledge.start_ingest(code, sources, metadata=metadata, reingest=again)
    response.headers["Location"] = f"/v1/knowledge/collections/{code}/jobs/{job.job_id}"
    return _job_json(job)


@router.get("/{code}/jobs/{job_id}", summary="An ingestion job's status and progress")
async def ingest_job(code: str, job_id: str, ph: Facade) -> dict[str, Any]:
    """``running`` with chunks embedded of those cut so far, then ``done`` or ``failed``."""
    job = await ph.knowledge.ingest_job(job_id)
    if job.collection != code:
        raise NotFoundError(f"collection {code} has no ingestion job '{job_id}'")
    return _job_json(job)


async def _sources_of(
    request: Request,
) -> tuple[list[str | TextDocument | FileDocument], dict[str, Any], bool]:
    """The documents of an ingestion request (JSON or multipart), its metadata and reingest."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    sources: list[str | TextDocument | FileDocument]
    if content_type == "multipart/form-data":
        uploads, metadata, again = await _from_form(request)
        sources = [*uploads]
    elif content_type in ("application/json", ""):
        given, metadata, again = await _from_json(request)
        sources = [*given]
    else:
        raise ProblemError(
            415,
            "Unsupported Media Type",
            f"send application/json or multipart/form-data, not '{content_type}'",
        )
    return sources, metadata, again


@router.post("/{code}/search", summary="Search a collection without a model")
async def search(code: str, request: Request, ph: Facade) -> dict[str, Any]:
    """The hits (best first) with their citations, and why there are none when none passed."""
    try:
        data = loads_json(await request.body(), check=False)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ProblemError(
            400, "Malformed JSON", f"the request body is not valid JSON: {exc}"
        ) from None
    body = _validated(SearchRequest, data)
    result = await ph.knowledge.search(
        code,
        body.query,
        top_k=body.top_k,
        threshold=body.threshold,
        filters=body.filters,
        mode=body.mode,
        rerank=body.rerank,
    )
    return search_json(result)


@router.get("/{code}/documents", summary="List a collection's documents")
async def documents(code: str, ph: Facade) -> dict[str, list[dict[str, Any]]]:
    """Return ``{"items": [...]}`` sorted by source."""
    return {"items": [_document_json(d) for d in await ph.knowledge.documents(code)]}


@router.get("/{code}/chunks", summary="A document's chunks, in document order")
async def chunks(
    code: str,
    ph: Facade,
    source: Annotated[str, Query(min_length=1, description="The source, as listed.")],
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, list[dict[str, Any]]]:
    """Return ``{"items": [...]}``: each chunk's id, position, heading, text and metadata."""
    found = await ph.knowledge.chunks(code, source, limit=limit, offset=offset)
    return {
        "items": [
            {
                "chunk_id": c.chunk_id,
                "position": c.position,
                "heading": c.heading,
                "text": c.text,
                "metadata": c.metadata,
            }
            for c in found
        ]
    }


@router.delete(
    "/{code}/documents",
    status_code=204,
    summary="Delete a document and its chunks (admin)",
)
async def delete_document(
    code: str,
    ph: AdminFacade,
    source: Annotated[str, Query(min_length=1, description="The source, as listed.")],
) -> Response:
    """204 when deleted; 404 when the collection has no such document."""
    if not await ph.knowledge.delete_document(code, source):
        raise NotFoundError(f"collection {code} has no document '{source}'")
    return Response(status_code=204)
