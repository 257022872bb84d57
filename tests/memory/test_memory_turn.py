"""Scoped memory through the door: ``ph.memory`` and a SCOPED action's turns.

Turns run on :class:`~pilothouse.testing.ScriptedModel`; memory is real (the
packaged MiniLM, SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator

import pytest

from pilothouse.api import Pilothouse
from pilothouse.errors import CatalogValidationError, InvalidFieldError, NotFoundError
from pilothouse.knowledge import LocalMiniLM
from pilothouse.memory import ScopedMemory
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import Reply, ScriptedModel
from pilothouse.types import MemoryScope, ProcessStatus, TimelineKind

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
    settings: {user_limit: 5, agent_limit: 3, memory_token_budget: 200}
  - code: PLN
    kind: WINDOW
actions:
  - code: CHAT
    model: GPT
    configuration: DFLT
    memory_strategy: SCPD
    prompt: You are a helpful shop assistant.
  - code: PLAINCHAT
    model: GPT
    configuration: DFLT
    memory_strategy: PLN
    prompt: You are a helpful shop assistant.
"""

ALICE = MemoryScope("user", user_id="alice")


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel([])


@pytest.fixture
async def ph(
    database: Database, model: ScriptedModel, minilm: LocalMiniLM
) -> AsyncIterator[Pilothouse]:
    settings = Settings(database_url=database.url, secrets_file=None)
    async with Pilothouse(settings, database=database, model=model) as facade:
        # One MiniLM for the test session rather than one per facade.
        facade._shared._scoped = ScopedMemory(database, minilm)
        await facade.catalog.import_text(CATALOG)
        yield facade


def system_text(model: ScriptedModel, n: int) -> str:
    request = model.requests[n]
    return json.dumps([str(m) for m in request.messages])


async def test_the_door_adds_lists_searches_edits_and_forgets(ph: Pilothouse) -> None:
    item = await ph.memory.add("Alice is allergic to peanuts.", ALICE, importance=0.9)
    assert [i.id for i in await ph.memory.list(ALICE)] == [item.id]
    [hit] = await ph.memory.search("food allergy", ALICE)
    assert hit.item.id == item.id and hit.similarity > 0.3
    edited = await ph.memory.edit(item.id, ALICE, content="Alice is allergic to shellfish.")
    assert edited.content == "Alice is allergic to shellfish."
    with pytest.raises(InvalidFieldError, match="nothing to change"):
        await ph.memory.edit(item.id, ALICE)
    with pytest.raises(NotFoundError):
        await ph.memory.forget(item.id, MemoryScope("user", user_id="bob"))
    await ph.memory.forget(item.id, ALICE)
    assert await ph.memory.list(ALICE) == []
    # Another tenant's view of the same door sees nothing of this one.
    other = ph.for_tenant("acme")
    await ph.memory.add("Alice likes tea.", ALICE)
    assert await other.memory.list(ALICE) == []


