"""The vector indexes scoped memory searches: pgvector, the knowledge index, or exact.

``memory_record`` (pilothouse's own database) stays the truth; an index is
derived from it and brought up to date at search time, so every writer
(the door, the extraction worker, another process) may write rows the plain
way and no write path can leave an index behind. Three kinds, chosen once
per process (:func:`choose_index`):

- ``pgvector``: on PostgreSQL with the ``vector`` extension available, the
  vectors are copied into ``memory_vector_<dimension>`` (record id, update
  time, ``vector(n)``) under an HNSW index (``vector_cosine_ops``, m 16,
  ef_construction 64, as the knowledge feature's pgvector store), and one
  SQL statement joins it to ``memory_record`` with the scope's whole filter
  in its ``WHERE``: ``ORDER BY embedding <=> q LIMIT k``, iterative scans
  on (pgvector 0.8) so a filtered HNSW scan keeps going until it has ``k``
  rows of the scope. When it still returns fewer than ``k`` while the scope
  holds more, the same statement runs again ordered by an expression the
  index cannot serve, which PostgreSQL answers exactly.
- ``embedded``: the knowledge feature's in-process
  :class:`~pilothouse.knowledge._index.VectorIndex` (exact below 20,000
  vectors, a usearch HNSW graph from there on), one per *partition*: a
  tenant's organization, one agent, one user, one session. SQL lists the
  partition's ids and marks those the scope's whole filter accepts; the
  index searches the whole partition when all are accepted (an agent's or
  the organization's memory), and otherwise only the accepted ids, compared
  exactly (the knowledge index's pre-filter), so no filter is applied after
  a top-k cut.
- ``exact``: no index; the scope's rows are read with their vectors and
  compared in the process. Used only when neither index can run (no
  pgvector on PostgreSQL and no ``usearch``), and logged at WARNING.
"""

from __future__ import annotations

__all__ = [
    "INDEX_KINDS",
    "EmbeddedMemoryIndex",
    "ExactMemoryIndex",
    "MemoryIndex",
    "PgVectorMemoryIndex",
    "choose_index",
]

import importlib.util
import logging
from abc import ABC, abstractmethod
from collections import OrderedDict
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
import numpy as np
from sqlalchemy import (
    ColumnElement,
    Float,
    and_,
    bindparam,
    case,
    column,
    func,
    literal,
    select,
    table,
    text,
)
from sqlalchemy.exc import DBAPIError
from sqlalchemy.types import UserDefinedType

from pilothouse.catalog._stores import EmbeddedStoreSettings
from pilothouse.memory._tables import MemoryRecord

if TYPE_CHECKING:
    from pilothouse.knowledge._index import VectorIndex
    from pilothouse.store import Database

logger = logging.getLogger(__name__)

INDEX_KINDS = ("auto", "pgvector", "embedded", "exact")
"""What ``index=`` of :class:`~pilothouse.memory.ScopedMemory` accepts."""

_PARTITIONS = 4096
"""Embedded partitions kept in memory; the least recently searched go first."""


@dataclass(frozen=True)
class IndexQuery:
    """One scope's search, as SQL conditions and a query vector.

    Attributes:
        partition: the rows of the scope's partition (tenant, scope kind, the
            scope's main key, alive, this embedding model).
        condition: the scope's whole filter (a subset of ``partition``).
        vector: the query, a unit vector.
        k: how many records.
        dimension: the vectors' length.
        key: the partition's identity in the process.
    """

    partition: ColumnElement[bool]
    condition: ColumnElement[bool]
    vector: np.ndarray[Any, Any]
    k: int
    dimension: int
    key: tuple[str, ...] = field(default=())


class MemoryIndex(ABC):
    """Finds the records of one scope nearest to a query vector."""

    kind: str = ""
    reason: str = ""
    """Why this kind was chosen (shown by ``pilothouse memory search``)."""

    @abstractmethod
    async def nearest(self, database: Database, query: IndexQuery) -> list[tuple[int, float]]:
        """Return ``(record id, cosine similarity)`` of the ``k`` nearest, nearest first."""

    async def prune(self, database: Database) -> int:
        """Drop index entries whose records are gone; return how many."""
        del database
        return 0


