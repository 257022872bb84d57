"""Scoped long-term memory: add, list, search, edit, forget, erase, export, expire.

:class:`ScopedMemory` is the one place that reads and writes
``memory_record``. Every statement carries the tenant and the scope's keys
(:func:`scope_filter`), so a search, an edit or a delete of one user's,
agent's or session's memory cannot touch another's: the rows are narrowed by
SQL before anything is compared in Python. That is the field's common bug
(mem0's ``delete_all`` once reset the whole collection: mem0ai/mem0#3928), and
the tests try every boundary.

Vectors come from a knowledge :class:`~pilothouse.knowledge.Embedder` (the
packaged all-MiniLM-L6-v2 by default). Search goes through a vector index
(:mod:`pilothouse.memory._index`): pgvector on PostgreSQL where the
extension is available, the knowledge feature's embedded index otherwise,
exact search only when neither can run. Each scope is one index query with
the scope's whole filter in it, never a filter after a top-k cut.
"""

from __future__ import annotations

__all__ = [
    "RankWeights",
    "ScopedMemory",
    "SessionLimits",
    "cap_long_term",
    "content_hash",
    "scope_filter",
    "subject_digest",
]

import hashlib
import math
import re
import uuid as uuid_module
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import numpy as np
from sqlalchemy import ColumnElement, and_, delete, func, or_, select, update

from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.memory._index import IndexQuery, MemoryIndex, choose_index
from pilothouse.memory._tables import MemoryRecord, MemorySession
from pilothouse.memory._types import (
    MEMORY_TYPES,
    ErasureReport,
    EveryTenant,
    MemoryHit,
    MemoryItem,
    MemoryScope,
    MemoryVersion,
)
from pilothouse.memory._versions import drop_versions, history, keep_version
from pilothouse.store._base import utcnow

if TYPE_CHECKING:
    from pilothouse.knowledge import Embedder
    from pilothouse.store import Database

MAX_CONTENT = 8000
"""The most characters one memory holds; a longer text belongs in a knowledge collection."""


@dataclass(frozen=True)
class SessionLimits:
    """Session memory's lifetime and size (the seed's ``short-term`` block).

    Attributes:
        ttl_minutes: how long a session record lives (``ttl-minutes: 60``).
        max_records: the most records one session keeps; the oldest go first
            (``max-memories: 100``).
    """

    ttl_minutes: int = 60
    max_records: int = 100


@dataclass(frozen=True)
class RankWeights:
    """How search results are ranked: ``similarity·s + importance·i + recency·r``.

    Recency is ``0.5 ** (age / half_life)`` of the record's last update, so a
    fact confirmed yesterday outranks an equally similar one from last year.
    """

    similarity: float = 0.7
    importance: float = 0.2
    recency: float = 0.1
    half_life_days: float = 30.0


def content_hash(content: str) -> str:
    """The identity of a memory's text: case, spacing and final punctuation ignored."""
    normal = re.sub(r"\s+", " ", content.strip().lower()).rstrip(".!;")
    return hashlib.sha256(normal.encode()).hexdigest()


def subject_digest(tenant: str, user_id: str) -> str:
    """The erasure log's stand-in for a user id (the id itself is not kept)."""
    return hashlib.sha256(f"{tenant}:{user_id}".encode()).hexdigest()


