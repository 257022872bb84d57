"""A user's rights over memory: provenance, erasure of what derives from them, versions, export.

Turns run on :class:`~pilothouse.testing.ScriptedModel` (which also answers
the extraction jobs); memory is real (the packaged MiniLM, SQLite and
PostgreSQL).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from sqlalchemy import func, select

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.knowledge import LocalMiniLM
from pilothouse.memory import ScopedMemory
from pilothouse.memory._tables import MemoryRecordVersion
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import Reply, ScriptedModel
from pilothouse.types import MemoryScope

pytestmark = pytest.mark.anyio

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
memory_strategies:
  - code: SCPD
    kind: SCOPED
    window_size: 10
    settings: {user_limit: 5, agent_limit: 3, memory_token_budget: 300}
actions:
  - code: CHAT
    model: GPT
    configuration: DFLT
    memory_strategy: SCPD
    prompt: You are the clinic's assistant.
"""

BLOOD = "The user Zed has blood type AB negative."
AGENT = MemoryScope("agent", agent="CHAT")
ZED = MemoryScope("user", user_id="zed")


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel([])


@pytest.fixture
async def ph(
    database: Database, model: ScriptedModel, minilm: LocalMiniLM
) -> AsyncIterator[Pilothouse]:
    settings = Settings(database_url=database.url, secrets_file=None)
    async with Pilothouse(settings, database=database, model=model) as facade:
        facade._shared._scoped = ScopedMemory(database, minilm)
        await facade.catalog.import_text(CATALOG)
        yield facade


def facts(*items: tuple[str, str]) -> Reply:
    return Reply(
        json.dumps(
            {
                "facts": [
                    {"text": text, "scope": scope, "type": "fact", "importance": 0.9}
                    for text, scope in items
                ]
            }
        )
    )


async def chat(ph: Pilothouse, model: ScriptedModel, user: str, text: str) -> str:
    """One answered turn of ``user``; return its conversation's uuid."""
    model.script.steps.append(Reply("Noted."))
    result = await ph.command.start_and_send(text, action="CHAT", runtime_config={"user_id": user})
    assert result.status.value == "CO", result.error
    return result.conversation_uuid


def prompt_of(model: ScriptedModel, n: int) -> str:
    return json.dumps([str(m) for m in model.requests[n].messages])


async def version_rows(database: Database) -> int:
    async with database.sessions() as session:
        return int(await session.scalar(select(func.count()).select_from(MemoryRecordVersion)) or 0)


