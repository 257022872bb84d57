"""The public values of the knowledge package: what goes in and what comes back."""

from __future__ import annotations

__all__ = [
    "DocumentChunk",
    "DocumentInfo",
    "FileDocument",
    "IngestProgress",
    "IngestResult",
    "IngestedDocument",
    "MetadataFilter",
    "ProgressCallback",
    "SearchHit",
    "SearchResult",
    "SearchStatus",
    "TextDocument",
]

from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

FilterValue = str | int | float | bool
MetadataFilter = Mapping[str, FilterValue | Sequence[FilterValue]]
"""Chunks whose metadata has each key equal to the value (or to one of the values)."""


@dataclass(frozen=True)
class TextDocument:
    """A document given as text rather than as a file or URL.

    Attributes:
        source: its identity in the collection (re-ingesting the same source
            replaces it), e.g. ``crm:note/4711``.
        text: the content.
        format: ``text``, ``markdown`` or ``html``.
        title: a title; the first heading or the source otherwise.
        metadata: kept with the document and each of its chunks.
    """

    source: str
    text: str
    format: Literal["text", "markdown", "html"] = "text"
    title: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True)
class FileDocument:
    """A file's bytes given rather than a path (an upload).

    Attributes:
        source: its identity in the collection (an upload's file name by default).
        data: the file's content.
        file_name: its name; the ending says the format (``.pdf``, ``.docx``, ...).
        title: a title; the first heading or the source otherwise.
        metadata: kept with the document and each of its chunks.
    """

    source: str
    data: bytes = field(repr=False)
    file_name: str
    title: str | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict[str, Any])


@dataclass(frozen=True)
class IngestProgress:
    """One step of an ingestion, for a progress bar.

    Attributes:
        event: ``started`` (a document begins), ``embedding`` (a slice of a
            large batch's chunks was embedded: ``embedded`` of ``chunks``),
            ``done`` (written, unchanged or skipped) or ``failed``.
        source: the document.
        index: the document's number, from 1.
        total: documents known so far (grows while a folder is walked).
        chunks: the document's chunks, once cut.
        status: on ``done``/``failed``: the document's status.
        error: on ``failed``: why.
        embedded: on ``embedding``: the document's chunks embedded so far.
    """

    event: Literal["started", "embedding", "done", "failed"]
    source: str
    index: int
    total: int
    chunks: int = 0
    status: str = ""
    error: str | None = None
    embedded: int = 0


ProgressCallback = Callable[[IngestProgress], Awaitable[None] | None]
"""Called on every step; a coroutine function is awaited."""

DocumentStatus = Literal["added", "replaced", "unchanged", "skipped", "failed"]


@dataclass(frozen=True)
class IngestedDocument:
    """What ingestion did with one document.

    Attributes:
        source: the file path, URL or given source.
        status: ``added``, ``replaced`` (its content changed), ``unchanged``
            (same content hash: nothing written), ``skipped`` (not a
            supported format, in a folder) or ``failed`` (nothing written).
        chunks: its chunks after this ingestion.
        document_id: its id in the store.
        error: why it failed or was skipped.
    """

    source: str
    status: DocumentStatus
    chunks: int = 0
    document_id: str | None = None
    error: str | None = None


@dataclass(frozen=True)
class IngestResult:
    """The outcome of one ingestion call.

    Attributes:
        collection: the collection's code.
        documents: one entry per document met, in order.
        chunk_size: the chunk size applied (the collection's, bounded by the model's limit).
        chunk_overlap: the overlap applied.
        model: the embedding model's identity.
    """

    collection: str
    documents: list[IngestedDocument]
    chunk_size: int
    chunk_overlap: int
    model: str

    def count(self, status: DocumentStatus) -> int:
        """How many documents ended with ``status``."""
        return sum(1 for d in self.documents if d.status == status)

    @property
    def failed(self) -> list[IngestedDocument]:
        """The documents that failed (nothing of them was written)."""
        return [d for d in self.documents if d.status == "failed"]


@dataclass(frozen=True)
class DocumentInfo:
    """A stored document.

    Attributes:
        id: its id in the store.
        source: where it came from.
        title: its title.
        chunks: how many chunks it has.
        content_hash: the hash re-ingestion compares.
        metadata: the metadata given at ingestion and found while reading.
        updated_at: when it was last written (None for LangChain4j tables).
    """

    id: str
    source: str
    title: str
    chunks: int
    content_hash: str
    metadata: dict[str, Any]
    updated_at: datetime | None = None


