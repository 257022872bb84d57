"""A SCOPED turn's retrieval: the long-term cap, organization collections, resumed turns.

Turns run on :class:`~pilothouse.testing.ScriptedModel`; memory and knowledge
are real (the packaged MiniLM, SQLite and PostgreSQL).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pilothouse.api import Pilothouse
from pilothouse.errors import CatalogValidationError
from pilothouse.knowledge import LocalMiniLM
from pilothouse.memory import ScopedMemory
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import Reply, ScriptedModel, ToolCall
from pilothouse.types import MemoryScope, ProcessStatus, TextDocument, TimelineKind

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
    capabilities: [FC]
configurations:
  - code: DFLT
    max_tokens: 256
vector_stores:
  - code: EMBED
document_collections:
  - code: HANDBK
    store: EMBED
    collection_name: handbook
tools:
  - code: LOOKUP
    name: lookup_order
    kind: schema
    description: Look an order up; the caller answers.
    input_schema:
      type: object
      properties:
        order: {type: string}
memory_strategies:
  - code: CAPD
    kind: SCOPED
    settings: {max_results: 2, extract: false, memory_token_budget: 2000}
  - code: ORGD
    kind: SCOPED
    settings: {organization_collections: [HANDBK], extract: false, threshold: 0.1}
  - code: PLNS
    kind: SCOPED
    settings: {extract: false, threshold: 0.1}
actions:
  - code: CAPPED
    model: GPT
    configuration: DFLT
    memory_strategy: CAPD
    prompt: You are a shop assistant.
  - code: ORGCHAT
    model: GPT
    configuration: DFLT
    memory_strategy: ORGD
    prompt: You are a shop assistant.
  - code: TOOLCHAT
    model: GPT
    configuration: DFLT
    memory_strategy: PLNS
    prompt: You are a shop assistant.
    tools: [LOOKUP]
"""

ALICE = MemoryScope("user", user_id="alice")
BOB = MemoryScope("user", user_id="bob")


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


def sent(model: ScriptedModel, n: int) -> str:
    return json.dumps([str(m) for m in model.requests[n].messages])


async def memory_events(ph: Pilothouse, uuid: str) -> list[dict[str, Any]]:
    timeline = (await ph.query.get_transcript(uuid)).timeline
    return [dict(e.data) for e in timeline if e.kind is TimelineKind.MEMORY]


