"""PostgreSQL + pgvector as a vector store, in two table layouts.

``pilothouse`` layout (the default): ``ph_knowledge_collection`` (model and
dimension per collection), ``ph_knowledge_document`` and one chunk table per
dimension, ``ph_knowledge_chunk_<dimension>``, with an HNSW index
(``vector_cosine_ops``, the store's ``m`` and ``ef_construction``) and a
generated ``tsvector`` column under a GIN index for the full-text half.
Every row carries its tenant and every statement filters by it, so two
tenants whose collections share a store and a ``collection_name`` never see
or delete each other's documents. Tables and indexes are created on first
use; ``m`` and ``ef_construction`` apply when the index is built
(``REINDEX`` after changing them), while ``ef_search`` is set on every query.

``langchain4j`` layout: one LangChain4j ``PgVectorEmbeddingStore`` table per
collection, named by the collection's ``collection_name``: ``embedding_id
UUID PRIMARY KEY, embedding vector(n), text TEXT NULL, metadata JSON NULL``
(its default ``COMBINED_JSON`` metadata). Vectors LangChain4j wrote are
searched as they are, and documents ingested here are written as LangChain4j
writes them (metadata values as strings; ``index`` is the segment's
position), so the BPMN connector reads them too. Such a table records no
model: only the dimension can be checked. Full text runs over
``to_tsvector(text)`` without an index there. Rows pilothouse writes carry
the tenant in ``metadata.ph_tenant``: a tenant reads its own rows and the
rows LangChain4j wrote (which have no tenant: they belong to whoever points
a collection at the table), and replaces or deletes only its own.
"""

from __future__ import annotations

__all__ = ["PgVectorBackend", "check_table_name"]

import json
import re
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

import anyio
import numpy as np

from pilothouse.catalog._stores import PgVectorStoreSettings
from pilothouse.knowledge._backend import Backend, ChunkRow, Collection, NewDocument, filter_items
from pilothouse.knowledge._embedded import check_state
from pilothouse.knowledge._embedders import Vectors
from pilothouse.knowledge._errors import (
    DimensionMismatchError,
    KnowledgeError,
    KnowledgeSetupError,
)
from pilothouse.knowledge._types import DocumentInfo, MetadataFilter

if TYPE_CHECKING:
    from pilothouse.knowledge._chunking import Chunk

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$")
_WORDS = re.compile(r"\w+", re.UNICODE)
_NAMESPACE = uuid.UUID("5d7c1f0e-8f0b-4d55-9a2e-6f1c8a3b2d10")


def _owned(n: int) -> str:
    """LangChain4j rows the tenant in parameter ``n`` wrote (what it may replace or delete)."""
    return f"metadata ->> 'ph_tenant' = ${n}"


def _readable(n: int) -> str:
    """LangChain4j rows the tenant in parameter ``n`` may read: its own and untagged ones."""
    return f"(metadata ->> 'ph_tenant' IS NULL OR metadata ->> 'ph_tenant' = ${n})"


def check_table_name(name: str, field: str) -> None:
    """Refuse a table name that is not plain (``schema.table`` at most), naming the field.

    Raises:
        InvalidFieldError: naming ``field``.
    """
    from pilothouse.errors import InvalidFieldError

    if not _TABLE.match(name):
        raise InvalidFieldError(
            field, "must be a plain table name (letters, digits, '_', optionally schema.table)"
        )


def _quote(name: str) -> str:
    if not _TABLE.match(name):
        raise KnowledgeSetupError(
            f"'{name}' is not a plain table name (letters, digits, '_', optionally schema.table)"
        )
    return ".".join(f'"{part}"' for part in name.split("."))


