"""The knowledge service: ingest documents into a collection, search it, delete from it.

One :class:`Knowledge` serves every tenant of a database; each call names
its tenant and collection (a catalog document collection's code), which
decide the store, the embedding model, the chunking and the retrieval
defaults. Stores, embedders and HTTP clients are built on first use and
kept until :meth:`Knowledge.aclose`.
"""

from __future__ import annotations

__all__ = ["Knowledge"]

import asyncio
import hashlib
import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from sqlalchemy import select

from pilothouse.catalog._enums import ModelCapability, SearchMode, VectorStoreKind
from pilothouse.catalog._models import DocumentCollection
from pilothouse.catalog._stores import store_settings
from pilothouse.errors import NotFoundError
from pilothouse.knowledge._backend import Backend, Collection
from pilothouse.knowledge._chunking import ChunkPlan
from pilothouse.knowledge._embedded import EmbeddedBackend
from pilothouse.knowledge._embedders import MINILM, Embedder, EmbeddingModelInfo, LocalMiniLM
from pilothouse.knowledge._errors import KnowledgeError, KnowledgeSetupError
from pilothouse.knowledge._ingestrun import Run
from pilothouse.knowledge._retrieval import retrieve
from pilothouse.knowledge._sources import UrlCheck, expand
from pilothouse.knowledge._types import (
    DocumentChunk,
    DocumentInfo,
    FileDocument,
    IngestResult,
    MetadataFilter,
    ProgressCallback,
    SearchResult,
    TextDocument,
)

if TYPE_CHECKING:
    from pilothouse.knowledge._embedders import Purpose, Vectors
    from pilothouse.knowledge._jobs import IngestJobs
    from pilothouse.providers import ModelFactory, ModelSpec, SecretSource
    from pilothouse.providers._egress import EgressPolicy
    from pilothouse.store import Database
    from pilothouse.store._leases import Leases

logger = logging.getLogger("pilothouse.knowledge")

DEFAULT_CHUNK_SIZE = 512
"""Tokens per chunk when a collection names none (genai-4j's default), bounded by the model."""

ADHOC_STORE = "INVOKE"
"""The store code of a pgvector table named in a call rather than the catalog."""

ADHOC_POOLS = 8
"""Connection pools to stores named in calls kept open at once, per process."""


