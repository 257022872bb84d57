"""Scoped memory routes under ``/v1/memory``: the memory door, a user's erasure and export.

List, search, add, edit, forget a memory and read its versions; erase or
export everything about a user.

Every call names its scope: ``scope`` (``session``, ``user``, ``agent``,
``organization``) and the keys it needs (``user_id``, ``agent``,
``session_id``), as query parameters on ``GET`` and ``DELETE`` and in the body
otherwise. A record of another scope is a 404, exactly as a missing one; the
key's tenant bounds everything. Erasing or exporting a user, and running the
extraction jobs, need a key with the admin scope; an erasure event names the
key that asked (``api-key:<prefix>``), never the key.
"""

from __future__ import annotations

__all__ = ["router"]

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, ConfigDict, Field

from pilothouse.server._deps import AdminFacade, AdminPrincipal, CheckedJsonRoute, Facade
from pilothouse.server._problems import PROBLEM_RESPONSES
from pilothouse.types import MemoryScope

router = APIRouter(
    prefix="/v1/memory", tags=["memory"], responses=PROBLEM_RESPONSES, route_class=CheckedJsonRoute
)

ScopeName = Literal["session", "user", "agent", "organization"]


class ScopeBody(BaseModel):
    """Whose memory."""

    model_config = ConfigDict(extra="forbid")

    scope: ScopeName
    user_id: str | None = None
    agent: str | None = None
    session_id: str | None = None

    def to_scope(self) -> MemoryScope:
        """The scope, checked (a missing key is a 422 naming it)."""
        return MemoryScope(
            self.scope, user_id=self.user_id, agent=self.agent, session_id=self.session_id
        )


class AddBody(ScopeBody):
    """A memory to add."""

    content: str
    memory_type: str | None = None
    importance: Annotated[float, Field(ge=0.0, le=1.0)] = 1.0
    metadata: dict[str, Any] = Field(default_factory=dict[str, Any])


class EditBody(ScopeBody):
    """What to change of a memory; what is left out stays."""

    content: str | None = None
    memory_type: str | None = None
    importance: Annotated[float, Field(ge=0.0, le=1.0)] | None = None
    metadata: dict[str, Any] | None = None


class SearchScope(ScopeBody):
    """One scope of a search, with its most hits."""

    limit: Annotated[int, Field(ge=0, le=100)] = 5


class SearchBody(BaseModel):
    """A search over one or more scopes."""

    model_config = ConfigDict(extra="forbid")

    query: str
    scopes: Annotated[list[SearchScope], Field(min_length=1, max_length=8)]
    threshold: Annotated[float, Field(ge=-1.0, le=1.0)] = 0.0


class EraseBody(BaseModel):
    """A user to erase."""

    model_config = ConfigDict(extra="forbid")

    user_id: str
    reason: Annotated[str, Field(max_length=512)] = ""


def _scope(
    scope: ScopeName, user_id: str | None, agent: str | None, session_id: str | None
) -> MemoryScope:
    return MemoryScope(scope, user_id=user_id, agent=agent, session_id=session_id)


@router.get("")
async def list_memories(
    ph: Facade,
    scope: ScopeName,
    user_id: str | None = None,
    agent: str | None = None,
    session_id: str | None = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    offset: Annotated[int, Query(ge=0)] = 0,
) -> dict[str, Any]:
    """List a scope's memories, newest first."""
    items = await ph.memory.list(
        _scope(scope, user_id, agent, session_id), limit=limit, offset=offset
    )
    return {"items": [item.as_json() for item in items]}


@router.post("", status_code=201)
async def add_memory(ph: Facade, body: AddBody) -> dict[str, Any]:
    """Add a memory (the same text twice in one scope stays one record)."""
    item = await ph.memory.add(
        body.content,
        body.to_scope(),
        memory_type=body.memory_type,
        importance=body.importance,
        metadata=body.metadata,
    )
    return item.as_json()


@router.post("/search")
async def search_memories(ph: Facade, body: SearchBody) -> dict[str, Any]:
    """Search scopes, each with its own limit; hits ranked together."""
    scopes = {entry.to_scope(): entry.limit for entry in body.scopes}
    hits = await ph.memory.search(body.query, scopes, threshold=body.threshold)
    return {"hits": [hit.as_json() for hit in hits]}


@router.get("/jobs")
async def list_jobs(ph: AdminFacade, status: str | None = None) -> dict[str, Any]:
    """The tenant's extraction jobs (status, attempts, error, outcome)."""
    return {"jobs": await ph.memory.jobs(status)}


@router.post("/jobs/run")
async def run_jobs(
    ph: AdminFacade, limit: Annotated[int, Query(ge=1, le=1000)] = 100
) -> dict[str, Any]:
    """Run pending extraction jobs now (the service's worker also does)."""
    outcomes = await ph.memory.run_jobs(limit)
    return {
        "outcomes": [
            {"job_id": o.job_id, "status": o.status, "events": list(o.events), "error": o.error}
            for o in outcomes
        ]
    }


@router.post("/erase-user")
async def erase_user(ph: AdminFacade, principal: AdminPrincipal, body: EraseBody) -> dict[str, Any]:
    """Erase everything about a user (every scope, derived memories, versions, chat memory).

    Recorded as an audit event naming the key that asked.
    """
    report = await ph.memory.erase_user(
        body.user_id, reason=body.reason, requested_by=f"api-key:{principal.key_prefix}"
    )
    return report.as_json()


@router.get("/users/{user_id}/export")
async def export_user(ph: AdminFacade, user_id: str) -> dict[str, Any]:
    """Everything stored about a user in the key's tenant, as one JSON document.

    Conversations (with messages), memories (with provenance and versions),
    extraction jobs and erasure events.
    """
    return await ph.memory.export_user(user_id)


@router.get("/{memory_id}")
async def get_memory(
    ph: Facade,
    memory_id: str,
    scope: ScopeName,
    user_id: str | None = None,
    agent: str | None = None,
    session_id: str | None = None,
) -> dict[str, Any]:
    """One memory of the scope."""
    item = await ph.memory.get(memory_id, _scope(scope, user_id, agent, session_id))
    return item.as_json()


@router.get("/{memory_id}/versions")
async def memory_versions(
    ph: Facade,
    memory_id: str,
    scope: ScopeName,
    user_id: str | None = None,
    agent: str | None = None,
    session_id: str | None = None,
) -> dict[str, Any]:
    """A memory's history, oldest first; the last version is the current value."""
    versions = await ph.memory.versions(memory_id, _scope(scope, user_id, agent, session_id))
    return {"versions": [version.as_json() for version in versions]}


@router.patch("/{memory_id}")
async def edit_memory(ph: Facade, memory_id: str, body: EditBody) -> dict[str, Any]:
    """Change a memory of the scope."""
    item = await ph.memory.edit(
        memory_id,
        body.to_scope(),
        content=body.content,
        memory_type=body.memory_type,
        importance=body.importance,
        metadata=body.metadata,
    )
    return item.as_json()


@router.delete("/{memory_id}", status_code=204)
async def forget_memory(
    ph: Facade,
    memory_id: str,
    scope: ScopeName,
    user_id: str | None = None,
    agent: str | None = None,
    session_id: str | None = None,
) -> Response:
    """Forget a memory of the scope."""
    await ph.memory.forget(memory_id, _scope(scope, user_id, agent, session_id))
    return Response(status_code=204)
