"""The public shapes of scoped long-term memory (re-exported by ``pilothouse.types``).

A :class:`MemoryScope` names whose memory a call reads or writes; every
operation of :class:`~pilothouse.memory.ScopedMemory` takes one, and its keys
go into the SQL of that operation, so nothing outside the scope is read,
changed or deleted.
"""

from __future__ import annotations

__all__ = [
    "EVERY_TENANT",
    "MEMORY_SCOPES",
    "MEMORY_TYPES",
    "ErasureReport",
    "EveryTenant",
    "ExtractionOutcome",
    "MemoryHit",
    "MemoryItem",
    "MemoryScope",
    "MemoryScopeName",
    "MemoryVersion",
]

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Final, Literal

from pilothouse.errors import InvalidFieldError


class EveryTenant(Enum):
    """The operator's maintenance scope: every tenant's rows at once.

    A call that works across tenants (the service's memory worker) must say
    so with :data:`EVERY_TENANT` where a tenant would go; no default, no
    ``None``, stands for it, so a request path that forgot its tenant fails
    to type-check rather than reaching every tenant.
    """

    EVERY_TENANT = "every tenant"


EVERY_TENANT: Final = EveryTenant.EVERY_TENANT
"""Where a tenant would go: every tenant (the operator's maintenance only)."""

MemoryScopeName = Literal["session", "user", "agent", "organization"]
MEMORY_SCOPES: tuple[MemoryScopeName, ...] = ("session", "user", "agent", "organization")

MEMORY_TYPES: Mapping[MemoryScopeName, tuple[str, ...]] = {
    # The seed's memory_type values per table; session memory has none there,
    # so its records are the turns it keeps ("turn") and what a caller notes.
    "session": ("turn", "fact", "state", "note"),
    "user": ("fact", "preference", "summary"),
    "agent": ("learning", "state", "persona", "scratchpad"),
    "organization": ("document_chunk", "fact", "policy", "faq"),
}
"""The memory types each scope accepts; anything else is refused by name."""

_KEY_LIMITS = {"user_id": 128, "agent": 64, "session_id": 64}


@dataclass(frozen=True)
class MemoryScope:
    """Whose memory: one scope and the keys that pin it down.

    Attributes:
        scope: ``session`` (one conversation's short-term memory; needs
            ``session_id``), ``user`` (a user's facts and preferences; needs
            ``user_id``), ``agent`` (an agent's learnings and state; needs
            ``agent``, never a user) or ``organization`` (the tenant's shared
            knowledge; no keys).
        user_id: the end user, as the calling application names them.
        agent: the agent's (or, without agent, the action's) code. On a
            ``user`` scope it narrows to what that user told that agent;
            without it a user's memory is shared by every agent.
        session_id: the session (by default the conversation's uuid).
    """

    scope: MemoryScopeName
    user_id: str | None = None
    agent: str | None = None
    session_id: str | None = None

    def __post_init__(self) -> None:
        if self.scope not in MEMORY_SCOPES:
            raise InvalidFieldError(
                "scope", f"'{self.scope}' is not a memory scope (use {', '.join(MEMORY_SCOPES)})"
            )
        for name, limit in _KEY_LIMITS.items():
            value = getattr(self, name)
            if value is not None and (not value.strip() or len(value) > limit):
                raise InvalidFieldError(name, f"must be 1 to {limit} characters, not blank")
        required = {"session": "session_id", "user": "user_id", "agent": "agent"}.get(self.scope)
        if required is not None and getattr(self, required) is None:
            raise InvalidFieldError(required, f"a {self.scope} memory needs {required}")
        if self.scope == "agent" and (self.user_id is not None or self.session_id is not None):
            raise InvalidFieldError(
                "user_id", "agent memory belongs to no user or session: leave them out"
            )
        if self.scope == "organization" and (
            self.user_id is not None or self.agent is not None or self.session_id is not None
        ):
            raise InvalidFieldError(
                "user_id", "organization memory is the tenant's: give no user, agent or session"
            )
        if self.scope == "user" and self.session_id is not None:
            raise InvalidFieldError(
                "session_id", "user memory outlives sessions: use scope 'session' for one session"
            )


