"""Memory search through a vector index: strict scoping among many others' memories.

Each search is one index query per scope with the scope's whole filter in it.
The bug this guards against is a filter applied after a top-k cut: with many
other users' memories nearer to the query than a user's own, a global top-k
then filtered would return nothing for that user. Every index kind runs on
SQLite and PostgreSQL (this machine's PostgreSQL has no pgvector: the
pgvector kind is in ``tests/real/test_memory_real.py``).
"""

from __future__ import annotations

import logging

import pytest

from pilothouse.catalog._stores import EmbeddedStoreSettings
from pilothouse.errors import InvalidFieldError
from pilothouse.knowledge import LocalMiniLM
from pilothouse.memory import ScopedMemory
from pilothouse.memory._index import EmbeddedMemoryIndex, ExactMemoryIndex, MemoryIndex
from pilothouse.memory._store import cap_long_term
from pilothouse.store import Database
from pilothouse.types import MemoryScope

pytestmark = pytest.mark.anyio

QUERY = "Which medicine is the patient allergic to?"
NEAR = "The patient is allergic to penicillin."
OWN = "Alice once mentioned she reacts badly to aspirin."


def _index(kind: str) -> MemoryIndex:
    if kind == "exact":
        return ExactMemoryIndex()
    if kind == "hnsw":
        # The knowledge index's HNSW graph from the first vector on, so the
        # graph path (whole partitions) is what runs, not the exact matrix.
        return EmbeddedMemoryIndex(settings=EmbeddedStoreSettings(index="hnsw"))
    return EmbeddedMemoryIndex()


INDEXES = ["embedded", "hnsw", "exact"]


@pytest.fixture(params=INDEXES)
def indexed(
    request: pytest.FixtureRequest, database: Database, minilm: LocalMiniLM
) -> ScopedMemory:
    return ScopedMemory(database, minilm, index=_index(str(request.param)))


async def _crowd(memory: ScopedMemory, scopes: list[MemoryScope], tenant: str = "t1") -> None:
    for scope in scopes:
        kind = {"agent": "learning", "organization": "fact"}.get(scope.scope, "fact")
        if scope.scope == "session":
            kind = "turn"
        await memory.add(tenant, scope, NEAR, memory_type=kind)


async def test_a_users_own_memories_are_found_behind_many_nearer_ones_of_others(
    indexed: ScopedMemory,
) -> None:
    others = [MemoryScope("user", user_id=f"user-{n}") for n in range(40)]
    await _crowd(indexed, others)
    # Another tenant's alice, nearer than alice's own record, in the same table.
    await indexed.add("t2", MemoryScope("user", user_id="alice"), NEAR)
    alice = MemoryScope("user", user_id="alice")
    own, _ = await indexed.add("t1", alice, OWN)
    hits = await indexed.search("t1", QUERY, {alice: 3})
    assert [hit.item.id for hit in hits] == [own.id]
    # Each of the others still sees exactly its own record.
    [theirs] = await indexed.search("t1", QUERY, {others[7]: 3})
    assert theirs.item.scope.user_id == "user-7"


@pytest.mark.parametrize(
    ("inside", "crowd"),
    [
        (
            MemoryScope("user", user_id="alice", agent="SALES"),
            [MemoryScope("user", user_id="alice", agent=f"AG{n}") for n in range(20)],
        ),
        (
            MemoryScope("agent", agent="SALES"),
            [MemoryScope("agent", agent=f"AG{n}") for n in range(20)],
        ),
        (
            MemoryScope("session", session_id="s-1", user_id="alice"),
            [MemoryScope("session", session_id=f"s-{n}", user_id="alice") for n in range(2, 22)]
            + [MemoryScope("session", session_id="s-1", user_id="bob")]
            + [MemoryScope("session", session_id="s-1")],
        ),
    ],
    ids=["user-agent", "agent", "session"],
)
async def test_every_boundary_holds_in_the_index_query(
    indexed: ScopedMemory, inside: MemoryScope, crowd: list[MemoryScope]
) -> None:
    await _crowd(indexed, crowd)
    kind = {"agent": "learning", "session": "turn"}.get(inside.scope, "fact")
    own, _ = await indexed.add("t1", inside, OWN, memory_type=kind)
    hits = await indexed.search("t1", QUERY, {inside: 2})
    assert [hit.item.id for hit in hits] == [own.id]