def _top(ids: list[int], blobs: list[bytes], vector: np.ndarray[Any, Any], k: int) -> Any:
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), -1)
    scores = matrix @ np.asarray(vector, dtype=np.float32)
    order = np.argsort(-scores)[:k]
    return [(ids[i], float(scores[i])) for i in order]


class ExactMemoryIndex(MemoryIndex):
    """No index: the scope's vectors are read and compared in the process."""

    kind = "exact"

    def __init__(self, reason: str = "asked for exact search") -> None:
        self.reason = reason

    async def nearest(self, database: Database, query: IndexQuery) -> list[tuple[int, float]]:
        """See :meth:`MemoryIndex.nearest`."""
        async with database.sessions() as session:
            rows = (
                await session.execute(
                    select(MemoryRecord.id, MemoryRecord.embedding).where(query.condition)
                )
            ).all()
        if not rows:
            return []
        return _top([r.id for r in rows], [r.embedding for r in rows], query.vector, query.k)


@dataclass
class _Partition:
    index: VectorIndex
    stamps: dict[int, datetime] = field(default_factory=lambda: {})


class EmbeddedMemoryIndex(MemoryIndex):
    """The knowledge feature's in-process index, one per memory partition.

    Args:
        reason: why it was chosen.
        settings: the index settings (the embedded store's defaults: exact
            below 20,000 vectors in a partition, HNSW from there on).
    """

    kind = "embedded"

    def __init__(self, reason: str = "", settings: EmbeddedStoreSettings | None = None) -> None:
        self.reason = reason or "the knowledge feature's embedded index"
        self.settings = settings or EmbeddedStoreSettings()
        self._partitions: OrderedDict[tuple[str, ...], _Partition] = OrderedDict()
        self._locks: dict[tuple[str, ...], anyio.Lock] = {}

    def _partition(self, key: tuple[str, ...], dimension: int) -> _Partition:
        from pilothouse.knowledge._index import VectorIndex

        found = self._partitions.get(key)
        if found is None or found.index.dimension != dimension:
            found = _Partition(VectorIndex(dimension, self.settings, None))
            self._partitions[key] = found
        self._partitions.move_to_end(key)
        while len(self._partitions) > _PARTITIONS:
            old, _ = self._partitions.popitem(last=False)
            self._locks.pop(old, None)
        return found

    async def nearest(self, database: Database, query: IndexQuery) -> list[tuple[int, float]]:
        """See :meth:`MemoryIndex.nearest`."""
        lock = self._locks.setdefault(query.key, anyio.Lock())
        async with lock:
            part = self._partition(query.key, query.dimension)
            accepted = case((query.condition, 1), else_=0)
            async with database.sessions() as session:
                rows = (
                    await session.execute(
                        select(
                            MemoryRecord.id, MemoryRecord.updated_at, accepted.label("ok")
                        ).where(query.partition)
                    )
                ).all()
                current = {int(r.id): r.updated_at for r in rows}
                stale = [i for i, stamp in part.stamps.items() if current.get(i) != stamp]
                if stale:
                    part.index.remove(np.asarray(stale, dtype=np.int64))
                    for i in stale:
                        del part.stamps[i]
                missing = [i for i in current if i not in part.stamps]
                for start in range(0, len(missing), 1000):
                    batch = missing[start : start + 1000]
                    loaded = (
                        await session.execute(
                            select(
                                MemoryRecord.id, MemoryRecord.embedding, MemoryRecord.updated_at
                            ).where(query.partition, MemoryRecord.id.in_(batch))
                        )
                    ).all()
                    good = [r for r in loaded if len(r.embedding) == 4 * query.dimension]
                    if good:
                        ids = np.asarray([r.id for r in good], dtype=np.int64)
                        matrix = np.frombuffer(
                            b"".join(r.embedding for r in good), dtype="<f4"
                        ).reshape(len(good), query.dimension)
                        part.index.add(ids, matrix.astype(np.float32))
                        part.stamps.update({int(r.id): r.updated_at for r in good})
            wanted = np.asarray([r.id for r in rows if r.ok], dtype=np.int64)
            if wanted.shape[0] == 0:
                return []
            vector = np.asarray(query.vector, dtype=np.float32)
            # The index now holds exactly the partition's live rows (stale ones
            # removed, missing ones added). When the scope accepts all of them,
            # the index (HNSW when large) searches it whole; otherwise only the
            # accepted ids, compared exactly: never a filter after a top-k cut.
            whole = wanted.shape[0] == len(rows) == len(part.index)
            allowed = None if whole else wanted
            if part.index.uses_hnsw:
                return await anyio.to_thread.run_sync(part.index.search, vector, query.k, allowed)
            return part.index.search(vector, query.k, allowed)