@dataclass(frozen=True)
class MemoryItem:
    """One stored memory record.

    Attributes:
        id: its uuid.
        scope: its scope and keys.
        content: what is remembered.
        memory_type: ``fact``, ``preference``, ``summary``, ``learning``,
            ``state``, ``document_chunk``, ... (see ``MEMORY_TYPES``).
        importance: 0 to 1 (the seed's ``importance_score``, default 1.0).
        metadata: free JSON (source conversation, confidence, document, ...).
        access_count: how often retrieval returned it.
        last_accessed_at: when retrieval last returned it.
        created_at: when it was written.
        updated_at: when it last changed.
        expires_at: when session memory ends (None: never).
        source_conversation: the conversation its current value was derived
            from (None: added by a caller, or written before provenance was
            kept).
        source_user: the user of that conversation (None: anonymous, added
            by a caller, or written before provenance was kept).
    """

    id: str
    scope: MemoryScope
    content: str
    memory_type: str
    importance: float
    metadata: Mapping[str, Any]
    access_count: int
    last_accessed_at: datetime | None
    created_at: datetime
    updated_at: datetime
    expires_at: datetime | None
    source_conversation: str | None = None
    source_user: str | None = None

    def as_json(self) -> dict[str, Any]:
        """The item as JSON-ready data (REST and CLI)."""
        return {
            "id": self.id,
            "scope": self.scope.scope,
            "user_id": self.scope.user_id,
            "agent": self.scope.agent,
            "session_id": self.scope.session_id,
            "content": self.content,
            "memory_type": self.memory_type,
            "importance": self.importance,
            "metadata": dict(self.metadata),
            "access_count": self.access_count,
            "last_accessed_at": _iso(self.last_accessed_at),
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.updated_at),
            "expires_at": _iso(self.expires_at),
            "source_conversation": self.source_conversation,
            "source_user": self.source_user,
        }


@dataclass(frozen=True)
class MemoryVersion:
    """One value a memory record held, and when (its history, oldest first).

    Attributes:
        memory_id: the record's uuid.
        version: 1 for the first value, counting up; the highest is current.
        content: the text it held.
        memory_type: its type then.
        importance: its importance then.
        metadata: its metadata then.
        source_conversation: the conversation this value was derived from.
        source_user: the user of that conversation.
        valid_from: when the record began to hold it.
        valid_to: when a change replaced it (None: the current value).
        replaced_by: what replaced it: ``edit`` or ``extraction`` (None: current).
    """

    memory_id: str
    version: int
    content: str
    memory_type: str
    importance: float
    metadata: Mapping[str, Any]
    source_conversation: str | None
    source_user: str | None
    valid_from: datetime
    valid_to: datetime | None
    replaced_by: str | None

    def as_json(self) -> dict[str, Any]:
        """The version as JSON-ready data (REST and CLI)."""
        return {
            "memory_id": self.memory_id,
            "version": self.version,
            "content": self.content,
            "memory_type": self.memory_type,
            "importance": self.importance,
            "metadata": dict(self.metadata),
            "source_conversation": self.source_conversation,
            "source_user": self.source_user,
            "valid_from": _iso(self.valid_from),
            "valid_to": _iso(self.valid_to),
            "replaced_by": self.replaced_by,
        }


@dataclass(frozen=True)
class MemoryHit:
    """A memory found by a search, with why it ranks where it does.

    Attributes:
        item: the record.
        similarity: cosine similarity of its content to the query.
        score: the rank score: similarity, importance and recency combined.
    """

    item: MemoryItem
    similarity: float
    score: float

    def as_json(self) -> dict[str, Any]:
        """The hit as JSON-ready data."""
        return {**self.item.as_json(), "similarity": self.similarity, "score": self.score}


@dataclass(frozen=True)
class ErasureReport:
    """What erasing a user removed, and the audit event that says so.

    Attributes:
        erasure_id: the audit event's id.
        records: memory records deleted: the user's own in every scope, and
            every record of any scope derived from their conversations.
        jobs: extraction jobs deleted (with the turn text they held).
        conversations: conversations whose chat memory was cut loose (their
            messages stay as the audit record; see ``docs/memory.md``).
        versions: earlier values of the deleted records deleted with them.
        requested_by: who asked, as the erasure event records it.
    """

    erasure_id: int
    records: int
    jobs: int
    conversations: int
    versions: int = 0
    requested_by: str = ""

    def as_json(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "erasure_id": self.erasure_id,
            "records": self.records,
            "versions": self.versions,
            "jobs": self.jobs,
            "conversations": self.conversations,
            "requested_by": self.requested_by,
        }


@dataclass(frozen=True)
class ExtractionOutcome:
    """What one extraction job did.

    Attributes:
        job_id: the job.
        status: ``done``, ``pending`` (to be retried) or ``failed``.
        events: per candidate fact, ``ADD``, ``UPDATE``, ``DELETE`` or ``NOOP``
            with the memory it touched.
        error: why the attempt failed, when it did.
    """

    job_id: int
    status: str
    events: tuple[Mapping[str, Any], ...] = field(default_factory=tuple[Mapping[str, Any], ...])
    error: str | None = None


def _iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None