async def test_max_results_caps_the_long_term_memories_of_a_turn(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    for n in range(4):
        await ph.memory.add(f"Alice is allergic to peanuts (noted {n}).", ALICE)
        await ph.memory.add(
            f"Peanut allergy policy {n}: label every product.", MemoryScope("organization")
        )
    model.script.steps.append(Reply("Take the plain chocolate."))
    result = await ph.command.start_and_send(
        "Which chocolate is safe with my peanut allergy?",
        action="CAPPED",
        runtime_config={"user_id": "alice"},
    )
    assert result.status is ProcessStatus.COMPLETED
    [event] = await memory_events(ph, result.conversation_uuid)
    assert event["max_results"] == 2
    assert event["candidates"] == 8
    assert len([u for u in event["used"] if u["scope"] != "session"]) == 2
    # The user's message and the two memories: no third long-term one.
    assert sent(model, 0).lower().count("peanut") == 3


async def test_max_results_is_checked_by_name_when_the_catalog_is_written(ph: Pilothouse) -> None:
    bad = "memory_strategies:\n  - code: BAD\n    kind: SCOPED\n    settings: {max_results: -1}\n"
    with pytest.raises(CatalogValidationError, match="max_results"):
        await ph.catalog.import_text(bad)


async def test_organization_memory_comes_from_the_tenants_own_collection(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    await ph.knowledge.ingest(
        "HANDBK",
        [TextDocument("returns", "Returns are accepted within 30 days with the receipt.")],
    )
    acme = ph.for_tenant("acme")
    await acme.catalog.import_text(CATALOG)
    await acme.knowledge.ingest(
        "HANDBK",
        [TextDocument("returns", "ACME takes returns for 365 days, no receipt needed.")],
    )
    model.script.steps.append(Reply("Within 30 days."))
    result = await ph.command.start_and_send(
        "How long do I have to return an item?",
        action="ORGCHAT",
        runtime_config={"user_id": "alice"},
    )
    assert result.status is ProcessStatus.COMPLETED
    prompt = sent(model, 0)
    assert "within 30 days with the receipt" in prompt
    assert "365 days" not in prompt
    [event] = await memory_events(ph, result.conversation_uuid)
    [chunk] = [u for u in event["used"] if u["id"].startswith("chunk:")]
    assert chunk["scope"] == "organization" and chunk["collection"] == "HANDBK"


async def test_an_unknown_organization_collection_is_refused_when_written_and_fails_a_turn(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    # The strategy names a collection this tenant's catalog does not have.
    acme = ph.for_tenant("acme")
    with pytest.raises(CatalogValidationError) as refused:
        await acme.catalog.import_text(CATALOG.replace("code: HANDBK", "code: OTHER"))
    assert any(
        issue.field == "settings.organization_collections[0]"
        and issue.rule == "unknown document collection 'HANDBK'"
        for issue in refused.value.issues
    )
    # A collection deleted after the strategy was written fails the turn by name.
    await acme.catalog.import_text(CATALOG)
    await acme.catalog.delete("document_collections", "HANDBK")
    model.script.steps.append(Reply("unused"))
    result = await acme.command.start_and_send(
        "How long do I have to return an item?",
        action="ORGCHAT",
        runtime_config={"user_id": "alice"},
    )
    assert result.status is ProcessStatus.FAILED
    assert "HANDBK" in (result.error or "")
    assert model.requests == []


async def test_a_turn_resumed_after_answers_retrieves_its_users_memories(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    await ph.memory.add("Alice wears size M.", ALICE)
    await ph.memory.add("Bob wears size XXL.", BOB)
    ask = ToolCall(
        "AskUserQuestion",
        {"questions": [{"id": "colour", "question": "Which colour?", "choices": ["red", "blue"]}]},
        call_id="q1",
    )
    model.script.steps.extend([ask, Reply("A red shirt in size M, ordered.")])
    paused = await ph.command.start_and_send(
        "Order me a shirt in my usual size.",
        action="TOOLCHAT",
        runtime_config={"user_id": "alice"},
    )
    assert paused.status is ProcessStatus.WAITING
    done = await ph.command.submit_answers(paused.conversation_uuid, {"colour": "red"})
    assert done.status is ProcessStatus.COMPLETED
    resumed_prompt = sent(model, 1)
    assert "Alice wears size M." in resumed_prompt
    assert "Bob wears" not in resumed_prompt
    fresh, resumed = await memory_events(ph, paused.conversation_uuid)
    assert fresh["resumed"] is False and resumed["resumed"] is True
    assert resumed["user_id"] is True
    assert any(u["scope"] == "user" for u in resumed["used"])
    # The answered turn is remembered with the user's message, in alice's session.
    session = MemoryScope("session", session_id=paused.conversation_uuid, user_id="alice")
    [remembered] = await ph.memory.list(session)
    assert remembered.content.startswith("User: Order me a shirt")


async def test_a_turn_resumed_after_a_tool_result_retrieves_memories_too(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    await ph.memory.add("Alice's orders ship to Hamburg.", ALICE)
    call = ToolCall("lookup_order", {"order": "A-17"}, call_id="c1")
    model.script.steps.extend([call, Reply("Order A-17 ships to Hamburg tomorrow.")])
    returned = await ph.command.start_and_send(
        "Where does my order A-17 ship to?",
        action="TOOLCHAT",
        runtime_config={"user_id": "alice"},
    )
    assert [c.id for c in returned.tool_calls] == ["c1"]
    done = await ph.command.submit_tool_result(
        returned.conversation_uuid, "c1", {"status": "packed"}
    )
    assert done.status is ProcessStatus.COMPLETED
    assert "ship to Hamburg" in sent(model, 1)
    events = await memory_events(ph, returned.conversation_uuid)
    assert [e["resumed"] for e in events] == [False, True]