def _filter_sql(filters: MetadataFilter, start: int, langchain4j: bool) -> tuple[str, list[str]]:
    """``AND (...)`` per filter key, and its parameters (numbered from ``start``).

    A value matches only a metadata value of its own JSON type, as on the
    embedded store: ``jsonb`` equality is typed (``"5"`` never equals ``5``,
    ``true`` never ``1``) and compares numbers as ``numeric``, so integers
    are exact however large and ``5`` equals ``5.0``. Compared as text,
    ``"5"`` matched a stored ``5`` and ``5.0`` did not. A LangChain4j table
    holds the metadata pilothouse writes as strings, so there a number or
    boolean also matches the string it is written as.

    Raises:
        KnowledgeError: a filter :func:`filter_items` refuses.
    """
    clauses: list[str] = []
    params: list[str] = []

    def param(value: str) -> str:
        params.append(value)
        return f"${start + len(params) - 1}"

    for key, values in filter_items(filters):
        # The key is a plain name (filter_items): safe inside a literal.
        stored = f"(metadata -> '{key}')::jsonb" if langchain4j else f"metadata -> '{key}'"
        options: list[str] = []
        for value in values:
            options.append(f"{stored} = {param(json.dumps(value))}::jsonb")
            if langchain4j and not isinstance(value, str):
                options.append(
                    f"(json_typeof(metadata -> '{key}') = 'string' "
                    f"AND metadata ->> '{key}' = {param(_as_text(value))})"
                )
        clauses.append(f"({' OR '.join(options)})")
    return "".join(f" AND {c}" for c in clauses), params