async def test_an_agent_memory_from_zeds_conversation_is_erased_with_zed(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    zed_chat = await chat(ph, model, "zed", "For the record: my blood type is AB negative.")
    model.script.steps.append(facts((BLOOD, "agent")))
    [outcome] = await ph.memory.run_jobs()
    assert outcome.status == "done", outcome.error
    [learned] = await ph.memory.list(AGENT)
    assert learned.content == BLOOD
    # Provenance: the conversation and the user it was derived from.
    assert (learned.source_conversation, learned.source_user) == (zed_chat, "zed")
    kept = await ph.memory.add("Appointments need a referral.", AGENT)

    # Agent memory is served to every user of the agent: Bob's turn is told Zed's blood type.
    await chat(ph, model, "bob", "Which blood type does Zed have?")
    assert BLOOD in prompt_of(model, len(model.requests) - 1)

    report = await ph.memory.erase_user("zed", reason="Art. 17", requested_by="dpo@example.com")
    assert report.records >= 2  # the agent learning and Zed's session turn
    assert report.requested_by == "dpo@example.com"
    assert [i.id for i in await ph.memory.list(AGENT)] == [kept.id]
    [event] = await ph.memory.erasures("zed")
    assert event["requested_by"] == "dpo@example.com"

    # No longer served to anyone.
    await chat(ph, model, "bob", "Which blood type does Zed have?")
    assert "AB negative" not in prompt_of(model, len(model.requests) - 1)


async def test_a_record_once_derived_from_a_user_goes_with_them(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    # Zed's conversation teaches the agent a fact; Bob's later one updates it.
    await chat(ph, model, "zed", "Dana manages the night shift.")
    model.script.steps.append(facts(("The night shift manager is Dana.", "agent")))
    await ph.memory.run_jobs()
    await chat(ph, model, "bob", "Eli manages the night shift now.")
    model.script.steps.append(facts(("The night shift manager is Eli now.", "agent")))
    model.script.steps.append(
        Reply(json.dumps({"event": "UPDATE", "id": 0, "text": "The night shift manager is Eli."}))
    )
    [outcome] = await ph.memory.run_jobs()
    assert [e["event"] for e in outcome.events] == ["UPDATE"], outcome
    [record] = await ph.memory.list(AGENT)
    assert record.content == "The night shift manager is Eli." and record.source_user == "bob"
    # Its earlier value came from Zed: erasing Zed removes the record and its history.
    await ph.memory.erase_user("zed")
    assert await ph.memory.list(AGENT) == []


async def test_an_update_keeps_the_old_value_as_a_version_erased_with_the_user(
    ph: Pilothouse, model: ScriptedModel, database: Database
) -> None:
    first = await chat(ph, model, "zed", "My manager is Dana.")
    model.script.steps.append(facts(("The user's manager is Dana.", "user")))
    await ph.memory.run_jobs()
    [dana] = await ph.memory.list(ZED)
    second = await chat(ph, model, "zed", "Actually my manager is Eli now.")
    model.script.steps.append(facts(("The user's manager is Eli.", "user")))
    model.script.steps.append(
        Reply(json.dumps({"event": "UPDATE", "id": 0, "text": "The user's manager is Eli."}))
    )
    [outcome] = await ph.memory.run_jobs()
    assert [e["event"] for e in outcome.events] == ["UPDATE"], outcome

    old, current = await ph.memory.versions(dana.id, ZED)
    assert (old.version, old.content) == (1, "The user's manager is Dana.")
    assert (old.source_conversation, old.replaced_by) == (first, "extraction")
    assert old.valid_to is not None and old.valid_from <= old.valid_to
    assert (current.version, current.content, current.valid_to) == (
        2,
        "The user's manager is Eli.",
        None,
    )
    assert current.valid_from == old.valid_to and current.source_conversation == second
    # Another scope does not reach the history either.
    with pytest.raises(NotFoundError):
        await ph.memory.versions(dana.id, MemoryScope("user", user_id="bob"))

    report = await ph.memory.erase_user("zed")
    assert report.versions == 1
    assert await version_rows(database) == 0
    with pytest.raises(NotFoundError):
        await ph.memory.versions(dana.id, ZED)


async def test_an_edit_keeps_a_version_and_forget_removes_them(
    ph: Pilothouse, database: Database
) -> None:
    item = await ph.memory.add("Zed's manager is Dana.", ZED)
    await ph.memory.edit(item.id, ZED, content="Zed's manager is Eli.")
    await ph.memory.edit(item.id, ZED, importance=0.4)
    history = await ph.memory.versions(item.id, ZED)
    assert [(v.content, v.importance, v.replaced_by) for v in history] == [
        ("Zed's manager is Dana.", 1.0, "edit"),
        ("Zed's manager is Eli.", 1.0, "edit"),
        ("Zed's manager is Eli.", 0.4, None),
    ]
    assert history[1].valid_from == history[0].valid_to
    await ph.memory.forget(item.id, ZED)
    assert await version_rows(database) == 0


async def test_export_returns_everything_stored_about_the_user(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    zed_chat = await chat(ph, model, "zed", "For the record: my blood type is AB negative.")
    model.script.steps.append(facts((BLOOD, "agent"), ("The user's manager is Dana.", "user")))
    await ph.memory.run_jobs()
    [manager] = await ph.memory.list(ZED)
    await ph.memory.edit(manager.id, ZED, content="The user's manager is Eli.")
    await chat(ph, model, "bob", "Hello.")
    await ph.memory.add("Appointments need a referral.", AGENT)

    document = await ph.memory.export_user("zed")
    assert document["user_id"] == "zed" and document["tenant"] == "default"
    [conversation] = document["conversations"]
    assert conversation["uuid"] == zed_chat
    assert any("AB negative" in m["content"] for m in conversation["messages"])
    memories = {m["content"]: m for m in document["memories"]}
    assert BLOOD in memories and "The user's manager is Eli." in memories
    assert memories[BLOOD]["source_user"] == "zed" and memories[BLOOD]["scope"] == "agent"
    assert [v["content"] for v in memories["The user's manager is Eli."]["versions"]] == [
        "The user's manager is Dana.",
        "The user's manager is Eli.",
    ]
    assert "Appointments need a referral." not in memories
    assert not any("bob" in json.dumps(m) for m in document["memories"])
    [job] = document["jobs"]
    assert job["conversation_uuid"] == zed_chat and job["status"] == "done"
    assert "AB negative" in json.dumps(job["messages"])
    assert document["erasures"] == []
    json.dumps(document)  # one JSON document

    # Another tenant's export of the same id finds nothing of this tenant's.
    other = await ph.for_tenant("acme").memory.export_user("zed")
    assert (other["conversations"], other["memories"], other["jobs"]) == ([], [], [])

    await ph.memory.erase_user("zed")
    after = await ph.memory.export_user("zed")
    assert after["memories"] == [] and after["jobs"] == []
    # The messages stay as the audit record, but nothing links them to Zed's id any more.
    assert after["conversations"] == [] and after["sessions"] == []
    assert len(after["erasures"]) == 1


async def test_erasure_refuses_a_blank_requester(ph: Pilothouse) -> None:
    with pytest.raises(InvalidFieldError, match="requested_by"):
        await ph.memory.erase_user("zed", requested_by=" ")
    with pytest.raises(InvalidFieldError, match="user_id"):
        await ph.memory.export_user(" ")


async def test_records_written_before_provenance_upgrade_with_none(
    tmp_path: Path, minilm: LocalMiniLM
) -> None:
    from alembic import command
    from sqlalchemy import text

    from pilothouse.store._engine import _alembic_config

    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'old.db'}")

    def to_0015(connection: object) -> None:
        config = _alembic_config()
        config.attributes["connection"] = connection
        command.upgrade(config, "0015")

    async with database.engine.begin() as connection:
        await connection.run_sync(to_0015)
        await connection.execute(
            text(
                "INSERT INTO memory_record (uuid, tenant, scope, user_id, content, content_hash, "
                "memory_type, importance, metadata, embedding, model, access_count, created_at, "
                "updated_at) VALUES ('00000000-0000-0000-0000-000000000001', 'default', 'user', "
                "'zed', 'Zed likes tea.', 'h', 'fact', 1.0, '{}', x'00', 'm', 0, "
                "'2026-01-01 00:00:00', '2026-01-01 00:00:00')"
            )
        )
    await database.ensure_schema()
    memory = ScopedMemory(database, minilm)
    [old] = await memory.list("default", ZED)
    assert (old.source_conversation, old.source_user) == (None, None)
    edited = await memory.edit("default", ZED, old.id, content="Zed likes green tea.")
    assert edited.content == "Zed likes green tea."
    assert [v.content for v in await memory.versions("default", ZED, old.id)] == [
        "Zed likes tea.",
        "Zed likes green tea.",
    ]
    report = await memory.erase_user("default", "zed", requested_by="test")
    assert (report.records, report.versions) == (1, 1)
    await database.dispose()