async def test_min_importance_is_in_the_query_not_after_the_cut(indexed: ScopedMemory) -> None:
    alice = MemoryScope("user", user_id="alice")
    for n in range(12):
        await indexed.add("t1", alice, f"{NEAR} (note {n})", importance=0.1)
    important, _ = await indexed.add("t1", alice, OWN, importance=0.9)
    hits = await indexed.search("t1", QUERY, {alice: 3}, min_importance=0.5)
    assert [hit.item.id for hit in hits] == [important.id]


async def test_the_index_follows_edits_forgets_and_expiry(indexed: ScopedMemory) -> None:
    alice = MemoryScope("user", user_id="alice")
    item, _ = await indexed.add("t1", alice, "Alice likes green tea.")
    await indexed.add("t1", alice, "Alice drives a blue car.")
    [first] = await indexed.search("t1", "hot drinks", {alice: 1})
    assert first.item.id == item.id
    await indexed.edit("t1", alice, item.id, content="Alice is allergic to penicillin.")
    [hit] = await indexed.search("t1", QUERY, {alice: 1})
    assert hit.item.id == item.id and hit.item.content.endswith("penicillin.")
    assert await indexed.forget("t1", alice, item.id)
    hits = await indexed.search("t1", QUERY, {alice: 5})
    assert [h.item.content for h in hits] == ["Alice drives a blue car."]


async def test_auto_chooses_the_embedded_index_here_and_says_why(
    database: Database, minilm: LocalMiniLM, caplog: pytest.LogCaptureFixture
) -> None:
    memory = ScopedMemory(database, minilm)
    with caplog.at_level(logging.INFO, logger="pilothouse.memory._index"):
        chosen = await memory.vector_index()
    assert chosen.kind == "embedded"
    expected = "SQLite" if database.is_sqlite else "pgvector is not available"
    assert expected in chosen.reason
    assert any(expected in record.getMessage() for record in caplog.records)


async def test_pgvector_where_it_cannot_run_is_refused_by_name(
    database: Database, minilm: LocalMiniLM
) -> None:
    with pytest.raises(InvalidFieldError, match="memory_index"):
        await ScopedMemory(database, minilm, index="pgvector").vector_index()
    with pytest.raises(InvalidFieldError, match="memory_index"):
        await ScopedMemory(database, minilm, index="faiss").vector_index()


async def test_the_long_term_cap_keeps_session_hits_and_the_best_long_term_ones(
    memory: ScopedMemory,
) -> None:
    session = MemoryScope("session", session_id="s-1", user_id="alice")
    alice = MemoryScope("user", user_id="alice")
    organization = MemoryScope("organization")
    for n in range(4):
        await memory.add("t1", session, f"User: penicillin question {n}", memory_type="turn")
        await memory.add("t1", alice, f"{NEAR} Note {n}.")
        await memory.add("t1", organization, f"Allergy policy {n}: check penicillin.")
    hits = await memory.search(
        "t1", QUERY, {session: 10, alice: 5, organization: 5}, long_term_max=3
    )
    long_term = [h for h in hits if h.item.scope.scope != "session"]
    assert len(long_term) == 3
    assert len([h for h in hits if h.item.scope.scope == "session"]) == 4
    everything = await memory.search("t1", QUERY, {session: 10, alice: 5, organization: 5})
    best = [h.item.id for h in everything if h.item.scope.scope != "session"][:3]
    assert [h.item.id for h in long_term] == best
    assert cap_long_term(everything, 0) == [
        h for h in everything if h.item.scope.scope == "session"
    ]
    with pytest.raises(InvalidFieldError, match="max_results"):
        await memory.search("t1", QUERY, {alice: 5}, long_term_max=-1)