class PgVectorBackend(Backend):
    """One pgvector database, for the collections of one vector store.

    Args:
        collection: any collection of the store (for its connection and settings).
    """

    def __init__(self, collection: Collection) -> None:
        self.settings = cast(PgVectorStoreSettings, collection.store_settings)
        self.store = collection.store_code
        self._dsn = collection.connection or ""
        self._password = collection.password
        self._pool: Any = None
        self._opening = anyio.Lock()
        self._closed = False
        self._ready: set[str] = set()

    @property
    def langchain4j(self) -> bool:
        """Whether collections are LangChain4j tables."""
        return self.settings.layout == "langchain4j"

    def _where(self) -> str:
        url = urlsplit(self._dsn)
        return f"{url.hostname}:{url.port or 5432}{url.path}"

    async def pool(self) -> Any:
        """The connection pool, opened on first use, with the vector type registered.

        Raises:
            KnowledgeSetupError: the server cannot be reached, or this store
                was closed (an ad-hoc store evicted while a search waited).
        """
        if self._pool is not None:
            return self._pool
        # Two first searches at once must not open two pools (one would leak).
        async with self._opening:
            if self._closed:
                raise KnowledgeSetupError(
                    f"vector store {self.store}: the connection to {self._where()} was closed "
                    "(more stores named in calls than are kept open at once); try again"
                )
            if self._pool is not None:
                return self._pool
            import asyncpg  # pyright: ignore[reportMissingTypeStubs]
            from pgvector.asyncpg import register_vector

            async def setup(connection: Any) -> None:
                await connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
                await register_vector(connection)

            try:
                self._pool = await asyncpg.create_pool(  # pyright: ignore[reportUnknownMemberType]
                    self._dsn, password=self._password, min_size=1, max_size=10, init=setup
                )
            except (OSError, asyncpg.PostgresError) as exc:
                raise KnowledgeSetupError(
                    f"vector store {self.store}: cannot use {self._where()} ({type(exc).__name__}: "
                    f"{exc})"
                ) from exc
        return self._pool

    async def aclose(self) -> None:
        """Close the pool; running queries finish first, and no new one opens."""
        async with self._opening:
            self._closed = True
            pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    # -- tables -----------------------------------------------------------

    def _chunk_table(self, dimension: int) -> str:
        return f"ph_knowledge_chunk_{dimension}"

    async def _ensure(self, collection: Collection) -> str:
        """Create what the collection's layout needs; return its chunk table, quoted."""
        dimension = collection.model.dimension
        if self.langchain4j:
            table = _quote(collection.name)
            if table not in self._ready:
                await self._ensure_langchain4j(collection, table)
                self._ready.add(table)
            return table
        table = self._chunk_table(dimension)
        if table not in self._ready:
            await self._ensure_pilothouse(table, dimension)
            self._ready.add(table)
        return f'"{table}"'

    async def _ensure_pilothouse(self, table: str, dimension: int) -> None:
        s = self.settings
        pool = await self.pool()
        async with pool.acquire() as connection:
            await connection.execute(
                "CREATE TABLE IF NOT EXISTS ph_knowledge_collection ("
                "tenant text NOT NULL, collection text NOT NULL, dimension int NOT NULL, "
                "model text NOT NULL, revision bigint NOT NULL DEFAULT 0, "
                "PRIMARY KEY (tenant, collection));"
                "CREATE TABLE IF NOT EXISTS ph_knowledge_document ("
                "id bigserial PRIMARY KEY, tenant text NOT NULL, collection text NOT NULL, "
                "source text NOT NULL, "
                "title text NOT NULL, content_hash text NOT NULL, metadata jsonb NOT NULL, "
                "chunk_count int NOT NULL, char_count int NOT NULL, "
                "created_at timestamptz NOT NULL DEFAULT now(), "
                "updated_at timestamptz NOT NULL DEFAULT now(), "
                "UNIQUE (tenant, collection, source));"
                f'CREATE TABLE IF NOT EXISTS "{table}" ('
                "id bigserial PRIMARY KEY, "
                "document_id bigint NOT NULL "
                "REFERENCES ph_knowledge_document(id) ON DELETE CASCADE, "
                "tenant text NOT NULL, collection text NOT NULL, position int NOT NULL, "
                "text text NOT NULL, "
                "heading text NOT NULL, token_count int NOT NULL, metadata jsonb NOT NULL, "
                f"embedding vector({dimension}) NOT NULL, "
                f"tsv tsvector GENERATED ALWAYS AS (to_tsvector('{s.text_search_config}', "
                "heading || ' ' || text)) STORED);"
                f'CREATE INDEX IF NOT EXISTS "{table}_collection" ON "{table}" '
                "(tenant, collection);"
                f'CREATE INDEX IF NOT EXISTS "{table}_document" ON "{table}" (document_id);'
                f'CREATE INDEX IF NOT EXISTS "{table}_tsv" ON "{table}" USING gin (tsv);'
                f'CREATE INDEX IF NOT EXISTS "{table}_hnsw" ON "{table}" USING hnsw '
                f"(embedding vector_cosine_ops) WITH (m = {s.m}, "
                f"ef_construction = {s.ef_construction});"
            )

    async def _ensure_langchain4j(self, collection: Collection, table: str) -> None:
        pool = await self.pool()
        async with pool.acquire() as connection:
            found = await self._table_dimension(connection, collection.name)
            if found is None:
                dimension = collection.model.dimension
                index = _quote(f"{collection.name.split('.')[-1]}_ph_hnsw")
                await connection.execute(
                    f"CREATE TABLE IF NOT EXISTS {table} (embedding_id UUID PRIMARY KEY, "
                    f"embedding vector({dimension}), text TEXT NULL, metadata JSON NULL);"
                    f"CREATE INDEX IF NOT EXISTS {index} ON {table} USING hnsw "
                    f"(embedding vector_cosine_ops) WITH (m = {self.settings.m}, "
                    f"ef_construction = {self.settings.ef_construction})"
                )
            elif found != collection.model.dimension:
                raise self._mismatch(collection, found)

    def _mismatch(self, collection: Collection, found: int) -> DimensionMismatchError:
        return DimensionMismatchError(
            f"table {collection.name} holds vectors of dimension {found}, but collection "
            f"{collection.code}'s embedding model {collection.model.name} gives "
            f"{collection.model.dimension}: use the model that filled it (embeddingDimension "
            f"{found}) or another table",
            expected=found,
            actual=collection.model.dimension,
        )

    async def _table_dimension(self, connection: Any, name: str) -> int | None:
        row = await connection.fetchrow(
            "SELECT a.atttypmod FROM pg_attribute a WHERE a.attrelid = to_regclass($1) "
            "AND a.attname = 'embedding' AND NOT a.attisdropped",
            name,
        )
        if row is None:
            return None
        return int(row["atttypmod"]) if row["atttypmod"] and row["atttypmod"] > 0 else 0

    # -- documents --------------------------------------------------------

    async def check_model(self, collection: Collection) -> bool:
        """See :meth:`Backend.check_model`."""
        pool = await self.pool()
        async with pool.acquire() as connection:
            if self.langchain4j:
                found = await self._table_dimension(connection, collection.name)
                if found is None:
                    return False
                if found != collection.model.dimension:
                    raise self._mismatch(collection, found)
                table = _quote(collection.name)
                return bool(
                    await connection.fetchval(
                        f"SELECT EXISTS (SELECT 1 FROM {table} WHERE {_readable(1)})",
                        collection.tenant,
                    )
                )
            exists = await connection.fetchval("SELECT to_regclass('ph_knowledge_collection')")
            if exists is None:
                return False
            row = await connection.fetchrow(
                "SELECT dimension, model FROM ph_knowledge_collection "
                "WHERE tenant = $1 AND collection = $2",
                collection.tenant,
                collection.name,
            )
        if row is None:
            return False
        check_state(collection, int(row["dimension"]), str(row["model"]))
        return True

    async def content_hash(self, collection: Collection, source: str) -> str | None:
        """See :meth:`Backend.content_hash`."""
        table = await self._ensure(collection)
        pool = await self.pool()
        if self.langchain4j:
            query = (
                f"SELECT metadata ->> 'ph_content_hash' FROM {table} "
                f"WHERE metadata ->> 'source' = $1 AND {_owned(2)} LIMIT 1"
            )
            return cast(str | None, await pool.fetchval(query, source, collection.tenant))
        return cast(
            str | None,
            await pool.fetchval(
                "SELECT content_hash FROM ph_knowledge_document WHERE tenant = $1 "
                "AND collection = $2 AND source = $3",
                collection.tenant,
                collection.name,
                source,
            ),
        )

    async def source_with_hash(
        self, collection: Collection, content_hash: str, other_than: str
    ) -> str | None:
        """See :meth:`Backend.source_with_hash`."""
        table = await self._ensure(collection)
        pool = await self.pool()
        if self.langchain4j:
            query = (
                f"SELECT metadata ->> 'source' FROM {table} "
                f"WHERE metadata ->> 'ph_content_hash' = $1 AND metadata ->> 'source' <> $3 "
                f"AND {_owned(2)} ORDER BY 1 LIMIT 1"
            )
            return cast(
                str | None, await pool.fetchval(query, content_hash, collection.tenant, other_than)
            )
        return cast(
            str | None,
            await pool.fetchval(
                "SELECT source FROM ph_knowledge_document WHERE tenant = $1 "
                "AND collection = $2 AND content_hash = $3 AND source <> $4 "
                "ORDER BY source LIMIT 1",
                collection.tenant,
                collection.name,
                content_hash,
                other_than,
            ),
        )

    async def write(
        self,
        collection: Collection,
        document: NewDocument,
        chunks: Sequence[Chunk],
        vectors: Vectors,
    ) -> tuple[str, bool]:
        """See :meth:`Backend.write`."""
        table = await self._ensure(collection)
        pool = await self.pool()
        async with pool.acquire() as connection, connection.transaction():
            if self.langchain4j:
                return await self._write_langchain4j(
                    connection, collection.tenant, table, document, chunks, vectors
                )
            return await self._write_pilothouse(
                connection, collection, table, document, chunks, vectors
            )

    async def _write_pilothouse(
        self,
        connection: Any,
        collection: Collection,
        table: str,
        document: NewDocument,
        chunks: Sequence[Chunk],
        vectors: Vectors,
    ) -> tuple[str, bool]:
        state = await connection.fetchrow(
            "INSERT INTO ph_knowledge_collection (tenant, collection, dimension, model, revision) "
            "VALUES ($1, $2, $3, $4, 1) ON CONFLICT (tenant, collection) DO UPDATE SET "
            "revision = ph_knowledge_collection.revision + 1 RETURNING dimension, model",
            collection.tenant,
            collection.name,
            collection.model.dimension,
            collection.model.name,
        )
        check_state(collection, int(state["dimension"]), str(state["model"]))
        existing = await connection.fetchval(
            "SELECT id FROM ph_knowledge_document WHERE tenant = $1 AND collection = $2 "
            "AND source = $3 FOR UPDATE",
            collection.tenant,
            collection.name,
            document.source,
        )
        values = (
            document.title[:512],
            document.content_hash,
            json.dumps(document.metadata, default=str),
            len(chunks),
            document.char_count,
        )
        if existing is None:
            document_id = await connection.fetchval(
                "INSERT INTO ph_knowledge_document (tenant, collection, source, title, "
                "content_hash, metadata, chunk_count, char_count) "
                "VALUES ($1, $2, $3, $4, $5, $6::jsonb, $7, $8) RETURNING id",
                collection.tenant,
                collection.name,
                document.source,
                *values,
            )
        else:
            document_id = existing
            await connection.execute(
                f"DELETE FROM {table} WHERE document_id = $1 AND tenant = $2",
                document_id,
                collection.tenant,
            )
            await connection.execute(
                "UPDATE ph_knowledge_document SET title = $2, content_hash = $3, "
                "metadata = $4::jsonb, chunk_count = $5, char_count = $6, updated_at = now() "
                "WHERE id = $1",
                document_id,
                *values,
            )
        records = [
            (
                document_id,
                collection.tenant,
                collection.name,
                int(chunk.metadata.get("position", i)),
                chunk.text,
                chunk.heading,
                chunk.token_count,
                json.dumps(
                    {**document.metadata, **chunk.metadata, "source": document.source}, default=str
                ),
                np.asarray(vector, dtype=np.float32),
            )
            for i, (chunk, vector) in enumerate(zip(chunks, vectors, strict=True))
        ]
        await connection.copy_records_to_table(
            table.strip('"'),
            records=records,
            columns=[
                "document_id",
                "tenant",
                "collection",
                "position",
                "text",
                "heading",
                "token_count",
                "metadata",
                "embedding",
            ],
        )
        return str(document_id), existing is not None

    async def _write_langchain4j(
        self,
        connection: Any,
        tenant: str,
        table: str,
        document: NewDocument,
        chunks: Sequence[Chunk],
        vectors: Vectors,
    ) -> tuple[str, bool]:
        deleted = await connection.execute(
            f"DELETE FROM {table} WHERE metadata ->> 'source' = $1 AND {_owned(2)}",
            document.source,
            tenant,
        )
        document_id = str(uuid.uuid5(_NAMESPACE, f"{tenant}\n{document.source}"))
        records: list[tuple[Any, ...]] = []
        for i, (chunk, vector) in enumerate(zip(chunks, vectors, strict=True)):
            metadata = {
                **{k: _as_text(v) for k, v in document.metadata.items()},
                **{k: _as_text(v) for k, v in chunk.metadata.items() if k != "position"},
                "source": document.source,
                "title": document.title,
                "heading": chunk.heading,
                "index": str(chunk.metadata.get("position", i)),
                "ph_document_id": document_id,
                "ph_content_hash": document.content_hash,
                "ph_tenant": tenant,
            }
            records.append(
                (
                    uuid.uuid4(),
                    np.asarray(vector, dtype=np.float32),
                    chunk.text,
                    json.dumps(metadata),
                )
            )
        await connection.executemany(
            f"INSERT INTO {table} (embedding_id, embedding, text, metadata) "
            "VALUES ($1, $2, $3, $4::json)",
            records,
        )
        return document_id, str(deleted) != "DELETE 0"

    async def delete(self, collection: Collection, source: str) -> bool:
        """See :meth:`Backend.delete`."""
        table = await self._ensure(collection)
        pool = await self.pool()
        if self.langchain4j:
            status = await pool.execute(
                f"DELETE FROM {table} WHERE metadata ->> 'source' = $1 AND {_owned(2)}",
                source,
                collection.tenant,
            )
            return str(status) != "DELETE 0"
        async with pool.acquire() as connection, connection.transaction():
            status = await connection.execute(
                "DELETE FROM ph_knowledge_document WHERE tenant = $1 AND collection = $2 "
                "AND source = $3",
                collection.tenant,
                collection.name,
                source,
            )
            await connection.execute(
                "UPDATE ph_knowledge_collection SET revision = revision + 1 "
                "WHERE tenant = $1 AND collection = $2",
                collection.tenant,
                collection.name,
            )
        return str(status) != "DELETE 0"

    async def documents(self, collection: Collection) -> list[DocumentInfo]:
        """See :meth:`Backend.documents`."""
        table = await self._ensure(collection)
        pool = await self.pool()
        if self.langchain4j:
            rows = await pool.fetch(
                "SELECT coalesce(metadata ->> 'source', metadata ->> 'file_name', "
                "metadata ->> 'url', '') AS source, min(metadata ->> 'title') AS title, "
                "min(metadata ->> 'ph_content_hash') AS hash, "
                "min(metadata ->> 'ph_document_id') AS id, count(*) AS chunks "
                f"FROM {table} WHERE {_readable(1)} GROUP BY 1 ORDER BY 1",
                collection.tenant,
            )
            return [
                DocumentInfo(
                    id=r["id"] or r["source"],
                    source=r["source"],
                    title=r["title"] or r["source"],
                    chunks=int(r["chunks"]),
                    content_hash=r["hash"] or "",
                    metadata={},
                )
                for r in rows
            ]
        rows = await pool.fetch(
            "SELECT id, source, title, chunk_count, content_hash, metadata::text AS metadata, "
            "updated_at FROM ph_knowledge_document WHERE tenant = $1 AND collection = $2 "
            "ORDER BY source",
            collection.tenant,
            collection.name,
        )
        return [
            DocumentInfo(
                id=str(r["id"]),
                source=r["source"],
                title=r["title"],
                chunks=int(r["chunk_count"]),
                content_hash=r["content_hash"],
                metadata=json.loads(r["metadata"]),
                updated_at=r["updated_at"],
            )
            for r in rows
        ]

    async def chunks(
        self, collection: Collection, source: str, *, limit: int, offset: int
    ) -> list[ChunkRow]:
        """See :meth:`Backend.chunks`."""
        table = await self._ensure(collection)
        pool = await self.pool()
        if self.langchain4j:
            # A LangChain4j row names its document in its metadata, its place as "index".
            rows = await pool.fetch(
                f"SELECT embedding_id::text AS key, text, metadata::text AS metadata FROM {table} "
                "WHERE coalesce(metadata ->> 'source', metadata ->> 'file_name', "
                f"metadata ->> 'url', '') = $1 AND {_readable(2)} "
                "ORDER BY CASE WHEN metadata ->> 'index' ~ '^[0-9]+$' "
                "THEN (metadata ->> 'index')::bigint ELSE 0 END LIMIT $3 OFFSET $4",
                source,
                collection.tenant,
                limit,
                offset,
            )
            return [_langchain4j_row(r, collection.name) for r in rows]
        rows = await pool.fetch(
            f"SELECT c.id::text AS key, c.document_id::text AS document_id, c.text, c.heading, "
            f"c.position, c.metadata::text AS metadata, d.source, d.title FROM {table} c "
            "JOIN ph_knowledge_document d ON d.id = c.document_id "
            "WHERE d.source = $1 AND c.tenant = $2 AND c.collection = $3 "
            "ORDER BY c.position LIMIT $4 OFFSET $5",
            source,
            collection.tenant,
            collection.name,
            limit,
            offset,
        )
        return [
            ChunkRow(
                key=r["key"],
                document_id=r["document_id"],
                source=r["source"],
                title=r["title"],
                text=r["text"],
                heading=r["heading"],
                position=int(r["position"]),
                metadata=json.loads(r["metadata"]),
            )
            for r in rows
        ]

    # -- search -----------------------------------------------------------

    def _scope(self, collection: Collection, start: int) -> tuple[str, list[Any]]:
        """The WHERE clause limiting a chunk table to the tenant's collection, and its parameters.

        Args:
            collection: the collection.
            start: the number of the clause's first parameter.
        """
        if self.langchain4j:
            return _readable(start), [collection.tenant]
        clause = f"tenant = ${start} AND collection = ${start + 1}"
        return clause, [collection.tenant, collection.name]

    async def vector_candidates(
        self, collection: Collection, query: Vectors, k: int, filters: MetadataFilter
    ) -> list[tuple[str, float]]:
        """See :meth:`Backend.vector_candidates`."""
        table = await self._ensure(collection)
        key = "embedding_id::text" if self.langchain4j else "id::text"
        scope, scope_params = self._scope(collection, 2)
        where, params = _filter_sql(filters, 2 + len(scope_params), self.langchain4j)
        sql = (
            f"SELECT {key} AS key, 1 - (embedding <=> $1) AS similarity FROM {table} "
            f"WHERE {scope}{where} ORDER BY embedding <=> $1 LIMIT {int(k)}"
        )
        pool = await self.pool()
        async with pool.acquire() as connection, connection.transaction():
            # SET LOCAL lasts for this transaction only; iterative scans (pgvector
            # 0.8+) keep a filtered HNSW search from returning fewer than k rows.
            await connection.execute(f"SET LOCAL hnsw.ef_search = {self.settings.ef_search}")
            await connection.execute("SET LOCAL hnsw.iterative_scan = strict_order")
            rows = await connection.fetch(sql, np.asarray(query), *scope_params, *params)
        return [(r["key"], float(r["similarity"])) for r in rows]

    async def text_candidates(
        self, collection: Collection, query: str, k: int, filters: MetadataFilter
    ) -> list[str]:
        """See :meth:`Backend.text_candidates`."""
        words = _WORDS.findall(query.lower())
        if not words:
            return []
        table = await self._ensure(collection)
        config = self.settings.text_search_config
        if self.langchain4j:
            key, vector = "embedding_id::text", f"to_tsvector('{config}', coalesce(text, ''))"
        else:
            key, vector = "id::text", "tsv"
        scope, scope_params = self._scope(collection, 2)
        where, params = _filter_sql(filters, 2 + len(scope_params), self.langchain4j)
        sql = (
            f"SELECT {key} AS key FROM {table}, to_tsquery('{config}', $1) AS q "
            f"WHERE {scope} AND {vector} @@ q{where} "
            f"ORDER BY ts_rank_cd({vector}, q) DESC LIMIT {int(k)}"
        )
        pool = await self.pool()
        rows = await pool.fetch(sql, " | ".join(words), *scope_params, *params)
        return [r["key"] for r in rows]

    async def similarities(
        self, collection: Collection, keys: Sequence[str], query: Vectors
    ) -> dict[str, float]:
        """See :meth:`Backend.similarities`."""
        if not keys:
            return {}
        table = await self._ensure(collection)
        key, cast_to = ("embedding_id", "uuid") if self.langchain4j else ("id", "bigint")
        scope, scope_params = self._scope(collection, 3)
        pool = await self.pool()
        rows = await pool.fetch(
            f"SELECT {key}::text AS key, 1 - (embedding <=> $1) AS similarity FROM {table} "
            f"WHERE {scope} "
            f"AND {key} = ANY($2::{cast_to}[])",
            np.asarray(query),
            _keys(keys, self.langchain4j),
            *scope_params,
        )
        return {r["key"]: float(r["similarity"]) for r in rows}

    async def fetch(self, collection: Collection, keys: Sequence[str]) -> dict[str, ChunkRow]:
        """See :meth:`Backend.fetch`."""
        if not keys:
            return {}
        table = await self._ensure(collection)
        pool = await self.pool()
        scope, scope_params = self._scope(collection, 2)
        if self.langchain4j:
            rows = await pool.fetch(
                f"SELECT embedding_id::text AS key, text, metadata::text AS metadata "
                f"FROM {table} WHERE embedding_id = ANY($1::uuid[]) AND {scope}",
                _keys(keys, True),
                *scope_params,
            )
            return {r["key"]: _langchain4j_row(r, collection.name) for r in rows}
        rows = await pool.fetch(
            f"SELECT c.id::text AS key, c.document_id::text AS document_id, c.text, c.heading, "
            f"c.position, c.metadata::text AS metadata, d.source, d.title FROM {table} c "
            "JOIN ph_knowledge_document d ON d.id = c.document_id "
            f"WHERE c.id = ANY($1::bigint[]) AND c.{scope.replace(' AND ', ' AND c.')}",
            _keys(keys, False),
            *scope_params,
        )
        return {
            r["key"]: ChunkRow(
                key=r["key"],
                document_id=r["document_id"],
                source=r["source"],
                title=r["title"],
                text=r["text"],
                heading=r["heading"],
                position=int(r["position"]),
                metadata=json.loads(r["metadata"]),
            )
            for r in rows
        }


def _keys(keys: Sequence[str], uuids: bool) -> list[Any]:
    try:
        return [uuid.UUID(k) for k in keys] if uuids else [int(k) for k in keys]
    except ValueError as exc:
        raise KnowledgeError(f"not a chunk id of this store: {exc}") from exc


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, default=str)


def _langchain4j_row(row: Any, table: str) -> ChunkRow:
    metadata: dict[str, Any] = json.loads(row["metadata"] or "{}")
    source = str(
        metadata.get("source") or metadata.get("file_name") or metadata.get("url") or table
    )
    index = str(metadata.get("index", "0"))
    return ChunkRow(
        key=row["key"],
        document_id=str(metadata.get("ph_document_id") or source),
        source=source,
        title=str(metadata.get("title") or metadata.get("file_name") or source),
        text=row["text"] or "",
        heading=str(metadata.get("heading") or ""),
        position=int(index) if index.isdigit() else 0,
        metadata=metadata,
    )