def scope_filter(tenant: str, scope: MemoryScope, *, reading: bool) -> ColumnElement[bool]:
    """The SQL condition of one scope; every statement on records uses it."""
    parts: list[ColumnElement[bool]] = [
        MemoryRecord.tenant == tenant,
        MemoryRecord.scope == scope.scope,
    ]
    if scope.scope == "session":
        parts.append(MemoryRecord.session_id == scope.session_id)
        # An anonymous session is still bound to no user: a user's session
        # is not readable by a caller who does not name that user.
        parts.append(
            MemoryRecord.user_id.is_(None)
            if scope.user_id is None
            else MemoryRecord.user_id == scope.user_id
        )
        if scope.agent is not None:
            parts.append(MemoryRecord.agent == scope.agent)
    elif scope.scope == "user":
        parts.append(MemoryRecord.user_id == scope.user_id)
        if scope.agent is not None:
            # Reading as an agent sees the user's shared facts and its own;
            # writing or deleting with an agent touches only its own.
            parts.append(
                or_(MemoryRecord.agent == scope.agent, MemoryRecord.agent.is_(None))
                if reading
                else MemoryRecord.agent == scope.agent
            )
    elif scope.scope == "agent":
        parts.append(MemoryRecord.agent == scope.agent)
    return and_(*parts)


def _check_content(content: str) -> str:
    text = content.strip()
    if not text:
        raise InvalidFieldError("content", "is empty: a memory needs text")
    if len(text) > MAX_CONTENT:
        raise InvalidFieldError(
            "content",
            f"has {len(text)} characters, at most {MAX_CONTENT}: put long text in a knowledge "
            "collection",
        )
    return text


def _check_type(scope: MemoryScope, memory_type: str) -> str:
    allowed = MEMORY_TYPES[scope.scope]
    if memory_type not in allowed:
        raise InvalidFieldError(
            "memory_type",
            f"'{memory_type}' is not a {scope.scope} memory type (use {', '.join(allowed)})",
        )
    return memory_type


def _check_importance(importance: float) -> float:
    if not (0.0 <= importance <= 1.0) or math.isnan(importance):
        raise InvalidFieldError("importance", f"must be between 0 and 1, got {importance}")
    return float(importance)


def to_item(row: MemoryRecord) -> MemoryItem:
    """The public view of a stored record."""
    return MemoryItem(
        id=row.uuid,
        scope=MemoryScope(
            row.scope,  # type: ignore[arg-type] - written only from MEMORY_SCOPES
            user_id=row.user_id,
            agent=row.agent,
            session_id=row.session_id,
        ),
        content=row.content,
        memory_type=row.memory_type,
        importance=row.importance,
        metadata=dict(row.meta),
        access_count=row.access_count,
        last_accessed_at=row.last_accessed_at,
        created_at=row.created_at,
        updated_at=row.updated_at,
        expires_at=row.expires_at,
        source_conversation=row.source_conversation,
        source_user=row.source_user,
    )


