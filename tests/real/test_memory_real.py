"""Scoped memory against real components: the packaged MiniLM, PostgreSQL, a killed worker, Qwen.

- retrieval with the packaged all-MiniLM-L6-v2 (int8 ONNX) on PostgreSQL at
  127.0.0.1:5432: planted facts found among distractors, never across users;
- a worker process killed (SIGKILL) in the middle of an extraction job: the
  job is taken again after its lease and completes exactly once; a worker
  holding a process lease, as a service's does, leaves its job to be taken
  again as soon as a service starts, not after the lease;
- extraction on the packaged local model (Qwen2.5-Coder-0.5B on llama.cpp):
  its answer becomes memories, or the job says why not; never silence; a
  changed value leaves no stale memory beside the new one;
- the same on PostgreSQL: whatever the model extracted, in any scope, is in
  the user's export with its source conversation, and erasing the user
  leaves nothing derived from them.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest

from pilothouse.api import Pilothouse
from pilothouse.knowledge import LocalMiniLM
from pilothouse.memory import MemoryExtractor, ScopedMemory
from pilothouse.memory._tables import MemoryJob
from pilothouse.providers import LocalModelServers
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.store._base import utcnow
from pilothouse.types import MemoryScope

pytestmark = pytest.mark.anyio

HERE = Path(__file__).parent
ALICE = MemoryScope("user", user_id="alice")
BOB = MemoryScope("user", user_id="bob")

DISTRACTORS = [
    "The user asked about the weather in Berlin.",
    "The user prefers dark mode in the app.",
    "The user's favourite football club is Benfica.",
    "The user works as a nurse on night shifts.",
    "The user is learning to play the cello.",
    "The user has two cats named Miso and Tofu.",
    "The user plans a trip to Japan in April.",
    "The user drinks oat milk in coffee.",
]


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLM:
    return LocalMiniLM()


@pytest.fixture
async def pg(postgres_database_url: str) -> AsyncIterator[Database]:
    database = Database(postgres_database_url)
    await database.ensure_schema()
    yield database
    await database.dispose()


async def test_packaged_minilm_on_postgresql_finds_planted_facts_within_the_user(
    pg: Database, minilm: LocalMiniLM
) -> None:
    memory = ScopedMemory(pg, minilm)
    for text in DISTRACTORS:
        await memory.add("default", ALICE, text)
    planted, _ = await memory.add("default", ALICE, "The user is allergic to penicillin.")
    await memory.add("default", BOB, "The user is allergic to penicillin and to latex.")
    hits = await memory.search(
        "default", "Which antibiotics must I avoid prescribing?", {ALICE: 3}, threshold=0.1
    )
    assert hits[0].item.id == planted.id
    assert all(hit.item.scope.user_id == "alice" for hit in hits)
    report = await memory.erase_user("default", "alice", requested_by="test")
    assert report.records == len(DISTRACTORS) + 1
    assert [i.content for i in await memory.list("default", BOB)] == [
        "The user is allergic to penicillin and to latex."
    ]


async def test_a_worker_killed_mid_job_leaves_it_to_complete_exactly_once(
    pg: Database, minilm: LocalMiniLM
) -> None:
    memory = ScopedMemory(pg, minilm)

    async def answer(job: MemoryJob, system: str, user: str, schema: object) -> str:
        return json.dumps({"facts": [{"text": "The user is vegetarian.", "scope": "user"}]})

    extractor = MemoryExtractor(memory, answer, lease_seconds=600)
    job_id = await extractor.enqueue(
        "default",
        [{"role": "user", "content": "I am vegetarian."}, {"role": "assistant", "content": "OK."}],
        user_id="alice",
        agent="CHAT",
        session_id="s-1",
    )
    worker = subprocess.Popen(
        [sys.executable, str(HERE / "memory_worker_process.py"), pg.url],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == f"claimed {job_id}"
        worker.kill()  # SIGKILL: no cleanup, the job stays "running" under its lease
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)
        if worker.stdout is not None:
            worker.stdout.close()
    [row] = await extractor.jobs("default")
    assert row["status"] == "running" and row["attempts"] == 1
    # While the dead worker's lease lasts nobody takes the job; after it, one does.
    assert await extractor.claim(tenant="default") is None
    claimed = await extractor.claim(tenant="default", now=utcnow() + timedelta(seconds=601))
    assert claimed is not None and claimed[0].id == job_id
    outcome = await extractor.run(*claimed)
    assert outcome.status == "done"
    assert await extractor.run_pending(tenant="default") == []
    [row] = await extractor.jobs("default")
    assert row["status"] == "done" and row["attempts"] == 2
    assert row["outcome"] == {"ADD": 1, "UPDATE": 0, "DELETE": 0, "NOOP": 0}
    assert [i.content for i in await memory.list("default", ALICE)] == ["The user is vegetarian."]


def _kill_after_claim(url: str, job_id: int, *flags: str) -> None:
    worker = subprocess.Popen(
        [sys.executable, str(HERE / "memory_worker_process.py"), url, *flags],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == f"claimed {job_id}"
        worker.kill()  # SIGKILL: no cleanup, the job stays "running" under its lease
        worker.wait(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait(timeout=30)
        if worker.stdout is not None:
            worker.stdout.close()


async def test_a_service_starting_takes_back_the_job_of_a_killed_worker_at_once(
    pg: Database, minilm: LocalMiniLM
) -> None:
    memory = ScopedMemory(pg, minilm)

    async def answer(job: MemoryJob, system: str, user: str, schema: object) -> str:
        return json.dumps({"facts": [{"text": "The user is vegan.", "scope": "user"}]})

    extractor = MemoryExtractor(memory, answer, lease_seconds=600)
    job_id = await extractor.enqueue(
        "default",
        [{"role": "user", "content": "I am vegan."}, {"role": "assistant", "content": "OK."}],
        user_id="alice",
        agent="CHAT",
        session_id="s-2",
    )
    _kill_after_claim(pg.url, job_id, "--leased")
    [row] = await extractor.jobs("default")
    assert row["status"] == "running" and row["outcome"]["owner"]
    # A service starting (its lease) finds the job's process gone: pending at
    # once, though its 600 s lease has hardly begun.
    async with Pilothouse(Settings(database_url=pg.url, secrets_file=None)) as ph:
        async with ph.lease():
            pass
    [row] = await extractor.jobs("default")
    assert row["status"] == "pending", row
    assert "lost mid-run" in row["error"]
    [outcome] = await extractor.run_pending(tenant="default")
    assert outcome.status == "done"
    [row] = await extractor.jobs("default")
    assert row["status"] == "done" and row["attempts"] == 2
    assert [i.content for i in await memory.list("default", ALICE)] == ["The user is vegan."]


CATALOG = """
providers:
  - code: LOCL
    kind: local
