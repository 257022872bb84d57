"""``ph.memory``: scoped long-term memory of the facade's tenant.

List, search, add, edit and forget memory records of a session, a user, an
agent or the organization, and read a record's versions; erase everything
about a user, or export it; run the pending extraction jobs and the TTL
expiry (the service does both on its own).
Every call names its scope (:class:`~pilothouse.types.MemoryScope`); a record
of another scope is not found, whatever its id.
"""

from __future__ import annotations

__all__ = ["MemoryApi"]

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pilothouse._facade.facet import Facet
from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.memory._types import (
    ErasureReport,
    ExtractionOutcome,
    MemoryHit,
    MemoryItem,
    MemoryScope,
    MemoryVersion,
)
from pilothouse.store._base import utcnow

if TYPE_CHECKING:
    from pilothouse.memory import MemoryExtractor, ScopedMemory
    from pilothouse.store import Database


class MemoryApi(Facet):
    """Scoped long-term memory of one tenant (``ph.memory``).

    Args:
        database: returns the database, opened on first use.
        tenant: the tenant every call acts for.
        memory: the process's scoped memory, made on first use.
        extractor: the process's extraction job runner, made on first use.
        user: who the calls are recorded as (erasure events) when a call names
            no requester.
    """

    def __init__(
        self,
        database: Callable[[], Database],
        tenant: str,
        memory: Callable[[], ScopedMemory],
        extractor: Callable[[], MemoryExtractor],
        user: str,
    ) -> None:
        super().__init__(database, tenant)
        self._memory = memory
        self._extractor = extractor
        self._user = user

    async def _store(self) -> ScopedMemory:
        await self._ready()
        return self._memory()

    async def list(
        self, scope: MemoryScope, *, limit: int = 100, offset: int = 0
    ) -> list[MemoryItem]:
        """The scope's live records, newest first.

        Raises:
            InvalidFieldError: ``limit`` outside 1..1000 or a negative ``offset``.
        """
        return await (await self._store()).list(self.tenant, scope, limit=limit, offset=offset)

    async def get(self, memory_id: str, scope: MemoryScope) -> MemoryItem:
        """One record of ``scope``.

        Raises:
            NotFoundError: the scope holds no such record.
        """
        return await (await self._store()).get(self.tenant, scope, memory_id)

    async def search(
        self,
        query: str,
        scopes: MemoryScope | Mapping[MemoryScope, int],
        *,
        limit: int = 5,
        threshold: float = 0.0,
    ) -> list[MemoryHit]:
        """Search one scope (``limit`` hits) or several (each with its own limit).

        Hits are ranked by similarity, importance and recency together; a
        search counts as an access of each hit (``access_count``).

        Raises:
            InvalidFieldError: an empty query, or a limit outside 0..100.
        """
        wanted = {scopes: limit} if isinstance(scopes, MemoryScope) else dict(scopes)
        if not -1.0 <= threshold <= 1.0:
            raise InvalidFieldError("threshold", f"must be between -1 and 1, got {threshold}")
        return await (await self._store()).search(self.tenant, query, wanted, threshold=threshold)

    async def index(self) -> dict[str, str]:
        """The vector index memory search uses here, and why.

        Returns:
            ``{"kind": "pgvector" | "embedded" | "exact", "reason": ...}``:
            pgvector where pilothouse's PostgreSQL has the extension, the
            knowledge feature's embedded index otherwise, exact search only
            when neither can run.
        """
        chosen = await (await self._store()).vector_index()
        return {"kind": chosen.kind, "reason": chosen.reason}

    async def add(
        self,
        content: str,
        scope: MemoryScope,
        *,
        memory_type: str | None = None,
        importance: float = 1.0,
        metadata: Mapping[str, Any] | None = None,
    ) -> MemoryItem:
        """Remember ``content`` in ``scope`` (the same text twice stays one record).

        Args:
            content: what to remember (1 to 8,000 characters).
            scope: whose memory.
            memory_type: one of the scope's types (``MEMORY_TYPES``); its first
                by default (``fact`` for users, ``learning`` for agents).
            importance: 0 to 1.
            metadata: free JSON kept with it.

        Raises:
            InvalidFieldError: empty or long content, a type the scope does not
                take, importance outside 0..1.
        """
        item, _ = await (await self._store()).add(
            self.tenant,
            scope,
            content,
            memory_type=memory_type,
            importance=importance,
            metadata=metadata,
        )
        return item

    async def edit(
        self,
        memory_id: str,
        scope: MemoryScope,
        *,
        content: str | None = None,
        memory_type: str | None = None,
        importance: float | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> MemoryItem:
        """Change a record of ``scope``; what is not given stays.

        Raises:
            NotFoundError: the scope holds no such record.
            InvalidFieldError: nothing to change, or a bad value.
        """
        if content is None and memory_type is None and importance is None and metadata is None:
            raise InvalidFieldError(
                "content", "nothing to change: give content, memory_type, importance or metadata"
            )
        return await (await self._store()).edit(
            self.tenant,
            scope,
            memory_id,
            content=content,
            memory_type=memory_type,
            importance=importance,
            metadata=metadata,
        )

    async def forget(self, memory_id: str, scope: MemoryScope) -> None:
        """Delete one record of ``scope``.

        Raises:
            NotFoundError: the scope holds no such record.
        """
        if not await (await self._store()).forget(self.tenant, scope, memory_id):
            raise NotFoundError(f"memory '{memory_id}' not found in this {scope.scope} scope")

    async def versions(self, memory_id: str, scope: MemoryScope) -> list[MemoryVersion]:
        """A record's history: every value it held, oldest first; the last is current.

        Each version says when the record held it (``valid_from``,
        ``valid_to``), what replaced it (an ``edit`` or an ``extraction``
        UPDATE) and where it came from (``source_conversation``,
        ``source_user``).

        Raises:
            NotFoundError: the scope holds no such record.
        """
        return await (await self._store()).versions(self.tenant, scope, memory_id)

    async def erase_user(
        self, user_id: str, *, reason: str = "", requested_by: str | None = None
    ) -> ErasureReport:
        """Erase everything about ``user_id``, and record that it was done.

        Deletes the user's memory in every scope (their sessions' too), every
        memory of any scope derived from their conversations (an agent's
        learning extracted from their chat, say), the versions of all of
        these, and their extraction jobs, and cuts their conversations' chat
        memory loose so nothing replays it. The conversations' messages stay
        as the audit record; the erasure event keeps a digest of the user id,
        never the id (``docs/memory.md``, "Erasure and the audit trail").

        Args:
            user_id: the user to erase.
            reason: why (kept in the erasure event, at most 512 characters).
            requested_by: who asked, as the event records it (at most 128
                characters); the facade's ``settings.user`` when None.

        Raises:
            InvalidFieldError: a blank or over-long user id or requester.
        """
        requester = self._user if requested_by is None else requested_by.strip()
        if not requester or len(requester) > 128:
            raise InvalidFieldError("requested_by", "must be 1 to 128 characters, not blank")
        if len(reason) > 512:
            raise InvalidFieldError("reason", f"has {len(reason)} characters, at most 512")
        return await (await self._store()).erase_user(
            self.tenant, user_id, requested_by=requester, reason=reason
        )

    async def export_user(self, user_id: str) -> dict[str, Any]:
        """Everything pilothouse keeps about ``user_id`` in this tenant, as one document.

        The user's right of access: the conversations linked to them (each
        with its messages, tool calls and timeline, as
        ``GET /v1/conversations/{uuid}`` shows it), every memory stored about
        them or derived from their conversations, in any scope (each with
        its provenance and versions), their extraction jobs (with the turn
        text they hold) and the erasure events of their id. Exactly what
        :meth:`erase_user` would delete, plus what it keeps.

        Raises:
            InvalidFieldError: a blank or over-long user id.
        """
        from pilothouse.store import ConversationQueries

        database = await self._ready()
        stored = await self._memory().export_user(self.tenant, user_id)
        queries = ConversationQueries(database, self.tenant)
        conversations = [
            (await queries.transcript(uuid)).model_dump(mode="json")
            for uuid in stored.pop("conversation_uuids")
        ]
        return {
            "format": "pilothouse.user-export/1",
            "tenant": self.tenant,
            "user_id": user_id,
            "exported_at": utcnow().isoformat(),
            "conversations": conversations,
            **stored,
            "erasures": await self._memory().erasures(self.tenant, user_id),
        }

    async def erasures(self, user_id: str | None = None) -> list[dict[str, Any]]:
        """The tenant's erasure events (one user's, found by digest, when given)."""
        return await (await self._store()).erasures(self.tenant, user_id)

    async def run_jobs(self, limit: int = 100) -> list[ExtractionOutcome]:
        """Run up to ``limit`` of this tenant's pending extraction jobs now.

        Another tenant's jobs are never run here (they read its turns and
        spend its model budget); the service's worker runs every tenant's
        (:meth:`Pilothouse.run_memory_jobs`).
        """
        await self._ready()
        return await self._extractor().run_pending(limit, tenant=self.tenant)

    async def jobs(self, status: str | None = None) -> list[dict[str, Any]]:
        """The tenant's extraction jobs (status, attempts, error, outcome)."""
        await self._ready()
        return await self._extractor().jobs(self.tenant, status=status)

    async def expire(self) -> int:
        """Delete this tenant's session memory past its TTL; return how many records."""
        return await (await self._store()).expire(tenant=self.tenant)
