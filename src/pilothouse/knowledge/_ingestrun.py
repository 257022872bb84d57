"""One ingestion run: read, chunk, embed in shared batches, and write each document.

Small documents share embedding batches of up to :data:`EMBED_BATCH_CHUNKS`
chunks (one model call, less padding); a large one is embedded in slices of
that size with an ``embedding`` progress event after each. Each document is
written in its own transaction.
"""

from __future__ import annotations

__all__ = ["EMBED_BATCH_CHUNKS", "Run", "content_hash"]

import hashlib
import inspect
import json
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio.to_thread
import httpx
import numpy as np

from pilothouse.errors import PilothouseError
from pilothouse.knowledge._backend import Backend, Collection, NewDocument
from pilothouse.knowledge._chunking import Chunk, ChunkPlan, chunk_document
from pilothouse.knowledge._documents import parse_document
from pilothouse.knowledge._embedders import Embedder
from pilothouse.knowledge._errors import DocumentError
from pilothouse.knowledge._sources import Loaded, Pending, UrlCheck, load
from pilothouse.knowledge._types import (
    IngestedDocument,
    IngestProgress,
    ProgressCallback,
    TextDocument,
)
from pilothouse.store._text import check_input

if TYPE_CHECKING:
    from pilothouse.knowledge._embedders import Vectors

logger = logging.getLogger("pilothouse.knowledge")

EMBED_BATCH_CHUNKS = 256
"""Chunks gathered over several small documents before the model runs (one call, less padding)."""


@dataclass
class _Prepared:
    pending: Pending
    index: int
    document: NewDocument
    chunks: list[Chunk]
    texts: list[str]
    replaced: bool


def content_hash(plan: ChunkPlan, model: str, loaded: Loaded, text: str, title: str) -> str:
    """The hash that tells an unchanged document: its text, title, metadata and chunking."""
    digest = hashlib.sha256()
    header = {"model": model, "size": plan.size, "overlap": plan.overlap, "title": title}
    digest.update(json.dumps([header, loaded.metadata], sort_keys=True, default=str).encode())
    digest.update(text.encode("utf-8"))
    return digest.hexdigest()


