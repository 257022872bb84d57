"""Scoped memory records: every boundary (tenant, user, agent, session) holds.

Each test writes into two sides of one boundary and then tries to read,
search, edit and delete across it; the common bug of the field is a search or
delete that drops one of the filters (mem0ai/mem0#3928: ``delete_all`` of one
user reset every user's memories).
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.memory import EVERY_TENANT, ScopedMemory, SessionLimits
from pilothouse.memory._store import subject_digest
from pilothouse.store._base import utcnow
from pilothouse.types import MemoryScope

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("user", user_id="alice")
BOB = MemoryScope("user", user_id="bob")

# Every pair is one boundary: what is written on the left must stay invisible
# from the right, in the same tenant unless the pair says otherwise.
BOUNDARIES = {
    "user": (MemoryScope("user", user_id="alice"), MemoryScope("user", user_id="bob")),
    "user-agent": (
        MemoryScope("user", user_id="alice", agent="SALES"),
        MemoryScope("user", user_id="alice", agent="SUPPORT"),
    ),
    "agent": (MemoryScope("agent", agent="SALES"), MemoryScope("agent", agent="SUPPORT")),
    "session": (
        MemoryScope("session", session_id="s-1", user_id="alice"),
        MemoryScope("session", session_id="s-2", user_id="alice"),
    ),
    "session-user": (
        MemoryScope("session", session_id="s-1", user_id="alice"),
        MemoryScope("session", session_id="s-1", user_id="bob"),
    ),
    "session-anonymous": (
        MemoryScope("session", session_id="s-1", user_id="alice"),
        MemoryScope("session", session_id="s-1"),
    ),
    "scope-kind": (MemoryScope("user", user_id="alice"), MemoryScope("organization")),
}


@pytest.mark.parametrize("boundary", sorted(BOUNDARIES))
async def test_no_read_search_edit_or_delete_crosses_a_scope_boundary(
    memory: ScopedMemory, boundary: str
) -> None:
    inside, outside = BOUNDARIES[boundary]
    item, created = await memory.add(
        "t1", inside, "Prefers invoices by email.", memory_type=_type_of(inside)
    )
    assert created

    assert [i.id for i in await memory.list("t1", inside)] == [item.id]
    assert await memory.list("t1", outside) == []
    assert await memory.search("t1", "How does the customer want invoices?", {outside: 10}) == []
    with pytest.raises(NotFoundError):
        await memory.get("t1", outside, item.id)
    with pytest.raises(NotFoundError):
        await memory.edit("t1", outside, item.id, content="Prefers paper invoices.")
    assert await memory.forget("t1", outside, item.id) is False

    # Still there, unchanged, for its own scope.
    kept = await memory.get("t1", inside, item.id)
    assert kept.content == "Prefers invoices by email."


@pytest.mark.parametrize("boundary", sorted(BOUNDARIES))
async def test_no_tenant_sees_another_tenants_memory(memory: ScopedMemory, boundary: str) -> None:
    scope = BOUNDARIES[boundary][0]
    item, _ = await memory.add(
        "t1", scope, "The office is in Hamburg.", memory_type=_type_of(scope)
    )
    assert await memory.list("t2", scope) == []
    assert await memory.search("t2", "Where is the office?", {scope: 10}) == []
    with pytest.raises(NotFoundError):
        await memory.edit("t2", scope, item.id, importance=0.1)
    assert await memory.forget("t2", scope, item.id) is False
    assert (await memory.get("t1", scope, item.id)).importance == 1.0


async def test_an_agent_reads_the_users_shared_facts_and_its_own_not_another_agents(
    memory: ScopedMemory,
) -> None:
    shared, _ = await memory.add("t1", ALICE, "Alice lives in Lisbon.")
    sales, _ = await memory.add(
        "t1", MemoryScope("user", user_id="alice", agent="SALES"), "Alice buys in bulk."
    )
    await memory.add(
        "t1", MemoryScope("user", user_id="alice", agent="SUPPORT"), "Alice had a broken router."
    )
    seen = await memory.list("t1", MemoryScope("user", user_id="alice", agent="SALES"))
    assert {i.id for i in seen} == {shared.id, sales.id}
    # Deleting as SALES touches only SALES's own record, never the shared one.
    assert not await memory.forget(
        "t1", MemoryScope("user", user_id="alice", agent="SALES"), shared.id
    )


async def test_search_ranks_the_relevant_memory_first_and_counts_the_access(
    memory: ScopedMemory,
) -> None:
    await memory.add("t1", ALICE, "Alice's favourite colour is green.", memory_type="preference")
    wanted, _ = await memory.add("t1", ALICE, "Alice is allergic to peanuts.")
    await memory.add("t1", BOB, "Bob is allergic to peanuts.")
    hits = await memory.search("t1", "Does she have a food allergy?", {ALICE: 5})
    assert [h.item.id for h in hits][0] == wanted.id
    assert all(h.item.scope.user_id == "alice" for h in hits)
    again = await memory.get("t1", ALICE, wanted.id)
    assert again.access_count == 1 and again.last_accessed_at is not None


async def test_each_scope_gives_at_most_its_limit(memory: ScopedMemory) -> None:
    session = MemoryScope("session", session_id="s-9", user_id="alice")
    for n in range(4):
        await memory.add("t1", session, f"Turn {n}: we talked about shipping to Porto.")
        await memory.add("t1", ALICE, f"Fact {n}: Alice ships to Porto warehouse {n}.")
    hits = await memory.search("t1", "shipping to Porto", {session: 3, ALICE: 1})
    assert sum(h.item.scope.scope == "session" for h in hits) == 3
    assert sum(h.item.scope.scope == "user" for h in hits) == 1


async def test_the_same_fact_twice_is_one_record(memory: ScopedMemory) -> None:
    first, created = await memory.add("t1", ALICE, "Alice prefers tea.", importance=0.4)
    again, created_again = await memory.add("t1", ALICE, "  alice prefers TEA  ", importance=0.9)
    assert created and not created_again
    assert again.id == first.id and again.importance == 0.9
    assert len(await memory.list("t1", ALICE)) == 1


@pytest.mark.parametrize(
    ("content", "field"),
    [("", "content"), ("   ", "content"), ("x" * 8001, "content")],
)
async def test_empty_or_oversized_content_creates_nothing(
    memory: ScopedMemory, content: str, field: str
) -> None:
    with pytest.raises(InvalidFieldError) as raised:
        await memory.add("t1", ALICE, content)
    assert raised.value.field == field
    assert await memory.list("t1", ALICE) == []


async def test_bad_type_and_importance_are_refused_by_name(memory: ScopedMemory) -> None:
    with pytest.raises(InvalidFieldError, match="memory_type.*learning"):
        await memory.add("t1", ALICE, "x", memory_type="learning")
    with pytest.raises(InvalidFieldError, match="importance"):
        await memory.add("t1", ALICE, "x", importance=1.5)
    with pytest.raises(InvalidFieldError, match="user_id"):
        MemoryScope("user")
    with pytest.raises(InvalidFieldError, match="user_id"):
        MemoryScope("agent", agent="A", user_id="alice")


async def test_edit_changes_text_and_vector(memory: ScopedMemory) -> None:
    item, _ = await memory.add("t1", ALICE, "Alice drives a red car.")
    edited = await memory.edit(
        "t1",
        ALICE,
        item.id,
        content="Alice rides a bicycle.",
        importance=0.5,
        metadata={"source": "support"},
    )
    assert edited.content == "Alice rides a bicycle." and edited.importance == 0.5
    hits = await memory.search("t1", "bicycle", {ALICE: 1})
    assert hits[0].item.id == item.id and hits[0].similarity > 0.4


async def test_session_memory_expires_after_its_ttl(memory: ScopedMemory) -> None:
    session = MemoryScope("session", session_id="s-1", user_id="alice")
    old = utcnow() - timedelta(minutes=61)
    await memory.add("t1", session, "We discussed the Q3 budget.", now=old)
    fresh, _ = await memory.add("t1", session, "We discussed the Q4 plan.")
    assert fresh.expires_at is not None
    assert abs((fresh.expires_at - fresh.created_at) - timedelta(minutes=60)) < timedelta(seconds=1)
    # Expired records are invisible at once, and deleted by expire().
    assert [i.id for i in await memory.list("t1", session)] == [fresh.id]
    assert await memory.expire(tenant="t1") == 1
    assert await memory.expire(tenant="t1") == 0


async def test_a_tenants_expiry_deletes_its_own_records_only(memory: ScopedMemory) -> None:
    session = MemoryScope("session", session_id="s-1", user_id="alice")
    old = utcnow() - timedelta(minutes=61)
    await memory.add("t1", session, "We discussed the Q3 budget.", now=old)
    await memory.add("t2", session, "We discussed the Q2 budget.", now=old)
    assert await memory.expire(tenant="t1") == 1
    # The other tenant's expired record waits for its own expiry, or the operator's.
    assert await memory.expire(tenant="t1") == 0
    assert await memory.expire(tenant=EVERY_TENANT) == 1


async def test_a_session_keeps_at_most_max_records(memory: ScopedMemory) -> None:
    small = ScopedMemory(memory.database, memory.embedder, session=SessionLimits(max_records=3))
    session = MemoryScope("session", session_id="s-1")
    for n in range(5):
        await small.add("t1", session, f"Turn number {n} about the order.")
    kept = await small.list("t1", session)
    assert sorted(i.content for i in kept) == [
        f"Turn number {n} about the order." for n in (2, 3, 4)
    ]


async def test_erasing_a_user_spans_every_scope_and_spares_others(memory: ScopedMemory) -> None:
    alice_session = MemoryScope("session", session_id="s-a", user_id="alice")
    await memory.add("t1", ALICE, "Alice is vegetarian.")
    await memory.add("t1", MemoryScope("user", user_id="alice", agent="SALES"), "Alice buys wine.")
    await memory.add("t1", alice_session, "Alice asked about delivery.")
    await memory.link_session("t1", "s-a", "alice", "SALES")
    bob, _ = await memory.add("t1", BOB, "Bob is vegetarian.")
    other_tenant, _ = await memory.add("t2", ALICE, "Another tenant's Alice.")
    agent, _ = await memory.add(
        "t1",
        MemoryScope("agent", agent="SALES"),
        "Discounts need approval.",
        memory_type="learning",
    )

    report = await memory.erase_user(
        "t1", "alice", requested_by="dpo@example.com", reason="Art. 17"
    )
    assert (report.records, report.jobs) == (3, 0)
    assert await memory.list("t1", ALICE) == []
    assert await memory.list("t1", alice_session) == []
    assert [i.id for i in await memory.list("t1", BOB)] == [bob.id]
    assert [i.id for i in await memory.list("t2", ALICE)] == [other_tenant.id]
    assert [i.id for i in await memory.list("t1", MemoryScope("agent", agent="SALES"))] == [
        agent.id
    ]

    log = await memory.erasures("t1", "alice")
    assert len(log) == 1
    assert log[0]["subject_digest"] == subject_digest("t1", "alice")
    assert log[0]["counts"] == {
        "records": 3,
        "versions": 0,
        "jobs": 0,
        "conversations": 0,
        "dataset_cases": 0,
    }
    assert "alice" not in repr(log)


def _type_of(scope: MemoryScope) -> str:
    return {"session": "turn", "user": "fact", "agent": "learning", "organization": "fact"}[
        scope.scope
    ]


async def test_min_importance_filters_long_term_memory_not_the_session(
    memory: ScopedMemory,
) -> None:
    session = MemoryScope("session", session_id="s-1", user_id="alice")
    await memory.add("t1", ALICE, "Alice mentioned the weather once.", importance=0.3)
    kept, _ = await memory.add("t1", ALICE, "Alice mentioned her weather app.", importance=0.8)
    turn, _ = await memory.add("t1", session, "We talked about the weather.", importance=0.1)
    hits = await memory.search("t1", "weather", {ALICE: 5, session: 5}, min_importance=0.5)
    assert {h.item.id for h in hits} == {kept.id, turn.id}
