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
        records: memory records deleted (every scope).
        jobs: extraction jobs deleted (with the turn text they held).
        conversations: conversations whose chat memory was cut loose (their
            messages stay as the audit record; see ``docs/memory.md``).
    """

    erasure_id: int
    records: int
    jobs: int
    conversations: int

    def as_json(self) -> dict[str, Any]:
        """The report as JSON-ready data."""
        return {
            "erasure_id": self.erasure_id,
            "records": self.records,
            "jobs": self.jobs,
            "conversations": self.conversations,
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