async def test_a_scoped_turn_retrieves_records_and_remembers(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    await ph.memory.add("Alice is allergic to peanuts.", ALICE)
    await ph.memory.add("Bob is allergic to peanuts.", MemoryScope("user", user_id="bob"))
    await ph.memory.add(
        "Orders above 100 EUR ship free.", MemoryScope("organization"), memory_type="policy"
    )
    model.script.steps.append(Reply("Try the peanut-free chocolate."))
    result = await ph.command.start_and_send(
        "Which chocolate can I eat, given my allergy?",
        action="CHAT",
        runtime_config={"user_id": "alice"},
    )
    assert result.status is ProcessStatus.COMPLETED
    sent = system_text(model, 0)
    assert "Alice is allergic to peanuts." in sent
    assert "Bob is allergic" not in sent
    # The timeline names every memory used.
    timeline = (await ph.query.get_transcript(result.conversation_uuid)).timeline
    [event] = [e for e in timeline if e.kind is TimelineKind.MEMORY]
    used = event.data["used"]
    assert any(u["scope"] == "user" for u in used)
    # The exchange is in session memory, and an extraction job is queued.
    session = MemoryScope("session", session_id=result.conversation_uuid, user_id="alice")
    [turn] = await ph.memory.list(session)
    assert "peanut-free chocolate" in turn.content and turn.expires_at is not None
    [job] = await ph.memory.jobs()
    assert job["status"] == "pending" and job["conversation_uuid"] == result.conversation_uuid


async def test_extraction_jobs_run_on_the_actions_model(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.append(Reply("Noted."))
    await ph.command.start_and_send(
        "I am vegetarian.", action="CHAT", runtime_config={"user_id": "alice"}
    )
    model.script.steps.append(
        Reply(json.dumps({"facts": [{"text": "The user is vegetarian.", "scope": "user"}]}))
    )
    [outcome] = await ph.memory.run_jobs()
    assert outcome.status == "done"
    assert [i.content for i in await ph.memory.list(ALICE)] == ["The user is vegetarian."]


async def test_a_tenants_run_leaves_other_tenants_jobs_to_the_operators_worker(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.append(Reply("Noted."))
    await ph.command.start_and_send(
        "I am vegetarian.", action="CHAT", runtime_config={"user_id": "alice"}
    )
    # Another tenant's run finds nothing to do and asks no model.
    asked = len(model.requests)
    assert await ph.for_tenant("acme").memory.run_jobs() == []
    assert len(model.requests) == asked
    [job] = await ph.memory.jobs()
    assert job["status"] == "pending" and job["attempts"] == 0
    # The operator's run (the service's worker) takes every tenant's.
    model.script.steps.append(
        Reply(json.dumps({"facts": [{"text": "The user is vegetarian.", "scope": "user"}]}))
    )
    [outcome] = await ph.for_tenant("acme").run_memory_jobs()
    assert outcome.status == "done"
    assert [i.content for i in await ph.memory.list(ALICE)] == ["The user is vegetarian."]
    assert await ph.for_tenant("acme").memory.list(ALICE) == []


async def test_an_action_without_scoped_memory_touches_no_memory(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    await ph.memory.add("Alice is allergic to peanuts.", ALICE)
    model.script.steps.append(Reply("Hello."))
    result = await ph.command.start_and_send(
        "allergy?", action="PLAINCHAT", runtime_config={"user_id": "alice"}
    )
    assert "allergic" not in system_text(model, 0)
    timeline = (await ph.query.get_transcript(result.conversation_uuid)).timeline
    assert not [e for e in timeline if e.kind is TimelineKind.MEMORY]
    assert await ph.memory.jobs() == []


async def test_erasing_a_user_cuts_their_chat_memory_and_keeps_the_audit(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.append(Reply("Noted."))
    first = await ph.command.start_and_send(
        "My card number ends in 4242.", action="CHAT", runtime_config={"user_id": "alice"}
    )
    await ph.memory.add("Alice is vegetarian.", ALICE)
    report = await ph.memory.erase_user("alice", reason="GDPR Art. 17 request")
    assert report.records == 2 and report.jobs == 1 and report.conversations == 1
    assert await ph.memory.list(ALICE) == []
    conversation = await ph.query.get_conversation(first.conversation_uuid)
    assert conversation.memory_id.startswith("erased:")
    # The messages stay (the record-keeping duty), not as anyone's memory.
    messages = await ph.query.get_conversation_messages(first.conversation_uuid)
    assert any("4242" in m.content for m in messages)
    [event] = await ph.memory.erasures("alice")
    assert event["counts"] == {
        "records": 2,
        "versions": 0,
        "jobs": 1,
        "conversations": 1,
        "dataset_cases": 0,
    }
    assert "alice" not in json.dumps(event)


async def test_catalog_refuses_unknown_scoped_settings_and_settings_on_window(
    ph: Pilothouse,
) -> None:
    bad = CATALOG.replace("user_limit: 5", "user_limt: 5")
    with pytest.raises(CatalogValidationError, match="settings.user_limt"):
        await ph.catalog.import_text(bad)
    window = CATALOG.replace("kind: WINDOW", "kind: WINDOW\n    settings: {user_limit: 2}")
    with pytest.raises(CatalogValidationError, match="only a SCOPED strategy has settings"):
        await ph.catalog.import_text(window)


async def test_runtime_config_user_id_is_checked(ph: Pilothouse) -> None:
    from pilothouse.errors import PilothouseError

    with pytest.raises(PilothouseError, match="user_id"):
        await ph.command.start_and_send("hi", action="CHAT", runtime_config={"user_id": ""})


async def test_the_service_worker_runs_jobs_and_expires_sessions(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    import anyio

    from pilothouse.server._memory_worker import memory_worker

    model.script.steps.append(Reply("Noted."))
    await ph.command.start_and_send(
        "I am vegetarian.", action="CHAT", runtime_config={"user_id": "alice"}
    )
    model.script.steps.append(Reply('{"facts": []}'))
    async with anyio.create_task_group() as group:
        group.start_soon(memory_worker, ph, 0.01, 0.01)
        with anyio.fail_after(60):
            while [j["status"] for j in await ph.memory.jobs()] != ["done"]:
                await anyio.sleep(0.02)
        group.cancel_scope.cancel()
    assert await ph.memory.list(ALICE) == []


async def test_a_configured_extraction_model_is_used_and_a_missing_one_named(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    extractor = ph._shared.runtime().extractor
    turn = [{"role": "user", "content": "I am vegetarian."}]
    await extractor.enqueue(
        "default", turn, user_id="alice", agent=None, session_id=None, extraction_model="GPT"
    )
    model.script.steps.append(
        Reply(json.dumps({"facts": [{"text": "The user is vegetarian.", "scope": "user"}]}))
    )
    [done] = await ph.memory.run_jobs()
    assert done.status == "done"
    await extractor.enqueue(
        "default", turn, user_id="alice", agent=None, session_id=None, extraction_model="NOPE"
    )
    [missing] = await ph.memory.run_jobs()
    assert missing.status == "pending"
    assert "extraction model 'NOPE' is not in the catalog" in (missing.error or "")


async def test_a_new_session_finds_a_paraphrased_fact_at_the_default_threshold(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    # The default threshold is chosen from the memory benchmark's long-term
    # recall (user memory, as a new session sees it): a question in other
    # words than the stored fact is only loosely similar to it (cosine about
    # 0.2 on the packaged MiniLM), and must still reach the model.
    await ph.memory.add("The user drives a Volvo V70.", ALICE)
    model.script.steps.append(Reply("It should."))
    await ph.command.start_and_send(
        "Can my car fit a bicycle in the back?",
        action="CHAT",
        runtime_config={"user_id": "alice"},
    )
    assert "Volvo V70" in system_text(model, 0)