class _Vector(UserDefinedType[Any]):
    """pgvector's ``vector`` type, for a query vector sent as text (``[0.1,...]``)."""

    cache_ok = True

    def get_col_spec(self, **kw: Any) -> str:
        return "vector"


class PgVectorMemoryIndex(MemoryIndex):
    """pgvector in pilothouse's own PostgreSQL database.

    Args:
        m: HNSW links per node.
        ef_construction: HNSW build candidates.
        ef_search: HNSW search candidates, set per query.
    """

    kind = "pgvector"

    def __init__(self, m: int = 16, ef_construction: int = 64, ef_search: int = 100) -> None:
        self.m = m
        self.ef_construction = ef_construction
        self.ef_search = ef_search
        self.reason = "pgvector HNSW in pilothouse's PostgreSQL database"
        self._ready: set[int] = set()

    @staticmethod
    def table_name(dimension: int) -> str:
        """The vector table of one dimension."""
        return f"memory_vector_{int(dimension)}"

    async def ensure(self, database: Database, dimension: int) -> None:
        """Create the extension, the vector table and its HNSW index, once per process.

        Raises:
            DBAPIError: the extension is missing or may not be created.
        """
        if dimension in self._ready:
            return
        name = self.table_name(dimension)
        async with database.engine.begin() as connection:
            await connection.execute(text("CREATE EXTENSION IF NOT EXISTS vector"))
            await connection.execute(
                text(
                    f"CREATE TABLE IF NOT EXISTS {name} (record_id bigint PRIMARY KEY, "
                    "tenant varchar(32) NOT NULL, updated_at timestamptz NOT NULL, "
                    f"embedding vector({int(dimension)}) NOT NULL)"
                )
            )
            await connection.execute(
                text(
                    f"CREATE INDEX IF NOT EXISTS {name}_hnsw ON {name} USING hnsw "
                    f"(embedding vector_cosine_ops) WITH (m = {int(self.m)}, "
                    f"ef_construction = {int(self.ef_construction)})"
                )
            )
        self._ready.add(dimension)

    async def nearest(self, database: Database, query: IndexQuery) -> list[tuple[int, float]]:
        """See :meth:`MemoryIndex.nearest`."""
        await self.ensure(database, query.dimension)
        vectors = table(
            self.table_name(query.dimension),
            column("record_id"),
            column("tenant"),
            column("updated_at"),
            column("embedding"),
        )
        joined = and_(
            vectors.c.record_id == MemoryRecord.id,
            vectors.c.updated_at == MemoryRecord.updated_at,
        )
        async with database.sessions() as session, session.begin():
            await self._sync(session, vectors, query)
            q = bindparam("q", _as_text(query.vector), type_=_Vector())
            distance = vectors.c.embedding.op("<=>", return_type=Float())(q)
            statement = (
                select(MemoryRecord.id, (literal(1.0) - distance).label("similarity"))
                .join(vectors, joined)
                .where(query.condition)
            )
            # SET LOCAL lasts for this transaction; iterative scans keep a
            # filtered HNSW scan going until k rows of the scope are found.
            await session.execute(text(f"SET LOCAL hnsw.ef_search = {int(self.ef_search)}"))
            await session.execute(text("SET LOCAL hnsw.iterative_scan = strict_order"))
            rows = (await session.execute(statement.order_by(distance).limit(query.k))).all()
            if len(rows) < query.k:
                held = await session.scalar(
                    select(func.count())
                    .select_from(MemoryRecord)
                    .join(vectors, joined)
                    .where(query.condition)
                )
                if (held or 0) > len(rows):
                    # The scan stopped early (hnsw.max_scan_tuples): an order
                    # the index cannot serve makes PostgreSQL compare exactly.
                    exact = statement.order_by(distance + literal(0.0)).limit(query.k)
                    rows = (await session.execute(exact)).all()
        return [(int(r.id), float(r.similarity)) for r in rows]

    async def _sync(self, session: Any, vectors: Any, query: IndexQuery) -> None:
        """Copy the partition's new and changed vectors into the vector table."""
        missing = (
            await session.execute(
                select(
                    MemoryRecord.id,
                    MemoryRecord.tenant,
                    MemoryRecord.updated_at,
                    MemoryRecord.embedding,
                )
                .outerjoin(vectors, vectors.c.record_id == MemoryRecord.id)
                .where(
                    query.partition,
                    func.octet_length(MemoryRecord.embedding) == 4 * query.dimension,
                    (vectors.c.record_id.is_(None))
                    | (vectors.c.updated_at != MemoryRecord.updated_at),
                )
            )
        ).all()
        if not missing:
            return
        name = self.table_name(query.dimension)
        await session.execute(
            text(
                f"INSERT INTO {name} (record_id, tenant, updated_at, embedding) "
                "VALUES (:id, :tenant, :stamp, CAST(:vector AS vector)) "
                "ON CONFLICT (record_id) DO UPDATE SET updated_at = excluded.updated_at, "
                "embedding = excluded.embedding, tenant = excluded.tenant"
            ),
            [
                {
                    "id": r.id,
                    "tenant": r.tenant,
                    "stamp": r.updated_at,
                    "vector": _as_text(np.frombuffer(r.embedding, dtype="<f4")),
                }
                for r in missing
            ],
        )

    async def prune(self, database: Database) -> int:
        """Delete vectors whose records were deleted (forgotten, expired, erased)."""
        removed = 0
        async with database.engine.begin() as connection:
            for dimension in sorted(self._ready):
                name = self.table_name(dimension)
                result = await connection.execute(
                    text(
                        f"DELETE FROM {name} v WHERE NOT EXISTS "
                        "(SELECT 1 FROM memory_record r WHERE r.id = v.record_id)"
                    )
                )
                removed += int(result.rowcount)
        return removed


