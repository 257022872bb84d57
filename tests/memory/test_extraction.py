"""Extraction jobs: ADD / UPDATE / DELETE / NOOP, retries, exactly-once completion."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import pytest

from pilothouse.memory import EVERY_TENANT, MemoryExtractor, ScopedMemory
from pilothouse.memory._tables import MemoryJob
from pilothouse.store._base import utcnow
from pilothouse.types import MemoryScope

pytestmark = pytest.mark.anyio

ALICE = MemoryScope("user", user_id="alice")
TURN = [
    {"role": "user", "content": "I moved to Lisbon last month and I am vegetarian."},
    {"role": "assistant", "content": "Noted! Lisbon has great vegetarian food."},
]


class Script:
    """Plays back model answers and keeps what was asked (a model stand-in for the unit tests)."""

    def __init__(self, *answers: str | Callable[[str], str]) -> None:
        self.answers = list(answers)
        self.prompts: list[tuple[str, str]] = []

    async def __call__(
        self, job: MemoryJob, system: str, user: str, schema: Mapping[str, Any]
    ) -> str:
        self.prompts.append((system, user))
        answer = self.answers.pop(0)
        return answer(user) if callable(answer) else answer


def facts(*items: tuple[str, str] | str) -> str:
    out = []
    for item in items:
        text, scope = (item, "user") if isinstance(item, str) else item
        out.append({"text": text, "scope": scope, "type": "fact", "importance": 0.8})
    return json.dumps({"facts": out})


async def enqueue(extractor: MemoryExtractor, messages: list[dict[str, str]] = TURN) -> int:
    return await extractor.enqueue(
        "t1", messages, user_id="alice", agent="SALES", session_id="s-1", action_code="CHAT"
    )


async def test_new_facts_are_added_to_user_and_agent_memory(memory: ScopedMemory) -> None:
    script = Script(
        facts(
            "The user lives in Lisbon.",
            "The user is vegetarian.",
            ("Customers in Lisbon ask for vegetarian options.", "agent"),
        )
    )
    extractor = MemoryExtractor(memory, script)
    job = await enqueue(extractor)
    [outcome] = await extractor.run_pending(tenant="t1")
    assert outcome.job_id == job and outcome.status == "done"
    assert [e["event"] for e in outcome.events] == ["ADD", "ADD", "ADD"]
    assert {i.content for i in await memory.list("t1", ALICE)} == {
        "The user lives in Lisbon.",
        "The user is vegetarian.",
    }
    agent = await memory.list("t1", MemoryScope("agent", agent="SALES"))
    assert [(i.content, i.memory_type) for i in agent] == [
        ("Customers in Lisbon ask for vegetarian options.", "learning")
    ]
    assert "I moved to Lisbon" in script.prompts[0][1]
    assert (await extractor.jobs("t1"))[0]["outcome"] == {
        "ADD": 3,
        "UPDATE": 0,
        "DELETE": 0,
        "NOOP": 0,
    }


async def test_the_same_fact_twice_keeps_one_record(memory: ScopedMemory) -> None:
    extractor = MemoryExtractor(
        memory, Script(facts("The user is vegetarian."), facts("The user is vegetarian."))
    )
    await enqueue(extractor)
    await enqueue(extractor)
    first, second = await extractor.run_pending(tenant="t1")
    assert [e["event"] for e in first.events] == ["ADD"]
    assert [e["event"] for e in second.events] == ["NOOP"]
    assert len(await memory.list("t1", ALICE)) == 1


async def test_a_related_fact_is_decided_by_the_model_update(memory: ScopedMemory) -> None:
    old, _ = await memory.add("t1", ALICE, "The user lives in Porto.")
    script = Script(
        facts("The user lives in Lisbon now, having moved from Porto."),
        lambda prompt: json.dumps(
            {"event": "UPDATE", "id": 0, "text": "The user lives in Lisbon (moved from Porto)."}
        ),
    )
    extractor = MemoryExtractor(memory, script)
    await enqueue(extractor)
    [outcome] = await extractor.run_pending(tenant="t1")
    assert [e["event"] for e in outcome.events] == ["UPDATE"]
    # The model saw the existing memory under a small integer, never its uuid.
    assert (
        "0: The user lives in Porto." in script.prompts[1][1] and old.id not in script.prompts[1][1]
    )
    [item] = await memory.list("t1", ALICE)
    assert item.id == old.id and item.content == "The user lives in Lisbon (moved from Porto)."


async def test_a_near_duplicate_the_model_would_add_updates_the_old_record(
    memory: ScopedMemory,
) -> None:
    old, _ = await memory.add("t1", ALICE, "The user has two children.")
    await memory.add("t1", ALICE, "The user is vegetarian.")
    script = Script(
        facts("The user has three children.", "The user is allergic to peanuts."),
        json.dumps({"event": "ADD", "id": None, "text": None}),
        json.dumps({"event": "ADD", "id": None, "text": None}),
    )
    extractor = MemoryExtractor(memory, script)
    await enqueue(extractor)
    [outcome] = await extractor.run_pending(tenant="t1")
    # The changed count replaces the stale one; a different fact of the user is added.
    assert [e["event"] for e in outcome.events] == ["UPDATE", "ADD"]
    contents = {i.content for i in await memory.list("t1", ALICE)}
    assert contents == {
        "The user has three children.",
        "The user is vegetarian.",
        "The user is allergic to peanuts.",
    }
    versions = await memory.versions("t1", ALICE, old.id)
    assert [v.content for v in versions] == [
        "The user has two children.",
        "The user has three children.",
    ]


async def test_a_turn_changes_a_record_once_the_first_fact_wins(memory: ScopedMemory) -> None:
    old, _ = await memory.add("t1", ALICE, "The user has two children.")
    script = Script(
        facts("The user has three children now.", "The user does not have two children."),
        json.dumps({"event": "UPDATE", "id": 0, "text": "The user has three children now."}),
        json.dumps({"event": "UPDATE", "id": 0, "text": "The user does not have two children."}),
    )
    extractor = MemoryExtractor(memory, script)
    await enqueue(extractor)
    [outcome] = await extractor.run_pending(tenant="t1")
    assert [e["event"] for e in outcome.events] == ["UPDATE"]
    [item] = await memory.list("t1", ALICE)
    assert item.id == old.id and item.content == "The user has three children now."


async def test_a_contradicting_fact_deletes_the_old_and_adds_the_new(memory: ScopedMemory) -> None:
    await memory.add("t1", ALICE, "The user eats meat every day.")
    script = Script(
        facts("The user is vegetarian and eats no meat."),
        json.dumps({"event": "DELETE", "id": 0, "text": None}),
    )
    extractor = MemoryExtractor(memory, script)
    await enqueue(extractor)
    [outcome] = await extractor.run_pending(tenant="t1")
    assert [e["event"] for e in outcome.events] == ["DELETE", "ADD"]
    assert [i.content for i in await memory.list("t1", ALICE)] == [
        "The user is vegetarian and eats no meat."
    ]


async def test_empty_input_creates_nothing_and_asks_no_model(memory: ScopedMemory) -> None:
    script = Script()
    extractor = MemoryExtractor(memory, script)
    await enqueue(extractor, [{"role": "user", "content": "   "}])
    [outcome] = await extractor.run_pending(tenant="t1")
    assert outcome.status == "done" and outcome.events == ()
    assert script.prompts == [] and await memory.list("t1", ALICE) == []


async def test_no_facts_creates_nothing(memory: ScopedMemory) -> None:
    extractor = MemoryExtractor(memory, Script('{"facts": []}'))
    await enqueue(extractor)
    [outcome] = await extractor.run_pending(tenant="t1")
    assert outcome.status == "done" and outcome.events == ()
    assert await memory.list("t1", ALICE) == []


async def test_malformed_output_is_sent_back_once_and_repaired(
    memory: ScopedMemory, caplog: pytest.LogCaptureFixture
) -> None:
    script = Script(
        "Sure! Here are the facts: the user is vegetarian.",
        "```json\n" + facts("The user is vegetarian.") + "\n```",
    )
    extractor = MemoryExtractor(memory, script)
    await enqueue(extractor)
    with caplog.at_level(logging.WARNING, "pilothouse.memory._extract"):
        [outcome] = await extractor.run_pending(tenant="t1")
    assert outcome.status == "done" and len(outcome.events) == 1
    assert "could not be used" in script.prompts[1][1]
    assert any("malformed model answer" in r.getMessage() for r in caplog.records)


async def test_malformed_output_is_retried_then_failed_never_dropped(
    memory: ScopedMemory, caplog: pytest.LogCaptureFixture
) -> None:
    script = Script(*(["not json"] * 6))
    extractor = MemoryExtractor(memory, script)
    job = await extractor.enqueue(
        "t1", TURN, user_id="alice", agent=None, session_id=None, max_attempts=3
    )
    with caplog.at_level(logging.WARNING, "pilothouse.memory._extract"):
        outcomes = await extractor.run_pending(tenant="t1")
        # A failed attempt waits before its retry: nothing more runs at once.
        assert [o.status for o in outcomes] == ["pending"]
        for step in (1, 2):
            later = utcnow() + timedelta(seconds=30 * step + 1)
            claimed = await extractor.claim(tenant="t1", now=later)
            assert claimed is not None
            outcomes.append(await extractor.run(*claimed))
    assert [o.status for o in outcomes] == ["pending", "pending", "failed"]
    [row] = await extractor.jobs("t1")
    assert row["id"] == job and row["status"] == "failed" and row["attempts"] == 3
    assert "not the JSON asked for" in (row["error"] or "")
    assert any(r.levelno == logging.ERROR for r in caplog.records)
    assert await memory.list("t1", ALICE) == []


async def test_a_job_whose_worker_died_is_taken_again_and_completes_once(
    memory: ScopedMemory,
) -> None:
    answer = facts("The user is vegetarian.")
    extractor = MemoryExtractor(memory, Script(answer, answer), lease_seconds=60)
    await enqueue(extractor)
    claimed = await extractor.claim(tenant="t1")
    assert claimed is not None
    # The first worker "dies" here: its lease has not ended, so nobody takes the job.
    assert await extractor.claim(tenant="t1") is None
    later = await extractor.claim(tenant="t1", now=utcnow() + timedelta(seconds=61))
    assert later is not None and later[1] == 2
    outcome = await extractor.run(*later)
    assert outcome.status == "done"
    # The dead worker's attempt, should it wake, is fenced off: nothing applies twice.
    stale = await extractor.run(*claimed)
    assert stale.status == "pending" and stale.error == "lease lost"
    assert len(await memory.list("t1", ALICE)) == 1
    assert [j["status"] for j in await extractor.jobs("t1")] == ["done"]


async def test_a_job_without_user_writes_no_user_memory(memory: ScopedMemory) -> None:
    extractor = MemoryExtractor(memory, Script(facts("The user is vegetarian.")))
    await extractor.enqueue("t1", TURN, user_id=None, agent=None, session_id="s-1")
    [outcome] = await extractor.run_pending(tenant="t1")
    assert outcome.status == "done" and outcome.events == ()


async def test_a_tenants_run_takes_its_own_jobs_only(memory: ScopedMemory) -> None:
    extractor = MemoryExtractor(memory, Script(facts("The user is vegetarian.")))
    other = await extractor.enqueue("t2", TURN, user_id="alice", agent=None, session_id="s-2")
    # Tenant t1 has nothing to run: t2's job is neither claimed nor touched.
    assert await extractor.run_pending(tenant="t1") == []
    [row] = await extractor.jobs("t2")
    assert row["id"] == other and row["status"] == "pending" and row["attempts"] == 0
    # The operator's worker runs it, for the tenant its row names.
    [outcome] = await extractor.run_pending(tenant=EVERY_TENANT)
    assert outcome.job_id == other and outcome.status == "done"
    assert [i.content for i in await memory.list("t2", ALICE)] == ["The user is vegetarian."]
    assert await memory.list("t1", ALICE) == []


async def test_the_prompts_example_chatter_and_world_knowledge_are_not_stored(
    memory: ScopedMemory,
) -> None:
    # What the packaged small model was seen to write: its prompt's own
    # example, the assistant's acknowledgement, general knowledge as a user
    # fact. Only the fact about the user is a memory.
    turn = [
        {"role": "user", "content": "I am vegetarian. What is the capital of Australia?"},
        {"role": "assistant", "content": "Noted. The capital of Australia is Canberra."},
    ]
    script = Script(
        facts(
            "The user's name is Tom.",
            "Noted.",
            "The capital of Australia is Canberra.",
            "The user is vegetarian.",
        )
    )
    extractor = MemoryExtractor(memory, script)
    await enqueue(extractor, turn)
    [outcome] = await extractor.run_pending(tenant="t1")
    assert outcome.status == "done"
    assert [i.content for i in await memory.list("t1", ALICE)] == ["The user is vegetarian."]


async def test_the_prompts_example_is_kept_when_the_user_said_it(memory: ScopedMemory) -> None:
    turn = [
        {"role": "user", "content": "Hi, I'm Tom."},
        {"role": "assistant", "content": "Hello Tom!"},
    ]
    extractor = MemoryExtractor(memory, Script(facts("The user's name is Tom.")))
    await enqueue(extractor, turn)
    await extractor.run_pending(tenant="t1")
    assert [i.content for i in await memory.list("t1", ALICE)] == ["The user's name is Tom."]


async def test_a_changed_value_the_user_announced_replaces_the_old_one(
    memory: ScopedMemory,
) -> None:
    # "Berlin" and "Lisbon" score 0.61, below the near-duplicate line: only the
    # same sentence with another value, and the user saying it changed, tell it.
    old, _ = await memory.add("t1", ALICE, "The user lives in Berlin.")
    await memory.add("t1", ALICE, "The user is allergic to penicillin.")
    script = Script(
        facts("The user lives in Lisbon.", "The user is allergic to peanuts."),
        json.dumps({"event": "ADD", "id": None, "text": None}),
        json.dumps({"event": "ADD", "id": None, "text": None}),
    )
    extractor = MemoryExtractor(memory, script)
    await enqueue(extractor)  # "I moved to Lisbon last month ..."
    [outcome] = await extractor.run_pending(tenant="t1")
    assert [e["event"] for e in outcome.events] == ["UPDATE", "ADD"]
    contents = {i.content for i in await memory.list("t1", ALICE)}
    # A second allergy is a second fact, not a replaced one.
    assert contents == {
        "The user lives in Lisbon.",
        "The user is allergic to penicillin.",
        "The user is allergic to peanuts.",
    }
    assert (await memory.get("t1", ALICE, old.id)).content == "The user lives in Lisbon."


async def test_without_a_word_of_change_a_similar_sentence_is_a_second_fact(
    memory: ScopedMemory,
) -> None:
    await memory.add("t1", ALICE, "The user has a cat.")
    script = Script(
        facts("The user has a dog."), json.dumps({"event": "ADD", "id": None, "text": None})
    )
    extractor = MemoryExtractor(memory, script)
    await enqueue(
        extractor,
        [
            {"role": "user", "content": "Our family also has a dog."},
            {"role": "assistant", "content": "Lovely!"},
        ],
    )
    [outcome] = await extractor.run_pending(tenant="t1")
    assert [e["event"] for e in outcome.events] == ["ADD"]
    assert len(await memory.list("t1", ALICE)) == 2


async def test_what_the_user_asked_is_not_stored_as_a_fact(memory: ScopedMemory) -> None:
    script = Script(facts("The user asked for dinner ideas.", "The user is vegetarian."))
    extractor = MemoryExtractor(memory, script)
    await enqueue(extractor)
    [outcome] = await extractor.run_pending(tenant="t1")
    assert [e["text"] for e in outcome.events] == ["The user is vegetarian."]


def test_replaces_is_one_changed_span_in_the_same_sentence() -> None:
    from pilothouse.memory._extract import replaces

    assert replaces("The user's manager is called Dana.", "The user's manager is called Priya.")
    assert replaces("The user prefers window seats.", "The user prefers aisle seats.")
    assert not replaces("The user lives in Berlin.", "The user likes jazz music a lot more.")
    assert not replaces("The user is vegetarian.", "The user is vegetarian.")