class Run:
    """One ingestion call: documents prepared, embedded in shared batches, written one by one."""

    def __init__(
        self,
        http: httpx.AsyncClient,
        collection: Collection,
        embedder: Embedder,
        plan: ChunkPlan,
        backend: Backend,
        metadata: dict[str, Any],
        progress: ProgressCallback | None,
    ) -> None:
        self.http = http
        self.collection = collection
        self.embedder = embedder
        self.plan = plan
        self.backend = backend
        self.metadata = metadata
        self.progress = progress
        self.results: dict[int, IngestedDocument] = {}
        self.waiting: list[_Prepared] = []
        self.total = 0
        self.url_check: UrlCheck | None = None
        # Content hashes of this run's documents: a second copy in the same
        # run is found before the first is written.
        self.seen: dict[str, str] = {}

    async def report(self, event: IngestProgress) -> None:
        if self.progress is None:
            return
        outcome = self.progress(event)
        if inspect.isawaitable(outcome):
            await outcome

    async def finish(self, index: int, result: IngestedDocument) -> None:
        self.results[index] = result
        event = "failed" if result.status == "failed" else "done"
        await self.report(
            IngestProgress(
                event, result.source, index, self.total, result.chunks, result.status, result.error
            )
        )

    def results_in_order(self) -> list[IngestedDocument]:
        return [self.results[i] for i in sorted(self.results)]

    async def step(self, pending: Pending, index: int, total: int) -> None:
        self.total = total
        await self.report(IngestProgress("started", pending.source, index, total))
        if pending.skip is not None:
            await self.finish(
                index, IngestedDocument(pending.source, "skipped", error=pending.skip)
            )
            return
        try:
            prepared = await self.prepare(pending, index)
        except (PilothouseError, OSError) as exc:
            await self.finish(index, IngestedDocument(pending.source, "failed", error=str(exc)))
            return
        if prepared is None:
            return
        self.waiting.append(prepared)
        if sum(len(p.texts) for p in self.waiting) >= EMBED_BATCH_CHUNKS:
            await self.flush()

    async def prepare(self, pending: Pending, index: int) -> _Prepared | None:
        # A given document's name, title and metadata follow the input rules
        # (its text is read below); a bad one fails alone, the others go on.
        check_input(pending.source, "source")
        if pending.document is not None:
            check_input(pending.document.title, "title")
            check_input(pending.document.metadata, "metadata")
            if isinstance(pending.document, TextDocument):
                check_input(pending.document.text, "text")
        loaded = await load(pending, self.http, self.url_check)
        # Reading and cutting a large document takes the CPU for seconds (ten
        # megabytes of text: half a minute of tokenizing); on the event loop
        # that would stall every request of every tenant meanwhile.
        parsed = await anyio.to_thread.run_sync(
            parse_document, loaded.data, loaded.format, loaded.source
        )
        title = loaded.title or parsed.title
        loaded.metadata.update(parsed.metadata)
        loaded.metadata.update(self.metadata)
        if pending.document is not None:
            loaded.metadata.update(pending.document.metadata)
        text = parsed.text
        digest = content_hash(self.plan, self.collection.model.name, loaded, text, title)
        stored = await self.backend.content_hash(self.collection, loaded.source)
        if stored == digest:
            await self.finish(index, IngestedDocument(loaded.source, "unchanged"))
            return None
        twin = self.seen.get(digest) or await self.backend.source_with_hash(
            self.collection, digest, loaded.source
        )
        if twin is not None and twin != loaded.source:
            # The same file under another path (or the same text given twice):
            # indexing it again would only double its hits.
            why = f"the same content as {twin}, already in the collection"
            await self.finish(index, IngestedDocument(loaded.source, "skipped", error=why))
            return None
        self.seen[digest] = loaded.source
        chunks = await anyio.to_thread.run_sync(
            chunk_document, parsed, self.embedder.tokenizer, self.plan
        )
        if not chunks:
            why = " (a scanned PDF has no text layer to read)" if loaded.format == "pdf" else ""
            raise DocumentError(f"{loaded.source}: the document has no text{why}")
        texts, _ = await anyio.to_thread.run_sync(
            self.embedder.prepare, [c.embed_text for c in chunks], "document"
        )
        document = NewDocument(loaded.source, title, digest, dict(loaded.metadata), len(text))
        return _Prepared(pending, index, document, chunks, texts, stored is not None)

    async def flush(self) -> None:
        if not self.waiting:
            return
        batch, self.waiting = self.waiting, []
        texts = [t for p in batch for t in p.texts]
        try:
            vectors = await self._embed(batch, texts)
        except PilothouseError as exc:
            for item in batch:
                failed = IngestedDocument(item.document.source, "failed", error=str(exc))
                await self.finish(item.index, failed)
            return
        offset = 0
        for item in batch:
            rows = vectors[offset : offset + len(item.texts)]
            offset += len(item.texts)
            await self.write(item, rows)

    async def _embed(self, batch: list[_Prepared], texts: list[str]) -> Vectors:
        """Embed a batch's chunks a slice at a time, reporting each document's progress.

        A large document is thousands of chunks: its progress shows chunks
        embedded (``embedding`` events), not only its start and end.
        """
        if len(texts) <= EMBED_BATCH_CHUNKS:
            return await self.embedder.embed_prepared(texts, "document")
        ends: list[int] = []
        for item in batch:
            ends.append((ends[-1] if ends else 0) + len(item.texts))
        parts: list[Vectors] = []
        for start in range(0, len(texts), EMBED_BATCH_CHUNKS):
            stop = min(start + EMBED_BATCH_CHUNKS, len(texts))
            parts.append(await self.embedder.embed_prepared(texts[start:stop], "document"))
            for item, end in zip(batch, ends, strict=True):
                begin = end - len(item.texts)
                if begin < stop and end > start:
                    await self.report(
                        IngestProgress(
                            "embedding",
                            item.document.source,
                            item.index,
                            self.total,
                            len(item.texts),
                            embedded=min(stop, end) - begin,
                        )
                    )
        return np.concatenate(parts)

    async def write(self, item: _Prepared, vectors: Vectors) -> None:
        source = item.document.source
        try:
            document_id, replaced = await self.backend.write(
                self.collection, item.document, item.chunks, vectors
            )
        except PilothouseError as exc:
            await self.finish(item.index, IngestedDocument(source, "failed", error=str(exc)))
            return
        status = "replaced" if replaced else "added"
        await self.finish(
            item.index, IngestedDocument(source, status, len(item.chunks), document_id)
        )