class Knowledge:
    """Ingestion, search and deletion over the catalog's document collections.

    Args:
        database: pilothouse's database (the catalog, and the embedded store).
        secrets: resolves ``@secrets(NAME)`` in providers and store settings,
            in the scope of each row's tenant; none resolve by default (the
            process environment is never a tenant's secret source).
        models: builds AWS clients for Bedrock and SageMaker embedders.
        http: the HTTP client for URLs and OpenAI-compatible embedders; one
            is made (and closed by :meth:`aclose`) otherwise.
        local_model: the packaged MiniLM embedder to share (one is made on
            first use otherwise).
        egress: when given (the HTTP service), the client made here sends
            each request only to an address this policy (the calling
            tenant's, ``current_egress``) checked: URL fetches, redirects
            and embedding calls, pinned against DNS rebinding.
        model_override: a pydantic-ai model that answers for every chat
            model this service calls (reranking), as the run loop's ``model=``.
        leases: this process's lease, which background ingestion jobs name
            (one of its own is made otherwise).
    """

    def __init__(
        self,
        database: Database,
        *,
        secrets: SecretSource | None = None,
        models: ModelFactory | None = None,
        http: httpx.AsyncClient | None = None,
        local_model: LocalMiniLM | None = None,
        egress: EgressPolicy | None = None,
        model_override: Any = None,
        leases: Leases | None = None,
    ) -> None:
        self.database = database
        self.model_override = model_override
        self._leases = leases
        self._jobs: IngestJobs | None = None
        if secrets is None:
            from pilothouse.providers import SecretResolver

            secrets = SecretResolver({}, where="the secrets given to Knowledge (none)")
        self._secrets: SecretSource = secrets
        self._models = models
        self._owns_http = http is None
        if http is None and egress is not None:
            from pilothouse.providers._egress_transport import PinnedHttpxTransport

            http = httpx.AsyncClient(
                timeout=httpx.Timeout(60.0, connect=10.0), transport=PinnedHttpxTransport(egress)
            )
            self._owns_http = True
        self._http = http or httpx.AsyncClient(timeout=httpx.Timeout(60.0, connect=10.0))
        self._local = local_model
        self._embedders: dict[str, Embedder] = {}
        self._embedded = EmbeddedBackend(database)
        self._backends: dict[str, Backend] = {}
        # Stores named in a call (``/v1/invoke``), least recently used first:
        # any key may name any allowed server, so they are capped.
        self._adhoc: OrderedDict[str, Backend] = OrderedDict()
        self._closing: set[asyncio.Task[None]] = set()

    # -- resolution -----------------------------------------------------

    async def collection(self, tenant: str, code: str) -> Collection:
        """Resolve an active collection with its store and embedding model.

        Args:
            tenant: whose catalog.
            code: the collection's code.

        Returns:
            The collection.

        Raises:
            NotFoundError: no active collection of that code.
            KnowledgeSetupError: its store or model cannot serve it.
        """
        await self.database.ensure_schema()
        async with self.database.sessions() as session:
            row = await session.scalar(
                select(DocumentCollection).where(
                    DocumentCollection.tenant == tenant, DocumentCollection.code == code
                )
            )
            if row is None or not row.active:
                raise NotFoundError(f"'{code}' is not an active document collection")
            return self._resolve(row)

    def _resolve(self, row: DocumentCollection) -> Collection:
        from pydantic import ValidationError

        from pilothouse.providers._spec import compile_model_spec

        store = row.store
        if not store.active:
            raise KnowledgeSetupError(
                f"collection {row.code}: vector store {store.code} is inactive"
            )
        try:
            settings = store_settings(store.kind, store.settings)
        except ValidationError as exc:
            raise KnowledgeSetupError(f"vector store {store.code}: settings: {exc}") from exc
        if store.kind is VectorStoreKind.EMBEDDED and store.connection:
            # A row from before stores had a kind: its connection would be ignored.
            raise KnowledgeSetupError(
                f"vector store {store.code} is embedded but names a connection: set kind "
                "pgvector for a PostgreSQL + pgvector store, or remove the connection"
            )
        password = getattr(settings, "password", None)
        info, spec = MINILM, None
        model = row.embedding_model
        if model is not None:
            if ModelCapability.EMBEDDING.value not in model.capabilities:
                raise KnowledgeSetupError(
                    f"collection {row.code}: model {model.code} is not an embedding model "
                    "(it lacks capability EM)"
                )
            if model.dimension is None or model.max_input_tokens is None:
                raise KnowledgeSetupError(
                    f"collection {row.code}: model {model.code} needs dimension and "
                    "max_input_tokens"
                )
            spec = compile_model_spec(model, self._secrets)
            info = EmbeddingModelInfo(
                name=f"{model.provider.kind.value}:{model.model_name}",
                dimension=model.dimension,
                max_input_tokens=model.max_input_tokens,
                query_prefix=model.query_prefix or "",
                document_prefix=model.document_prefix or "",
            )
        rerank_spec = None
        if row.rerank:
            if row.qa_model is None:
                raise KnowledgeSetupError(
                    f"collection {row.code}: rerank is on but it names no qa_model (the chat "
                    "model that scores the candidates)"
                )
            rerank_spec = compile_model_spec(row.qa_model, self._secrets)
        return Collection(
            id=row.id,
            code=row.code,
            tenant=row.tenant,
            name=row.collection_name,
            store_code=store.code,
            store_kind=store.kind,
            store_settings=settings,
            connection=store.connection,
            password=self._secrets.for_tenant(row.tenant).resolve(password) if password else None,
            top_k=row.top_k,
            threshold=row.similarity_threshold,
            mode=row.search_mode,
            chunk_size=row.chunk_size,
            chunk_overlap=row.chunk_overlap,
            model=info,
            model_spec=spec,
            rerank_spec=rerank_spec,
            rerank_candidates=row.rerank_candidates,
        )

    def local_model(self) -> LocalMiniLM:
        """The packaged MiniLM this service embeds with, loaded on first use."""
        if self._local is None:
            self._local = LocalMiniLM()
        return self._local

    async def embedder(self, collection: Collection) -> Embedder:
        """The embedder of a collection's model, built once."""
        return await self.model_embedder(collection.model_spec, collection.model)

    def backend(self, collection: Collection) -> Backend:
        """The store serving a collection, built once per store."""
        if collection.store_kind is VectorStoreKind.EMBEDDED:
            return self._embedded
        # The password is part of the key: an ad-hoc store (``/v1/invoke``)
        # with another password must not reuse a pool opened with the first.
        secret = hashlib.sha256((collection.password or "").encode()).hexdigest()[:16]
        key = f"{collection.tenant}/{collection.store_code}/{collection.connection}/{secret}"
        if collection.store_code == ADHOC_STORE:
            return self._adhoc_backend(key, collection)
        backend = self._backends.get(key)
        if backend is None:
            from pilothouse.knowledge._pgvector import PgVectorBackend

            backend = PgVectorBackend(collection)
            self._backends[key] = backend
        return backend

    def _adhoc_backend(self, key: str, collection: Collection) -> Backend:
        """A store named in a call: kept while among the last ``ADHOC_POOLS`` used.

        Every distinct server, user or password a caller names opens its own
        connection pool; without a cap, a caller cycling through them would
        hold connections (and file descriptors) without end. The least
        recently used pool beyond the cap is closed in the background; its
        running queries finish first (asyncpg's graceful close).
        """
        backend = self._adhoc.get(key)
        if backend is not None:
            self._adhoc.move_to_end(key)
            return backend
        from pilothouse.knowledge._pgvector import PgVectorBackend

        backend = self._adhoc[key] = PgVectorBackend(collection)
        while len(self._adhoc) > ADHOC_POOLS:
            _, evicted = self._adhoc.popitem(last=False)
            task = asyncio.get_running_loop().create_task(evicted.aclose())
            self._closing.add(task)
            task.add_done_callback(self._closed)
        return backend

    def _closed(self, task: asyncio.Task[None]) -> None:
        self._closing.discard(task)
        if not task.cancelled() and task.exception() is not None:
            logger.warning("closing an ad-hoc vector store's pool failed: %s", task.exception())

    def plan(self, collection: Collection, embedder: Embedder) -> ChunkPlan:
        """The chunk size and overlap that apply to a collection with its model.

        Raises:
            KnowledgeSetupError: the collection's chunk size exceeds what its
                model reads (the message says how much that is).
        """
        budget = embedder.text_budget - embedder.tokenizer.count(collection.model.document_prefix)
        size = collection.chunk_size or min(DEFAULT_CHUNK_SIZE, budget)
        if size > budget:
            raise KnowledgeSetupError(
                f"collection {collection.code}: chunk_size {size} is more than "
                f"{collection.model.name} reads ({collection.model.max_input_tokens} tokens, "
                f"{budget} of text): set chunk_size to {budget} or less"
            )
        return ChunkPlan(size=size, overlap=min(collection.chunk_overlap, size // 2), budget=budget)

    # -- ingestion ------------------------------------------------------

    async def ingest(
        self,
        tenant: str,
        collection: str,
        sources: Sequence[str | Path | TextDocument | FileDocument],
        *,
        metadata: Mapping[str, Any] | None = None,
        progress: ProgressCallback | None = None,
        url_check: UrlCheck | None = None,
    ) -> IngestResult:
        """Read, chunk, embed and store documents; each one in its own transaction.

        A document whose content hash is stored already is left as it is; one
        whose content changed replaces its older version; one that fails is
        reported and nothing of it is written, and the others go on.

        Args:
            tenant: whose collection.
            collection: the collection's code.
            sources: files, folders (walked recursively), ``http(s)://`` URLs
                and :class:`TextDocument` values.
            metadata: added to every document's metadata (and its chunks').
            progress: called as each document starts and ends.
            url_check: refuses a URL (or a redirect) a caller may not make
                this process fetch; its error fails that document only.

        Returns:
            What happened to each document.

        Raises:
            NotFoundError: no such collection.
            KnowledgeSetupError: the collection cannot be used as configured.
            DimensionMismatchError: the collection holds another model's vectors.
        """
        target = await self.collection(tenant, collection)
        embedder = await self.embedder(target)
        plan = self.plan(target, embedder)
        backend = self.backend(target)
        await backend.check_model(target)
        run = Run(self._http, target, embedder, plan, backend, dict(metadata or {}), progress)
        run.url_check = url_check
        pending = list(expand(sources))
        for index, item in enumerate(pending, start=1):
            await run.step(item, index, len(pending))
        await run.flush()
        return IngestResult(
            collection=target.code,
            documents=run.results_in_order(),
            chunk_size=plan.size,
            chunk_overlap=plan.overlap,
            model=target.model.name,
        )

    async def delete_document(
        self, tenant: str, collection: str, source: str, *, local_paths: bool = True
    ) -> bool:
        """Delete a document and its chunks.

        Args:
            tenant: whose collection.
            collection: the collection's code.
            source: the document's source (as :meth:`documents` lists it).
            local_paths: a source naming a file of this process's file
                system stands for that file's resolved path, as ingestion
                stored it; False takes every source as given.

        Returns:
            True when it was there.
        """
        target = await self.collection(tenant, collection)
        return await self.backend(target).delete(target, _canonical(source, local_paths))

    async def documents(self, tenant: str, collection: str) -> list[DocumentInfo]:
        """List a collection's documents."""
        target = await self.collection(tenant, collection)
        return await self.backend(target).documents(target)

    async def chunks(
        self,
        tenant: str,
        collection: str,
        source: str,
        *,
        limit: int,
        offset: int,
        local_paths: bool = True,
    ) -> list[DocumentChunk]:
        """A document's chunks in document order; empty when it has none (or no such document).

        ``local_paths`` as for :meth:`delete_document`.
        """
        target = await self.collection(tenant, collection)
        rows = await self.backend(target).chunks(
            target, _canonical(source, local_paths), limit=limit, offset=offset
        )
        return [
            DocumentChunk(
                chunk_id=r.key,
                position=r.position,
                heading=r.heading,
                text=r.text,
                metadata=r.metadata,
            )
            for r in rows
        ]

    # -- search ---------------------------------------------------------

    async def search(
        self,
        tenant: str,
        collection: str,
        query: str,
        *,
        top_k: int | None = None,
        threshold: float | None = None,
        filters: MetadataFilter | None = None,
        mode: SearchMode | str | None = None,
        rerank: bool | None = None,
    ) -> SearchResult:
        """Find the chunks that answer a query.

        Args:
            tenant: whose collection.
            collection: the collection's code.
            query: the question.
            top_k: hits at most (the collection's ``top_k`` by default).
            threshold: least cosine similarity (the collection's by default).
            filters: metadata every hit must match (a pre-filter).
            mode: ``hybrid``, ``vector`` or ``text`` (the collection's by default).
            rerank: False skips the collection's reranking for this search;
                True requires it (refused when the collection has none);
                None: as the collection says.

        Returns:
            The hits, and a status that says when nothing passed the threshold.

        Raises:
            KnowledgeError: a bad argument (named in the message).
        """
        target = await self.collection(tenant, collection)
        return await self.search_in(
            target,
            query,
            top_k=top_k,
            threshold=threshold,
            filters=filters,
            mode=mode,
            rerank=rerank,
        )

    async def search_in(
        self,
        target: Collection,
        query: str,
        *,
        top_k: int | None = None,
        threshold: float | None = None,
        filters: MetadataFilter | None = None,
        mode: SearchMode | str | None = None,
        rerank: bool | None = None,
    ) -> SearchResult:
        """Search a resolved collection (a catalog one, or an ad-hoc one of ``/v1/invoke``).

        Arguments as :meth:`search`.

        Raises:
            KnowledgeError: a bad argument (named in the message).
        """
        if top_k is not None and top_k < 1:
            raise KnowledgeError("top_k must be at least 1")
        if threshold is not None and not -1.0 <= threshold <= 1.0:
            raise KnowledgeError("threshold must be between -1 and 1 (a cosine similarity)")
        try:
            chosen = SearchMode(mode) if mode is not None else target.mode
        except ValueError as exc:
            raise KnowledgeError(f"mode must be hybrid, vector or text, not {mode!r}") from exc
        if rerank and target.rerank_spec is None:
            raise KnowledgeError(
                f"collection {target.code} does not rerank: set rerank: true and a qa_model "
                "in its catalog entry, or leave rerank out"
            )
        embedder = await self.embedder(target)
        wanted = top_k or target.top_k
        spec = target.rerank_spec if rerank is not False else None
        result = await retrieve(
            target,
            self.backend(target),
            embedder,
            query,
            top_k=max(wanted, target.rerank_candidates) if spec is not None else wanted,
            threshold=target.threshold if threshold is None else threshold,
            filters=filters or {},
            mode=chosen,
        )
        if spec is None or not result.hits:
            return result
        if self._models is None:
            raise KnowledgeSetupError(
                f"collection {target.code} reranks with model {spec.code}, but this knowledge "
                "service was made without a model factory (pass models=)"
            )
        from pilothouse.knowledge._rerank import rerank as rerank_hits

        reranked = await rerank_hits(
            self._models, spec, query, result.hits, override=self.model_override
        )
        return replace(
            result,
            hits=reranked.hits[:wanted],
            top_k=wanted,
            reranked_by=reranked.model,
            rerank_candidates=len(result.hits),
            rerank_ms=reranked.ms,
            rerank_tokens=(reranked.input_tokens, reranked.output_tokens),
        )

    async def embed(
        self, tenant: str, collection: str, texts: Sequence[str], purpose: Purpose = "query"
    ) -> Vectors:
        """Embed texts with a collection's model (prefixes and limits applied).

        Returns:
            One unit vector per text.
        """
        target = await self.collection(tenant, collection)
        embedder = await self.embedder(target)
        return await embedder.embed(texts, purpose)

    async def embed_with_model(
        self,
        tenant: str,
        model: str,
        texts: Sequence[str],
        purpose: Purpose = "document",
        *,
        truncate: bool = False,
    ) -> tuple[Vectors, EmbeddingModelInfo, int]:
        """Embed texts with a catalog embedding model (``/v1/embeddings``).

        Args:
            tenant: whose catalog.
            model: the model's code (capability ``EM``).
            texts: what to embed; each within the model's limit.
            purpose: ``document`` (no query prefix) or ``query``.
            truncate: cut a text longer than the model reads to its window
                (else such a text is refused).

        Returns:
            The unit vectors, the model's facts and the tokens the texts took.

        Raises:
            NotFoundError: no active embedding model of that code.
            InputTooLongError: a text longer than the model reads.
        """
        from pilothouse.catalog._models import Model
        from pilothouse.providers._spec import compile_model_spec

        await self.database.ensure_schema()
        async with self.database.sessions() as session:
            row = await session.scalar(
                select(Model).where(Model.tenant == tenant, Model.code == model)
            )
            if row is None or not row.active:
                raise NotFoundError(f"'{model}' is not an active model")
            if ModelCapability.EMBEDDING.value not in row.capabilities:
                raise NotFoundError(f"'{model}' is not an embedding model (it lacks capability EM)")
            if row.dimension is None or row.max_input_tokens is None:
                raise KnowledgeSetupError(f"model {model} needs dimension and max_input_tokens")
            spec = compile_model_spec(row, self._secrets)
            info = EmbeddingModelInfo(
                name=f"{row.provider.kind.value}:{row.model_name}",
                dimension=row.dimension,
                max_input_tokens=row.max_input_tokens,
                query_prefix=row.query_prefix or "",
                document_prefix=row.document_prefix or "",
            )
        embedder = await self.model_embedder(spec, info)
        prepared, _ = embedder.prepare(texts, purpose, truncate=truncate or None)
        vectors = await embedder.embed_prepared(prepared, purpose)
        tokens = sum(embedder.tokenizer.count(t) for t in prepared)
        return vectors, info, tokens

    async def model_embedder(self, spec: ModelSpec | None, info: EmbeddingModelInfo) -> Embedder:
        """The embedder of a model spec (None: the packaged MiniLM), built once."""
        if spec is None:
            return self.local_model()
        key = f"{spec.fingerprint()}:{info}"
        embedder = self._embedders.get(key)
        if embedder is None:
            from pilothouse.knowledge._remote import build_embedder

            embedder = await build_embedder(spec, info, models=self._models, http=self._http)
            self._embedders[key] = embedder
        return embedder

    def adhoc_collection(
        self,
        tenant: str,
        *,
        connection: str,
        password: str | None,
        table: str,
        top_k: int,
        threshold: float,
        model: ModelSpec | None,
        dimension: int,
        max_input_tokens: int = 8191,
    ) -> Collection:
        """A LangChain4j table named in a call rather than the catalog (``/v1/invoke``).

        Args:
            tenant: who calls.
            connection: ``postgresql://USER@HOST:PORT/DATABASE`` (no password).
            password: the database password (kept in memory only).
            table: the LangChain4j ``PgVectorEmbeddingStore`` table.
            top_k: hits at most.
            threshold: least cosine similarity.
            model: the embedding model to call; None for the packaged MiniLM.
            dimension: the vectors' length the caller says the table holds.
            max_input_tokens: what ``model`` reads.

        Raises:
            DimensionMismatchError: no model is named and ``dimension`` is not
                the packaged MiniLM's 384 (both are named).
        """
        from pilothouse.knowledge._errors import DimensionMismatchError

        if model is None:
            if dimension != MINILM.dimension:
                raise DimensionMismatchError(
                    f"embeddingDimension is {dimension}, but the local all-MiniLM-L6-v2 "
                    f"(used when no embeddingModelName is given) gives {MINILM.dimension}: "
                    "name the model that filled the table in embeddingModelName",
                    expected=dimension,
                    actual=MINILM.dimension,
                )
            info = MINILM
        else:
            info = EmbeddingModelInfo(
                name=f"{model.provider.kind.value}:{model.model_name}",
                dimension=dimension,
                max_input_tokens=max_input_tokens,
                dimension_field="embeddingDimension",
            )
        return Collection(
            id=0,
            code=ADHOC_STORE,
            tenant=tenant,
            name=table,
            store_code=ADHOC_STORE,
            store_kind=VectorStoreKind.PGVECTOR,
            store_settings=store_settings(VectorStoreKind.PGVECTOR, {"layout": "langchain4j"}),
            connection=connection,
            password=password,
            top_k=top_k,
            threshold=threshold,
            mode=SearchMode.VECTOR,
            chunk_size=None,
            chunk_overlap=0,
            model=info,
            model_spec=model,
        )

    @property
    def jobs(self) -> IngestJobs:
        """This process's background ingestions."""
        if self._jobs is None:
            from pilothouse.knowledge._jobs import IngestJobs

            leases = self._leases
            if leases is None:
                from pilothouse.store._leases import Leases, OwnerIdentity

                leases = Leases(self.database, OwnerIdentity.of_this_process())
            self._jobs = IngestJobs(self.database, leases)
        return self._jobs

    async def aclose(self) -> None:
        """Stop background ingestions; close stores, embedders and the HTTP client made here."""
        if self._jobs is not None:
            await self._jobs.aclose()
        for backend in (*self._backends.values(), *self._adhoc.values()):
            await backend.aclose()
        self._backends.clear()
        self._adhoc.clear()
        if self._closing:
            await asyncio.gather(*self._closing, return_exceptions=True)
        for embedder in self._embedders.values():
            await embedder.aclose()
        self._embedders.clear()
        if self._owns_http:
            await self._http.aclose()


def _canonical(source: str, local_paths: bool) -> str:
    """A file's source is its resolved path; anything else is taken as given.

    Without ``local_paths`` (a source from a client of the service) every
    source is taken as given: the server's file system is not the client's.
    """
    if not local_paths or "://" in source:
        return source
    path = Path(source).expanduser()
    try:
        exists = path.exists()
    except OSError:
        # A name the OS refuses to look up (longer than a file name may be)
        # names no file: it can only be a source given as text.
        return source
    return str(path.resolve()) if exists else source