models:
  - code: QWEN05
    provider: LOCL
    model_name: Qwen2.5-Coder-0.5B-Instruct
    capabilities: [FC, SR]
configurations:
  - code: DFLT
    max_tokens: 256
    temperature: 0
memory_strategies:
  - code: SCPD
    kind: SCOPED
actions:
  - code: CHAT
    model: QWEN05
    configuration: DFLT
    memory_strategy: SCPD
    prompt: You are a helpful assistant. Answer in one sentence.
"""
# Zed's statement is one to remember, not a question to ask back: without
# the ask-user tool the small model's turn ends with an answer.
CATALOG_NO_ASK = CATALOG.replace(
    "    memory_strategy: SCPD\n", "    memory_strategy: SCPD\n    ask_user: false\n"
)


async def test_extraction_on_the_packaged_qwen_model(
    tmp_path: Path, local_model_servers: LocalModelServers, minilm: LocalMiniLM
) -> None:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'm.db'}", secrets_file=None)
    async with Pilothouse(settings, local_servers=local_model_servers) as ph:
        ph._shared._scoped = ScopedMemory(ph._shared.database, minilm)  # one MiniLM per module
        await ph.catalog.import_text(CATALOG)
        turn = await ph.command.start_and_send(
            "My name is Dana, I live in Lisbon and I am allergic to penicillin.",
            action="CHAT",
            runtime_config={"user_id": "dana"},
        )
        assert turn.status.value == "CO", turn.error
        [outcome] = await ph.memory.run_jobs()
        [job] = await ph.memory.jobs()
        print("qwen extraction:", outcome.status, outcome.events, outcome.error)
        if outcome.status == "done":
            facts = await ph.memory.list(MemoryScope("user", user_id="dana"))
            added = [e for e in outcome.events if e["event"] == "ADD" and e["scope"] == "user"]
            assert {f.id for f in facts} == {e["memory_id"] for e in added}
            assert job["outcome"]["ADD"] >= len(added) >= 1
            assert any(
                "penicillin" in f.content.lower() or "lisbon" in f.content.lower() for f in facts
            )
        else:
            # A small model may not produce the JSON: the job says so and stays to retry.
            assert outcome.status == "pending" and job["error"] and job["attempts"] == 1
        # Whatever the model did, nothing reached another user.
        assert await ph.memory.list(MemoryScope("user", user_id="someone-else")) == []


async def test_qwen_extraction_of_a_changed_value_leaves_no_stale_memory(
    tmp_path: Path, local_model_servers: LocalModelServers, minilm: LocalMiniLM
) -> None:
    """A changed value reaches the store as an update, whatever event Qwen answers."""
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'u.db'}", secrets_file=None)
    erin = MemoryScope("user", user_id="erin")
    async with Pilothouse(settings, local_servers=local_model_servers) as ph:
        ph._shared._scoped = ScopedMemory(ph._shared.database, minilm)  # one MiniLM per module
        await ph.catalog.import_text(CATALOG_NO_ASK)
        old = await ph.memory.add("The user has two children.", erin)
        turn = await ph.command.start_and_send(
            "Please remember: I have three children now, not two.",
            action="CHAT",
            runtime_config={"user_id": "erin"},
        )
        assert turn.status.value == "CO", turn.error
        [outcome] = await ph.memory.run_jobs()
        print("qwen update:", outcome.status, outcome.events, outcome.error)
        facts = [f.content.lower() for f in await ph.memory.list(erin)]
        print("facts:", facts)
        if outcome.status != "done":
            assert outcome.status == "pending" and outcome.error
            return
        events = [e["event"] for e in outcome.events]
        if any("three" in fact for fact in facts):
            # The new count is stored: the old one is not kept beside it.
            assert not any("two children" in fact for fact in facts), (events, facts)
        else:
            # Qwen extracted no new count: the old record is still there, unchanged.
            kept = await ph.memory.get(old.id, erin)
            assert kept.content == "The user has two children.", (events, facts)


async def test_qwen_extraction_on_postgresql_is_exported_then_erased_whole(
    pg: Database, local_model_servers: LocalModelServers, minilm: LocalMiniLM
) -> None:
    from sqlalchemy import func, or_, select

    from pilothouse.memory._tables import MemoryRecord, MemoryRecordVersion

    settings = Settings(database_url=pg.url, secrets_file=None)
    async with Pilothouse(settings, database=pg, local_servers=local_model_servers) as ph:
        ph._shared._scoped = ScopedMemory(pg, minilm)
        await ph.catalog.import_text(CATALOG_NO_ASK)
        turn = await ph.command.start_and_send(
            "My name is Zed, I live in Lisbon and my blood type is AB negative.",
            action="CHAT",
            runtime_config={"user_id": "zed"},
        )
        assert turn.status.value == "CO", turn.error
        # An empty answer queues no extraction (nothing was said to remember from).
        assert turn.text.strip(), "the local model answered nothing"
        [outcome] = await ph.memory.run_jobs()
        print("qwen extraction:", outcome.status, outcome.events, outcome.error)
        stored = [e["memory_id"] for e in outcome.events if e["event"] in ("ADD", "UPDATE")]

        document = await ph.memory.export_user("zed")
        [conversation] = document["conversations"]
        assert conversation["uuid"] == turn.conversation_uuid
        assert any("AB negative" in m["content"] for m in conversation["messages"])
        [job] = document["jobs"]
        assert job["conversation_uuid"] == turn.conversation_uuid
        exported = {m["id"]: m for m in document["memories"]}
        # Every memory the real model's answer produced, whatever its scope, is
        # in the export with the conversation it came from.
        assert set(stored) <= set(exported)
        for memory_id in stored:
            assert exported[memory_id]["source_conversation"] == turn.conversation_uuid
            assert exported[memory_id]["source_user"] == "zed"

        report = await ph.memory.erase_user("zed", requested_by="dpo@example.com")
        assert report.requested_by == "dpo@example.com"
        assert report.records == len(exported) and report.jobs == 1
        async with pg.sessions() as session:
            left = await session.scalar(
                select(func.count())
                .select_from(MemoryRecord)
                .where(
                    or_(
                        MemoryRecord.user_id == "zed",
                        MemoryRecord.source_user == "zed",
                        MemoryRecord.source_conversation == turn.conversation_uuid,
                    )
                )
            )
            versions = await session.scalar(select(func.count()).select_from(MemoryRecordVersion))
        assert (left, versions) == (0, 0)
        [event] = await ph.memory.erasures("zed")
        assert event["requested_by"] == "dpo@example.com"


async def test_erasure_from_another_process_removes_the_pgvector_copies(
    pgvector_dsn: str, minilm: LocalMiniLM
) -> None:
    import uuid

    import asyncpg
    from sqlalchemy import text

    from pilothouse.memory._index import PgVectorMemoryIndex

    name = f"mr_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pgvector_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    database = Database(pgvector_dsn.rsplit("/", 1)[0] + f"/{name}")
    await database.ensure_schema()
    try:
        # The service: Zed's conversation taught the agent a fact; a search
        # copied its vector into the pgvector table.
        service = ScopedMemory(database, minilm, index="pgvector")
        agent = MemoryScope("agent", agent="CHAT")
        learned, _ = await service.add(
            "default",
            agent,
            "The user Zed has blood type AB negative.",
            source_conversation="c-zed",
            source_user="zed",
        )
        kept, _ = await service.add("default", agent, "Appointments need a referral.")
        assert len(await service.search("default", "blood type", {agent: 5})) == 2
        vectors = PgVectorMemoryIndex.table_name(minilm.info.dimension)

        async def indexed() -> set[int]:
            async with database.engine.connect() as connection:
                rows = await connection.execute(text(f"SELECT record_id FROM {vectors}"))
                return {int(row[0]) for row in rows}

        assert len(await indexed()) == 2
        # The command line: a fresh process that never searched erases Zed.
        cli = ScopedMemory(database, minilm, index="pgvector")
        report = await cli.erase_user("default", "zed", requested_by="cli:ops")
        assert report.records == 1
        assert len(await indexed()) == 1
        [hit] = await service.search("default", "blood type", {agent: 5})
        assert hit.item.id == kept.id and hit.item.id != learned.id
    finally:
        await database.dispose()