@dataclass(frozen=True)
class DocumentChunk:
    """One stored chunk of a document, as ingestion cut it.

    Attributes:
        chunk_id: the chunk's id in the store.
        position: its place in the document, from 0.
        heading: the headings above it, joined by `` > ``.
        text: its text.
        metadata: the document's and the chunk's metadata.
    """

    chunk_id: str
    position: int
    heading: str
    text: str
    metadata: dict[str, Any]


@dataclass(frozen=True)
class SearchHit:
    """One retrieved chunk, with what a citation needs.

    Attributes:
        chunk_id: the chunk's id in the store (recorded in the timeline).
        document_id: its document's id.
        source: the document's source (file path, URL, ...).
        title: the document's title.
        text: the chunk's text.
        heading: the headings above it, joined by `` > ``.
        position: its place in the document, from 0.
        similarity: cosine similarity to the query (what the threshold tests).
        score: the fused rank score the hits are ordered by.
        metadata: the document's and the chunk's metadata (``pages`` for PDFs).
        rerank_score: the reranking model's score, 0 to 3 (None: not reranked).
    """

    chunk_id: str
    document_id: str
    source: str
    title: str
    text: str
    heading: str
    position: int
    similarity: float
    score: float
    metadata: dict[str, Any]
    rerank_score: float | None = None

    @property
    def relevance(self) -> float:
        """LangChain4j's relevance score, ``(1 + similarity) / 2`` (its ``minScore``)."""
        return (1.0 + self.similarity) / 2.0


SearchStatus = Literal["ok", "nothing_passed_threshold", "no_match", "empty_collection"]


@dataclass(frozen=True)
class SearchResult:
    """The outcome of a search.

    Attributes:
        collection: the collection's code.
        query: the query as given.
        hits: the chunks found, best first, at most ``top_k``.
        status: ``ok``; ``nothing_passed_threshold`` (chunks matched, none
            reached ``threshold``: answer without context knowingly);
            ``no_match`` (the filters or the full text left nothing);
            ``empty_collection``.
        top_k: the limit applied.
        threshold: the similarity threshold applied.
        mode: ``hybrid``, ``vector`` or ``text``.
        below_threshold: candidates dropped by the threshold.
        best_similarity: the highest similarity seen, kept or dropped (None
            when there was no candidate).
        query_truncated: the query was longer than the model reads and was cut.
        reranked_by: the model that reordered the hits (None: fused order).
        rerank_candidates: the candidates that model scored.
        rerank_ms: the time its call took.
        rerank_tokens: the tokens it read and wrote.
    """

    collection: str
    query: str
    hits: list[SearchHit]
    status: SearchStatus
    top_k: int
    threshold: float
    mode: str
    below_threshold: int = 0
    best_similarity: float | None = None
    query_truncated: bool = False
    reranked_by: str | None = None
    rerank_candidates: int = 0
    rerank_ms: float = 0.0
    rerank_tokens: tuple[int, int] = (0, 0)


IngestJobState = Literal["running", "done", "failed"]


@dataclass(frozen=True)
class IngestJobStatus:
    """An ingestion running in the background, as far as it got.

    Attributes:
        job_id: the job's id.
        collection: the collection's code.
        status: ``running``, ``done`` or ``failed`` (``error`` says why; a
            job whose process stopped before it finished is ``failed``: the
            documents it wrote stay, the others were never read).
        documents_total: documents named (a folder counts as its files once
            walked).
        documents_done: documents finished (written, unchanged, skipped or failed).
        chunks_total: chunks cut so far from the documents begun.
        chunks_embedded: chunks embedded so far.
        result: on ``done``: what happened to each document (as the
            synchronous ingestion answers).
        error: on ``failed``: why.
        created_at: when it was asked for.
        updated_at: its last progress.
        finished_at: when it ended.
    """

    job_id: str
    collection: str
    status: IngestJobState
    documents_total: int
    documents_done: int
    chunks_total: int
    chunks_embedded: int
    result: dict[str, Any] | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