class ScopedMemory:
    """Memory records of every scope in pilothouse's database.

    Args:
        database: the conversation store's database (migration 0006).
        embedder: makes the vectors; the packaged all-MiniLM-L6-v2 when None
            (loaded on first use).
        session: session memory's TTL and size.
        weights: how search results are ranked.
        index: the vector index: ``auto`` (pgvector where pilothouse's
            PostgreSQL has it, else the knowledge feature's embedded index,
            else exact), ``pgvector``, ``embedded`` or ``exact``; or an index
            already chosen (shared by views with other session limits).
    """

    def __init__(
        self,
        database: Database,
        embedder: Embedder | None = None,
        *,
        session: SessionLimits | None = None,
        weights: RankWeights | None = None,
        index: str | MemoryIndex = "auto",
    ) -> None:
        self.database = database
        self._embedder = embedder
        self.session_limits = session or SessionLimits()
        self.weights = weights or RankWeights()
        self._wanted_index = index if isinstance(index, str) else index.kind
        self._index: MemoryIndex | None = None if isinstance(index, str) else index

    def with_session_limits(self, session: SessionLimits) -> ScopedMemory:
        """The same memory (database, embedder, index) with other session limits."""
        view = ScopedMemory(self.database, self._embedder, session=session, weights=self.weights)
        view._wanted_index = self._wanted_index
        view._index = self._index
        return view

    async def vector_index(self) -> MemoryIndex:
        """The vector index searches use, chosen on first use (see :func:`choose_index`).

        Raises:
            InvalidFieldError: ``pgvector`` asked for where it cannot run, or
                an unknown kind (field ``memory_index``).
        """
        if self._index is None:
            self._index = await choose_index(
                self.database, self._wanted_index, self.embedder.info.dimension
            )
        return self._index

    @property
    def embedder(self) -> Embedder:
        """The embedder, made on first use."""
        if self._embedder is None:
            from pilothouse.knowledge import LocalMiniLM

            self._embedder = LocalMiniLM()
        return self._embedder

    async def embed(self, texts: Sequence[str], purpose: str) -> np.ndarray[Any, Any]:
        embedder = self.embedder
        # A memory is short; a long one is cut for its vector (its text stays whole).
        prepared, _ = embedder.prepare(
            list(texts), "query" if purpose == "query" else "document", truncate=True
        )
        return await embedder.embed_prepared(
            prepared, "query" if purpose == "query" else "document"
        )

    # ---------------------------------------------------------------- writes

    async def add(
        self,
        tenant: str,
        scope: MemoryScope,
        content: str,
        *,
        memory_type: str | None = None,
        importance: float = 1.0,
        metadata: Mapping[str, Any] | None = None,
        now: datetime | None = None,
        source_conversation: str | None = None,
        source_user: str | None = None,
    ) -> tuple[MemoryItem, bool]:
        """Remember ``content`` in ``scope``; the same text twice is one record.

        ``source_conversation`` and ``source_user`` say which conversation
        and user a new record was derived from (erasing that user deletes
        it, whatever its scope); a record already there keeps its own.

        Returns:
            The record, and whether it is new (False: the same text was there
            already; its importance is raised to the larger of the two and it
            counts as updated).

        Raises:
            InvalidFieldError: empty or too long content, a memory type the
                scope does not take, importance outside 0..1.
        """
        text = _check_content(content)
        kind = _check_type(scope, memory_type or MEMORY_TYPES[scope.scope][0])
        weight = _check_importance(importance)
        vector = (await self.embed([text], "document"))[0]
        digest = content_hash(text)
        stamp = now or utcnow()
        expires = (
            stamp + timedelta(minutes=self.session_limits.ttl_minutes)
            if scope.scope == "session"
            else None
        )
        async with self.database.sessions() as session, session.begin():
            found = await session.scalar(
                select(MemoryRecord).where(
                    scope_filter(tenant, scope, reading=False),
                    MemoryRecord.agent.is_(scope.agent)
                    if scope.agent is None
                    else MemoryRecord.agent == scope.agent,
                    MemoryRecord.content_hash == digest,
                )
            )
            if found is not None:
                found.importance = max(found.importance, weight)
                found.updated_at = stamp
                if expires is not None:
                    found.expires_at = expires
                if metadata:
                    found.meta = {**found.meta, **metadata}
                return to_item(found), False
            row = MemoryRecord(
                uuid=str(uuid_module.uuid4()),
                tenant=tenant,
                scope=scope.scope,
                user_id=scope.user_id,
                agent=scope.agent,
                session_id=scope.session_id,
                content=text,
                content_hash=digest,
                memory_type=kind,
                importance=weight,
                meta=dict(metadata or {}),
                embedding=np.asarray(vector, dtype="<f4").tobytes(),
                model=self.embedder.info.name,
                access_count=0,
                created_at=stamp,
                updated_at=stamp,
                expires_at=expires,
                source_conversation=source_conversation,
                source_user=source_user,
            )
            session.add(row)
            await session.flush()
            if scope.scope == "session":
                await self._trim_session(session, tenant, scope)
            return to_item(row), True

    async def _trim_session(self, session: Any, tenant: str, scope: MemoryScope) -> None:
        """Keep a session at ``max_records``: the oldest go first."""
        limit = self.session_limits.max_records
        condition = and_(
            MemoryRecord.tenant == tenant,
            MemoryRecord.scope == "session",
            MemoryRecord.session_id == scope.session_id,
        )
        count = await session.scalar(select(func.count()).where(condition))
        if count is None or count <= limit:
            return
        oldest = (
            select(MemoryRecord.id)
            .where(condition)
            .order_by(MemoryRecord.created_at, MemoryRecord.id)
            .limit(count - limit)
        )
        ids = list((await session.scalars(oldest)).all())
        await drop_versions(session, MemoryRecord.id.in_(ids))
        await session.execute(delete(MemoryRecord).where(MemoryRecord.id.in_(ids)))

    async def edit(
        self,
        tenant: str,
        scope: MemoryScope,
        memory_id: str,
        *,
        content: str | None = None,
        memory_type: str | None = None,
        importance: float | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> MemoryItem:
        """Change a record of ``scope``; its vector follows a new text.

        The value it held is kept as a version (:meth:`versions`). A new text
        is the caller's, not derived from a conversation: the record's
        provenance is cleared (its versions keep theirs).

        Raises:
            NotFoundError: no such record in this scope (another scope's record
                is not found either).
            InvalidFieldError: bad content, type or importance.
        """
        text = _check_content(content) if content is not None else None
        kind = _check_type(scope, memory_type) if memory_type is not None else None
        weight = _check_importance(importance) if importance is not None else None
        vector = (await self.embed([text], "document"))[0] if text is not None else None
        async with self.database.sessions() as session, session.begin():
            row = await session.scalar(
                select(MemoryRecord).where(
                    scope_filter(tenant, scope, reading=False), MemoryRecord.uuid == memory_id
                )
            )
            if row is None:
                raise NotFoundError(f"memory '{memory_id}' not found in this {scope.scope} scope")
            stamp = utcnow()
            if (
                (text is not None and text != row.content)
                or (kind is not None and kind != row.memory_type)
                or (weight is not None and weight != row.importance)
                or (metadata is not None and dict(metadata) != row.meta)
            ):
                await keep_version(session, row, "edit", stamp)
            if text is not None and vector is not None and text != row.content:
                row.source_conversation = None
                row.source_user = None
            if text is not None and vector is not None:
                row.content = text
                row.content_hash = content_hash(text)
                row.embedding = np.asarray(vector, dtype="<f4").tobytes()
                row.model = self.embedder.info.name
            if kind is not None:
                row.memory_type = kind
            if weight is not None:
                row.importance = weight
            if metadata is not None:
                row.meta = dict(metadata)
            row.updated_at = stamp
            return to_item(row)

    async def forget(self, tenant: str, scope: MemoryScope, memory_id: str) -> bool:
        """Delete one record of ``scope`` and its versions; False when the scope holds none."""
        target = and_(scope_filter(tenant, scope, reading=False), MemoryRecord.uuid == memory_id)
        async with self.database.sessions() as session, session.begin():
            await drop_versions(session, target)
            result = await session.execute(delete(MemoryRecord).where(target))
            return bool(result.rowcount)  # type: ignore[attr-defined]

    async def expire(self, *, tenant: str | EveryTenant, now: datetime | None = None) -> int:
        """Delete every session record of ``tenant`` past its ``expires_at``.

        The index's copies of deleted records go too (searches never return
        them anyway: every index query joins the live records).

        Args:
            tenant: whose records; :data:`~pilothouse.memory.EVERY_TENANT` for
                the service's worker.
            now: the time compared with ``expires_at`` (tests move it).
        """
        conditions = [
            MemoryRecord.expires_at.is_not(None),
            MemoryRecord.expires_at <= (now or utcnow()),
        ]
        if isinstance(tenant, str):
            conditions.append(MemoryRecord.tenant == tenant)
        expired = and_(*conditions)
        async with self.database.sessions() as session, session.begin():
            await drop_versions(session, expired)
            result = await session.execute(delete(MemoryRecord).where(expired))
            count = int(result.rowcount)  # type: ignore[attr-defined]
        if self._index is not None:
            await self._index.prune(self.database)
        return count

    async def session_user(self, tenant: str, session_id: str) -> tuple[bool, str | None]:
        """Whether a session is linked to a user, and which (None: anonymous).

        A turn resumed after a human answer or a tool result has no runtime
        config of its own: its user is the one its session was linked to.
        """
        async with self.database.sessions() as session:
            row = (
                await session.execute(
                    select(MemorySession.user_id).where(
                        MemorySession.tenant == tenant, MemorySession.session_id == session_id
                    )
                )
            ).first()
        return (False, None) if row is None else (True, row.user_id)

    async def link_session(
        self, tenant: str, session_id: str, user_id: str | None, agent: str | None
    ) -> None:
        """Note which user a session served (once), for erasure."""
        async with self.database.sessions() as session, session.begin():
            found = await session.scalar(
                select(MemorySession.id).where(
                    MemorySession.tenant == tenant, MemorySession.session_id == session_id
                )
            )
            if found is None:
                session.add(
                    MemorySession(
                        tenant=tenant, session_id=session_id, user_id=user_id, agent=agent
                    )
                )

    async def erase_user(
        self, tenant: str, user_id: str, *, requested_by: str, reason: str = ""
    ) -> ErasureReport:
        """Erase everything memory keeps about one user, in one transaction, and log it.

        Deletes the user's records in every scope (their sessions too), every
        record of any scope derived from their conversations (its current
        value or one of its versions names them, or one of their sessions,
        as its source), the versions of all of these, their extraction jobs
        (which hold turn text), and cuts their conversations' chat memory
        loose (a fresh ``memory_id``: no later conversation replays them).
        The conversations' messages stay: they are the audit record
        (``docs/memory.md`` says why and for how long). The audit event
        keeps a digest of the user id, never the id, and ``requested_by``.

        Raises:
            InvalidFieldError: a blank or over-long user id.
        """
        from pilothouse.memory._rights import erase_user

        report = await erase_user(
            self.database, tenant, user_id, requested_by=requested_by, reason=reason
        )
        # The index's copies of the erased vectors go at once, not at the next
        # expiry. On PostgreSQL they may live in a pgvector table this process
        # has not opened yet (a CLI erasure beside a running service): open it.
        index = self._index
        if index is None and not self.database.is_sqlite:
            index = await self.vector_index()
        if index is not None:
            await index.prune(self.database)
        return report

    async def erasures(self, tenant: str, user_id: str | None = None) -> list[dict[str, Any]]:
        """The tenant's erasure events (of one user, by digest, when given)."""
        from pilothouse.memory._rights import erasures

        return await erasures(self.database, tenant, user_id)

    async def export_user(self, tenant: str, user_id: str) -> dict[str, Any]:
        """What memory keeps about one user: records (with versions), jobs, sessions.

        See :func:`pilothouse.memory._rights.export_user`; the facade adds
        the conversations' transcripts.

        Raises:
            InvalidFieldError: a blank or over-long user id.
        """
        from pilothouse.memory._rights import export_user

        return await export_user(self.database, tenant, user_id)

    async def versions(
        self, tenant: str, scope: MemoryScope, memory_id: str
    ) -> list[MemoryVersion]:
        """Every value a record of ``scope`` held, oldest first; the last is current.

        Raises:
            NotFoundError: the scope holds no such record.
        """
        async with self.database.sessions() as session:
            row = await session.scalar(
                select(MemoryRecord).where(
                    scope_filter(tenant, scope, reading=True), MemoryRecord.uuid == memory_id
                )
            )
            if row is None:
                raise NotFoundError(f"memory '{memory_id}' not found in this {scope.scope} scope")
            return await history(session, row)

    # ----------------------------------------------------------------- reads

    async def list(
        self, tenant: str, scope: MemoryScope, *, limit: int = 100, offset: int = 0
    ) -> list[MemoryItem]:
        """The scope's live records, newest first."""
        if limit < 1 or limit > 1000:
            raise InvalidFieldError("limit", f"must be 1 to 1000, got {limit}")
        if offset < 0:
            raise InvalidFieldError("offset", f"must be 0 or more, got {offset}")
        async with self.database.sessions() as session:
            rows = (
                await session.scalars(
                    select(MemoryRecord)
                    .where(scope_filter(tenant, scope, reading=True), _alive(utcnow()))
                    .order_by(MemoryRecord.updated_at.desc(), MemoryRecord.id.desc())
                    .limit(limit)
                    .offset(offset)
                )
            ).all()
        return [to_item(row) for row in rows]

    async def get(self, tenant: str, scope: MemoryScope, memory_id: str) -> MemoryItem:
        """One record of ``scope``; NotFoundError when the scope holds no such record."""
        async with self.database.sessions() as session:
            row = await session.scalar(
                select(MemoryRecord).where(
                    scope_filter(tenant, scope, reading=True),
                    MemoryRecord.uuid == memory_id,
                    _alive(utcnow()),
                )
            )
        if row is None:
            raise NotFoundError(f"memory '{memory_id}' not found in this {scope.scope} scope")
        return to_item(row)

    async def search(
        self,
        tenant: str,
        query: str,
        scopes: Mapping[MemoryScope, int],
        *,
        threshold: float = 0.0,
        min_importance: float = 0.0,
        now: datetime | None = None,
        touch: bool = True,
        long_term_max: int | None = None,
    ) -> list[MemoryHit]:
        """Search several scopes at once, ``limit`` hits from each, ranked together.

        Each scope is one query of the vector index with the scope's whole
        filter (tenant, keys, expiry, embedding model, ``min_importance``) in
        it: its ``limit`` nearest records, then all hits are ranked together
        by similarity, importance and recency.

        Args:
            tenant: the tenant.
            query: the text to match.
            scopes: each scope with its most hits (the advisor's 10 / 5 / 3 / 5).
            threshold: the least cosine similarity a hit needs.
            min_importance: the least importance of a long-term (user, agent,
                organization) hit; session memory is not filtered by it.
            now: the time recency and expiry are measured at.
            touch: count the hits as accessed (``access_count``, ``last_accessed_at``).
            long_term_max: the most user, agent and organization hits kept
                after ranking (seed 002's ``long-term: max-results``); session
                hits are not counted. None keeps every scope's limit.

        Returns:
            The hits of every scope, best score first.
        """
        if not query.strip():
            raise InvalidFieldError("query", "is empty")
        for scope, limit in scopes.items():
            if limit < 0 or limit > 100:
                raise InvalidFieldError(f"{scope.scope}_limit", f"must be 0 to 100, got {limit}")
        wanted = {scope: limit for scope, limit in scopes.items() if limit > 0}
        if not wanted:
            return []
        if long_term_max is not None and long_term_max < 0:
            raise InvalidFieldError("max_results", f"must be 0 or more, got {long_term_max}")
        stamp = now or utcnow()
        model = self.embedder.info.name
        vector = np.asarray((await self.embed([query], "query"))[0], dtype=np.float32)
        index = await self.vector_index()
        found_by_scope: list[tuple[ColumnElement[bool], dict[int, float]]] = []
        for scope, limit in wanted.items():
            condition = and_(
                scope_filter(tenant, scope, reading=True),
                _alive(stamp),
                MemoryRecord.model == model,
            )
            if scope.scope != "session" and min_importance > 0:
                # In the index query, not after it: a filter after the top-k
                # cut would let unimportant records crowd out important ones.
                condition = and_(condition, MemoryRecord.importance >= min_importance)
            found = await index.nearest(
                self.database,
                IndexQuery(
                    partition=_partition(tenant, scope, stamp, model),
                    condition=condition,
                    vector=vector,
                    k=limit,
                    dimension=int(vector.shape[0]),
                    key=_partition_key(tenant, scope, model),
                ),
            )
            similarity = {i: s for i, s in found if s >= threshold}
            if similarity:
                found_by_scope.append((condition, similarity))
        if not found_by_scope:
            return []
        # One read for every scope's hits, each still under its scope's filter.
        async with self.database.sessions() as session:
            rows = {
                row.id: row
                for row in (
                    await session.scalars(
                        select(MemoryRecord).where(
                            or_(
                                *(
                                    and_(condition, MemoryRecord.id.in_(list(similarity)))
                                    for condition, similarity in found_by_scope
                                )
                            )
                        )
                    )
                ).all()
            }
        hits = [
            MemoryHit(to_item(rows[i]), s, self._score(s, rows[i], stamp))
            for _, similarity in found_by_scope
            for i, s in similarity.items()
            if i in rows
        ]
        hits.sort(key=lambda hit: hit.score, reverse=True)
        if long_term_max is not None:
            hits = cap_long_term(hits, long_term_max)
        if touch and hits:
            await self._touch([hit.item.id for hit in hits], stamp)
        return hits

    def _score(self, similarity: float, row: MemoryRecord, now: datetime) -> float:
        weights = self.weights
        age_days = max((now - row.updated_at).total_seconds(), 0.0) / 86400.0
        recency = 0.5 ** (age_days / weights.half_life_days)
        return (
            weights.similarity * similarity
            + weights.importance * row.importance
            + weights.recency * recency
        )

    async def _touch(self, ids: Sequence[str], now: datetime) -> None:
        async with self.database.sessions() as session, session.begin():
            await session.execute(
                update(MemoryRecord)
                .where(MemoryRecord.uuid.in_(list(ids)))
                .values(access_count=MemoryRecord.access_count + 1, last_accessed_at=now)
            )

    async def similar(
        self, tenant: str, scope: MemoryScope, text: str, *, limit: int = 5
    ) -> list[MemoryHit]:
        """The records of ``scope`` most like ``text`` (extraction compares with them)."""
        return await self.search(tenant, text, {scope: limit}, touch=False)


def _alive(now: datetime) -> ColumnElement[bool]:
    return or_(MemoryRecord.expires_at.is_(None), MemoryRecord.expires_at > now)


def _partition(tenant: str, scope: MemoryScope, now: datetime, model: str) -> ColumnElement[bool]:
    """The live rows of the scope's partition: its kind and main key, in one tenant."""
    parts: list[ColumnElement[bool]] = [
        MemoryRecord.tenant == tenant,
        MemoryRecord.scope == scope.scope,
        MemoryRecord.model == model,
        _alive(now),
    ]
    if scope.scope == "session":
        parts.append(MemoryRecord.session_id == scope.session_id)
    elif scope.scope == "user":
        parts.append(MemoryRecord.user_id == scope.user_id)
    elif scope.scope == "agent":
        parts.append(MemoryRecord.agent == scope.agent)
    return and_(*parts)


def _partition_key(tenant: str, scope: MemoryScope, model: str) -> tuple[str, ...]:
    main = {
        "session": scope.session_id,
        "user": scope.user_id,
        "agent": scope.agent,
    }.get(scope.scope)
    return (tenant, scope.scope, main or "", model)


def cap_long_term(hits: list[MemoryHit], most: int) -> list[MemoryHit]:
    """Keep every session hit and the ``most`` best long-term ones, in rank order.

    Seed 002's ``long-term: max-results: 10`` caps the long-term memories
    (user, agent, organization) a turn gets, whatever each scope's limit
    (5 + 3 + 5 = 13 by default); session memory has its own limit.
    """
    kept: list[MemoryHit] = []
    long_term = 0
    for hit in hits:
        if hit.item.scope.scope != "session":
            if long_term >= most:
                continue
            long_term += 1
        kept.append(hit)
    return kept