def _as_text(vector: Any) -> str:
    return "[" + ",".join(f"{float(x):.7g}" for x in np.asarray(vector).reshape(-1)) + "]"


async def choose_index(database: Database, wanted: str, dimension: int) -> MemoryIndex:
    """The index scoped memory uses on ``database``, and why.

    Args:
        database: pilothouse's database.
        wanted: ``auto`` (pgvector where PostgreSQL has it, else the embedded
            index, else exact), or one kind.
        dimension: the embedding model's dimension.

    Raises:
        InvalidFieldError: an unknown kind, or ``pgvector`` where it cannot run.
    """
    from pilothouse.errors import InvalidFieldError

    if wanted not in INDEX_KINDS:
        raise InvalidFieldError(
            "memory_index", f"'{wanted}' is not an index kind (use {', '.join(INDEX_KINDS)})"
        )
    if wanted == "exact":
        return ExactMemoryIndex()
    unavailable = ""
    if wanted in ("auto", "pgvector"):
        if database.is_sqlite:
            unavailable = "the database is SQLite"
        else:
            index = PgVectorMemoryIndex()
            try:
                await index.ensure(database, dimension)
            except DBAPIError as exc:
                unavailable = f"pgvector is not available in this PostgreSQL database ({exc.orig})"
            else:
                logger.info("memory search: %s", index.reason)
                return index
        if wanted == "pgvector":
            raise InvalidFieldError("memory_index", f"pgvector cannot be used: {unavailable}")
    if importlib.util.find_spec("usearch") is None:
        reason = f"no vector index available ({unavailable}; usearch is not installed)"
        logger.warning("memory search: %s: exact search in the process", reason)
        return ExactMemoryIndex(reason)
    index = EmbeddedMemoryIndex(
        f"the knowledge feature's embedded index ({unavailable})"
        if unavailable
        else "the knowledge feature's embedded index"
    )
    logger.info("memory search: %s", index.reason)
    return index
