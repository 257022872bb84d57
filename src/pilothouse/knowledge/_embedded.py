"""The embedded store: chunks in pilothouse's own database, vectors searched in process.

Writes run through :meth:`Database.transaction`: a document and all its
chunks are written (or replaced) in one transaction, or not at all. Reads
use a plain connection (concurrent readers on SQLite's WAL). Full text is
SQLite FTS5 with BM25, or PostgreSQL's ``to_tsvector('english', ...)``
ranked by BM25 too (:mod:`._bm25`) when pilothouse's database is PostgreSQL. Vectors are
searched by :class:`~pilothouse.knowledge._index.VectorIndex`, kept in step
with the database by the collection's revision.
"""

from __future__ import annotations

__all__ = ["EmbeddedBackend"]

import re
from collections.abc import Sequence
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import anyio
import anyio.to_thread
import numpy as np
from sqlalchemy import (
    Connection,
    Float,
    Integer,
    Numeric,
    Table,
    and_,
    case,
    column,
    delete,
    false,
    func,
    insert,
    literal,
    select,
    text,
    update,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.engine import make_url
from sqlalchemy.sql import Select
from sqlalchemy.sql.elements import ColumnElement

from pilothouse.catalog._stores import EmbeddedStoreSettings
from pilothouse.knowledge._backend import Backend, ChunkRow, Collection, NewDocument, filter_items
from pilothouse.knowledge._bm25 import TextStats, bm25_search, text_stats
from pilothouse.knowledge._embedders import Vectors
from pilothouse.knowledge._errors import (
    DimensionMismatchError,
    KnowledgeSetupError,
)
from pilothouse.knowledge._index import Ids, VectorIndex
from pilothouse.knowledge._tables import CollectionState, KnowledgeChunk, KnowledgeDocument
from pilothouse.knowledge._types import DocumentInfo, FilterValue, MetadataFilter

if TYPE_CHECKING:
    from pilothouse.knowledge._chunking import Chunk
    from pilothouse.store import Database

_state = cast(Table, CollectionState.__table__)
_documents = cast(Table, KnowledgeDocument.__table__)
_chunks = cast(Table, KnowledgeChunk.__table__)
_BATCH = 5_000
_WORDS = re.compile(r"\w+", re.UNICODE)


def check_state(collection: Collection, dimension: int | None, model: str | None) -> None:
    """Refuse a collection whose stored vectors another model made.

    Raises:
        DimensionMismatchError: the dimensions differ (both named).
        KnowledgeSetupError: the same dimension, another model.
    """
    info = collection.model
    if dimension is not None and dimension != info.dimension:
        raise DimensionMismatchError(
            f"collection {collection.code} holds vectors of dimension {dimension} "
            f"(made by {model}), but its embedding model {info.name} gives {info.dimension}: "
            "use the model it was made with, or ingest into a new collection",
            expected=dimension,
            actual=info.dimension,
        )
    if model is not None and model != info.name:
        raise KnowledgeSetupError(
            f"collection {collection.code} was embedded with {model}, not {info.name}: vectors "
            "of two models do not compare; use that model or ingest into a new collection"
        )


def _filter_clauses(filters: MetadataFilter, dialect: str) -> list[ColumnElement[bool]]:
    """A chunk's metadata value matches a filter value only when both are of one JSON type.

    A text filter matches only text values, a number only numbers, a boolean
    only booleans: PostgreSQL read every value as text, so ``"5"`` matched
    a stored ``5`` there and not on SQLite; it also failed the whole search
    casting a text value such as ``"high"`` to a number, and SQLite cast it
    to 0, so ``0`` or ``false`` matched every text value. Numbers compare
    exactly (``3`` matches ``3`` and ``3.0``): compared as floats, integers
    past 2**53 matched their neighbours.

    Raises:
        KnowledgeError: a filter :func:`filter_items` refuses (a number the
            stores cannot compare alike: an integer past 64 bits, infinity, NaN).
    """
    clauses: list[ColumnElement[bool]] = []
    column: Any = KnowledgeChunk.meta
    for key, values in filter_items(filters):
        options: list[ColumnElement[bool]] = []
        for value in values:
            if dialect == "sqlite":
                options.append(_sqlite_typed(column, key, value))
            else:
                options.append(_postgresql_typed(column, key, value))
        clauses.append(options[0] if len(options) == 1 else _any(options))
    return clauses


def _sqlite_typed(column: Any, key: str, value: FilterValue) -> ColumnElement[bool]:
    path = f'$."{key}"'
    kind = func.json_type(column, path)
    if isinstance(value, bool):
        return kind == ("true" if value else "false")
    if isinstance(value, str):
        return and_(kind == "text", column[key].as_string() == value)
    # The value as SQLite holds it (an integer or a real), not cast: an
    # integer compares with an integer exactly, and with a real by value.
    return and_(kind.in_(("integer", "real")), func.json_extract(column, path) == value)


def _postgresql_typed(column: Any, key: str, value: FilterValue) -> ColumnElement[bool]:
    kind = func.json_typeof(column[key])
    if isinstance(value, bool):
        return and_(kind == "boolean", column[key].as_string() == ("true" if value else "false"))
    if isinstance(value, str):
        return and_(kind == "string", column[key].as_string() == value)
    # Compared as numeric, exact for every integer and for the decimal a
    # float is written as (a float comparison lost integers past 2**53).
    # CASE, not AND: PostgreSQL may evaluate either side of an AND first,
    # and the cast fails on text; a CASE tests the type before casting.
    number = Decimal(value) if isinstance(value, int) else Decimal(repr(value))
    stored = sql_cast(column[key].as_string(), Numeric)
    return case((kind == "number", stored == literal(number, Numeric())), else_=false())


def _any(options: list[ColumnElement[bool]]) -> ColumnElement[bool]:
    from sqlalchemy import or_

    return or_(*options)


class EmbeddedBackend(Backend):
    """The embedded store on one pilothouse database.

    Args:
        database: pilothouse's database (migrated to 0004 or later).
    """

    def __init__(self, database: Database) -> None:
        self.database = database
        self._indexes: dict[int, VectorIndex] = {}
        self._locks: dict[int, anyio.Lock] = {}
        # PostgreSQL's BM25 statistics per collection, valid at their revision.
        self._text_stats: dict[int, TextStats] = {}
        url = make_url(database.url)
        folder: Path | None = None
        if database.is_sqlite and url.database and url.database != ":memory:":
            path = Path(url.database)
            folder = path.with_name(f"{path.name}.knowledge")
        self._folder = folder

    async def _read(self, work: Any, *args: Any) -> Any:
        async with self.database.engine.connect() as connection:
            return await connection.run_sync(work, *args)

    # -- documents ------------------------------------------------------

    async def check_model(self, collection: Collection) -> bool:
        """See :meth:`Backend.check_model`."""

        def read(connection: Connection) -> Any:
            query = select(_state.c.dimension, _state.c.model).where(
                _state.c.collection_id == collection.id
            )
            return connection.execute(query).first()

        row = await self._read(read)
        if row is None or row.dimension is None:
            return False
        check_state(collection, row.dimension, row.model)
        return True

    async def content_hash(self, collection: Collection, source: str) -> str | None:
        """See :meth:`Backend.content_hash`."""

        def read(connection: Connection) -> str | None:
            query = select(_documents.c.content_hash).where(
                _documents.c.collection_id == collection.id, _documents.c.source == source
            )
            return connection.execute(query).scalar()

        return cast(str | None, await self._read(read))

    async def source_with_hash(
        self, collection: Collection, content_hash: str, other_than: str
    ) -> str | None:
        """See :meth:`Backend.source_with_hash`."""

        def read(connection: Connection) -> str | None:
            query = (
                select(_documents.c.source)
                .where(
                    _documents.c.collection_id == collection.id,
                    _documents.c.content_hash == content_hash,
                    _documents.c.source != other_than,
                )
                .order_by(_documents.c.source)
                .limit(1)
            )
            return connection.execute(query).scalar()

        return cast(str | None, await self._read(read))

    async def write(
        self,
        collection: Collection,
        document: NewDocument,
        chunks: Sequence[Chunk],
        vectors: Vectors,
    ) -> tuple[str, bool]:
        """See :meth:`Backend.write`."""
        blobs = [np.asarray(v, dtype="<f4").tobytes() for v in vectors]
        result = await self.database.transaction(_write, collection, document, chunks, blobs)
        document_id, replaced, removed, added, revision = result
        await self._apply(collection.id, revision, removed, added, vectors)
        return str(document_id), replaced

    async def delete(self, collection: Collection, source: str) -> bool:
        """See :meth:`Backend.delete`."""
        result = await self.database.transaction(_delete, collection, source)
        if result is None:
            return False
        removed, revision = result
        empty = np.zeros((0, collection.model.dimension), dtype=np.float32)
        await self._apply(collection.id, revision, removed, [], empty)
        return True

    async def documents(self, collection: Collection) -> list[DocumentInfo]:
        """See :meth:`Backend.documents`."""

        def read(connection: Connection) -> list[DocumentInfo]:
            query = (
                select(_documents)
                .where(_documents.c.collection_id == collection.id)
                .order_by(_documents.c.source)
            )
            return [
                DocumentInfo(
                    id=str(row.id),
                    source=row.source,
                    title=row.title,
                    chunks=row.chunk_count,
                    content_hash=row.content_hash,
                    metadata=dict(row.metadata),
                    updated_at=row.updated_at,
                )
                for row in connection.execute(query)
            ]

        return cast(list[DocumentInfo], await self._read(read))

    # -- search ---------------------------------------------------------

    async def _apply(
        self,
        collection_id: int,
        revision: int,
        removed: list[int],
        added: list[int],
        vectors: Vectors,
    ) -> None:
        """Bring a cached index along with this process's own write, when it was current."""
        index = self._indexes.get(collection_id)
        if index is None:
            return
        async with self._lock(collection_id):
            if index.revision != revision - 1:
                return  # another writer came between: the next search syncs
            index.remove(np.asarray(removed, dtype=np.int64))
            index.add(np.asarray(added, dtype=np.int64), vectors)
            index.revision = revision

    def _lock(self, collection_id: int) -> anyio.Lock:
        return self._locks.setdefault(collection_id, anyio.Lock())

    async def index(self, collection: Collection) -> VectorIndex | None:
        """The collection's index, brought up to date; None while it holds no vectors."""
        async with self._lock(collection.id):
            state = await self._read(_read_state, collection.id)
            if state is None or state[1] is None:
                return None
            revision, dimension, model = state
            check_state(collection, dimension, model)
            index = self._indexes.get(collection.id)
            if index is None or index.dimension != dimension:
                settings = cast(EmbeddedStoreSettings, collection.store_settings)
                path = (
                    self._folder / f"collection-{collection.id}.usearch" if self._folder else None
                )
                index = VectorIndex(dimension, settings, path)
                await anyio.to_thread.run_sync(index.load_saved)
                self._indexes[collection.id] = index
            if index.revision != revision:
                await self._sync(collection.id, index, revision)
            return index

    async def _sync(self, collection_id: int, index: VectorIndex, revision: int) -> None:
        stored: Ids = await self._read(_chunk_ids, collection_id)
        held = index.ids()
        index.remove(held[~np.isin(held, stored)])
        if len(held) == 0:
            # A first load reads every vector in one statement.
            ids, matrix = await self._read(_chunk_vectors, collection_id, None, index.dimension)
            index.add(ids, matrix)
        else:
            missing = stored[~np.isin(stored, held)]
            for start in range(0, len(missing), _BATCH):
                keys = missing[start : start + _BATCH]
                ids, matrix = await self._read(_chunk_vectors, collection_id, keys, index.dimension)
                index.add(ids, matrix)
        index.revision = revision
        await anyio.to_thread.run_sync(index.save)

    async def vector_candidates(
        self, collection: Collection, query: Vectors, k: int, filters: MetadataFilter
    ) -> list[tuple[str, float]]:
        """See :meth:`Backend.vector_candidates`."""
        index = await self.index(collection)
        if index is None:
            return []
        allowed: Ids | None = None
        if filters:
            allowed = await self._read(_filtered_ids, collection.id, filters)
        found = await anyio.to_thread.run_sync(index.search, query, k, allowed)
        return [(str(key), score) for key, score in found]

    async def text_candidates(
        self, collection: Collection, query: str, k: int, filters: MetadataFilter
    ) -> list[str]:
        """See :meth:`Backend.text_candidates`."""
        words = _WORDS.findall(query.lower())
        if not words:
            return []
        found = await self._read(self._text_search, collection.id, words, k, filters)
        return [str(key) for key in found]

    def _text_search(
        self,
        connection: Connection,
        collection_id: int,
        words: list[str],
        k: int,
        filters: MetadataFilter,
    ) -> list[int]:
        if connection.dialect.name == "sqlite":
            return _fts5_search(connection, collection_id, words, k, filters)
        revision = _read_state(connection, collection_id)[0]
        stats = self._text_stats.get(collection_id)
        if stats is None or stats.revision != revision:
            stats = text_stats(connection, _chunks, collection_id, revision)
            self._text_stats[collection_id] = stats
        return bm25_search(
            connection,
            _chunks,
            collection_id,
            words,
            k,
            _filter_clauses(filters, connection.dialect.name),
            stats,
        )

    async def similarities(
        self, collection: Collection, keys: Sequence[str], query: Vectors
    ) -> dict[str, float]:
        """See :meth:`Backend.similarities`."""
        index = await self.index(collection)
        if index is None or not keys:
            return {}
        ids = np.asarray([int(k) for k in keys], dtype=np.int64)
        ids = ids[np.isin(ids, index.ids())]
        scores = index.vectors(ids) @ query
        return {str(int(i)): float(s) for i, s in zip(ids, scores, strict=True)}

    async def chunks(
        self, collection: Collection, source: str, *, limit: int, offset: int
    ) -> list[ChunkRow]:
        """See :meth:`Backend.chunks`."""
        rows = await self._read(_document_chunks, collection.id, source, limit, offset)
        return cast(list[ChunkRow], rows)

    async def fetch(self, collection: Collection, keys: Sequence[str]) -> dict[str, ChunkRow]:
        """See :meth:`Backend.fetch`."""
        if not keys:
            return {}
        rows = await self._read(_fetch, collection.id, [int(k) for k in keys])
        return {row.key: row for row in cast(list[ChunkRow], rows)}


def _read_state(connection: Connection, collection_id: int) -> tuple[int, int | None, str | None]:
    row = connection.execute(
        select(_state.c.revision, _state.c.dimension, _state.c.model).where(
            _state.c.collection_id == collection_id
        )
    ).first()
    return (0, None, None) if row is None else (row.revision, row.dimension, row.model)


def _chunk_ids(connection: Connection, collection_id: int) -> Ids:
    query = select(_chunks.c.id).where(_chunks.c.collection_id == collection_id)
    return np.asarray(connection.execute(query).scalars().all(), dtype=np.int64)


def _chunk_vectors(
    connection: Connection, collection_id: int, keys: Ids | None, dimension: int
) -> tuple[Ids, Vectors]:
    query = select(_chunks.c.id, _chunks.c.embedding).where(
        _chunks.c.collection_id == collection_id
    )
    if keys is not None:
        query = query.where(_chunks.c.id.in_([int(k) for k in keys]))
    rows = connection.execute(query).all()
    ids = np.asarray([r.id for r in rows], dtype=np.int64)
    blob = b"".join(r.embedding for r in rows)
    matrix = np.frombuffer(blob, dtype="<f4").astype(np.float32).reshape(len(rows), dimension)
    return ids, matrix


def _filtered_ids(connection: Connection, collection_id: int, filters: MetadataFilter) -> Ids:
    query = select(_chunks.c.id).where(
        _chunks.c.collection_id == collection_id,
        *_filter_clauses(filters, connection.dialect.name),
    )
    return np.asarray(connection.execute(query).scalars().all(), dtype=np.int64)


def _fts5_search(
    connection: Connection, collection_id: int, words: list[str], k: int, filters: MetadataFilter
) -> list[int]:
    # Each word quoted, so nothing in a query is FTS5 syntax; OR, so a
    # chunk with some of the words still ranks (BM25 orders them).
    match = " OR ".join(f'"{w}"' for w in words)
    fts = (
        text(
            "SELECT rowid AS id, bm25(knowledge_chunk_fts) AS rank FROM knowledge_chunk_fts "
            "WHERE knowledge_chunk_fts MATCH :match"
        )
        .columns(column("id", Integer), column("rank", Float))
        .subquery("fts")
    )
    query = (
        select(_chunks.c.id)
        .join(fts, fts.c.id == _chunks.c.id)
        .where(
            _chunks.c.collection_id == collection_id,
            *_filter_clauses(filters, connection.dialect.name),
        )
        .order_by(fts.c.rank)
        .limit(k)
    )
    return list(connection.execute(query, {"match": match}).scalars())


def _document_chunks(
    connection: Connection, collection_id: int, source: str, limit: int, offset: int
) -> list[ChunkRow]:
    return _chunk_rows(
        connection,
        _chunk_query()
        .where(_chunks.c.collection_id == collection_id, _documents.c.source == source)
        .order_by(_chunks.c.position)
        .limit(limit)
        .offset(offset),
    )


def _fetch(connection: Connection, collection_id: int, keys: list[int]) -> list[ChunkRow]:
    query = _chunk_query().where(_chunks.c.collection_id == collection_id, _chunks.c.id.in_(keys))
    return _chunk_rows(connection, query)


def _chunk_query() -> Select[*tuple[Any, ...]]:
    return (
        select(
            _chunks.c.id,
            _chunks.c.document_id,
            _chunks.c.text,
            _chunks.c.heading,
            _chunks.c.position,
            _chunks.c.metadata,
            _documents.c.source,
            _documents.c.title,
        )
    ).join(_documents, _documents.c.id == _chunks.c.document_id)


def _chunk_rows(connection: Connection, query: Select[*tuple[Any, ...]]) -> list[ChunkRow]:
    return [
        ChunkRow(
            key=str(row.id),
            document_id=str(row.document_id),
            source=row.source,
            title=row.title,
            text=row.text,
            heading=row.heading,
            position=row.position,
            metadata=dict(row.metadata),
        )
        for row in connection.execute(query)
    ]


def _bump(connection: Connection, collection: Collection) -> int:
    """Record the model and raise the revision; returns the new revision."""
    row = connection.execute(
        select(_state.c.revision, _state.c.dimension, _state.c.model).where(
            _state.c.collection_id == collection.id
        )
    ).first()
    if row is None:
        connection.execute(
            insert(_state).values(
                collection_id=collection.id,
                revision=1,
                dimension=collection.model.dimension,
                model=collection.model.name,
            )
        )
        return 1
    check_state(collection, row.dimension, row.model)
    revision = int(row.revision) + 1
    connection.execute(
        update(_state)
        .where(_state.c.collection_id == collection.id)
        .values(
            revision=revision, dimension=collection.model.dimension, model=collection.model.name
        )
    )
    return revision


def _write(
    connection: Connection,
    collection: Collection,
    document: NewDocument,
    chunks: Sequence[Chunk],
    blobs: list[bytes],
) -> tuple[int, bool, list[int], list[int], int]:
    revision = _bump(connection, collection)
    existing = connection.execute(
        select(_documents.c.id).where(
            _documents.c.collection_id == collection.id, _documents.c.source == document.source
        )
    ).scalar()
    values = {
        "title": document.title[:512],
        "content_hash": document.content_hash,
        "metadata": document.metadata,
        "chunk_count": len(chunks),
        "char_count": document.char_count,
    }
    removed: list[int] = []
    if existing is None:
        document_id = connection.execute(
            insert(_documents)
            .values(collection_id=collection.id, source=document.source, **values)
            .returning(_documents.c.id)
        ).scalar_one()
    else:
        document_id = int(existing)
        removed = list(
            connection.execute(
                select(_chunks.c.id).where(_chunks.c.document_id == document_id)
            ).scalars()
        )
        connection.execute(delete(_chunks).where(_chunks.c.document_id == document_id))
        connection.execute(
            update(_documents).where(_documents.c.id == document_id).values(**values)
        )
    added: list[int] = []
    if chunks:
        rows = [
            {
                "document_id": document_id,
                "collection_id": collection.id,
                "position": chunk.metadata.get("position", i),
                "text": chunk.text,
                "heading": chunk.heading,
                "token_count": chunk.token_count,
                "metadata": {**document.metadata, **chunk.metadata, "source": document.source},
                "embedding": blob,
            }
            for i, (chunk, blob) in enumerate(zip(chunks, blobs, strict=True))
        ]
        statement = insert(_chunks).returning(_chunks.c.id, sort_by_parameter_order=True)
        result = connection.execute(statement, rows)
        added = [int(i) for i in result.scalars()]
    return document_id, existing is not None, removed, added, revision


def _delete(
    connection: Connection, collection: Collection, source: str
) -> tuple[list[int], int] | None:
    document_id = connection.execute(
        select(_documents.c.id).where(
            _documents.c.collection_id == collection.id, _documents.c.source == source
        )
    ).scalar()
    if document_id is None:
        return None
    removed = list(
        connection.execute(
            select(_chunks.c.id).where(_chunks.c.document_id == document_id)
        ).scalars()
    )
    connection.execute(delete(_chunks).where(_chunks.c.document_id == document_id))
    connection.execute(delete(_documents).where(_documents.c.id == document_id))
    revision = int(
        connection.execute(
            update(_state)
            .where(_state.c.collection_id == collection.id)
            .values(revision=_state.c.revision + 1)
            .returning(_state.c.revision)
        ).scalar_one()
    )
    return removed, revision
