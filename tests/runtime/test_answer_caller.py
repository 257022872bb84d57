"""Who answered a question, or gave a returned call's result, is in the record.

A paused turn goes on with a person's answers (human oversight) or a
caller's tool result, which may come through another face or key than the
one that started the conversation: the event that records them names that
caller, as each user message names its sender.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from pilothouse.api import Pilothouse
from pilothouse.catalog._enums import ProcessStatus, TimelineKind
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.store._tables import budget_usage_table
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel, ToolCall
from pilothouse.types import Caller

pytestmark = pytest.mark.anyio

STARTER = Caller("rest", "startkey", "starter")
ANSWERER = Caller("jsonrpc", "answerkey", "reviewer")


def _catalog() -> CatalogBuilder:
    return (
        CatalogBuilder()
        .tool(
            "LOOKUP",
            name="lookup",
            kind="schema",
            description="Look a brand up; the caller answers.",
            input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
        )
        .action("RESEARCH", prompt="Look brands up.", tools=["LOOKUP"])
    )


async def test_the_answers_name_who_gave_them(database_url: str) -> None:
    ask = ToolCall("AskUserQuestion", {"question": "Which size?"}, call_id="q1")
    model = ScriptedModel([ask, Reply("Ordered.")])
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        await _catalog().import_into(ph)
        starter = ph.for_tenant(ph.tenant, caller=STARTER)
        paused = await starter.command.start_and_send("Order a shirt", action="RESEARCH")
        assert paused.status is ProcessStatus.WAITING
        answerer = ph.for_tenant(ph.tenant, caller=ANSWERER)
        done = await answerer.command.submit_answers(paused.conversation_uuid, {"q1": "M"})
        assert done.status is ProcessStatus.COMPLETED
        timeline = (await ph.query.get_transcript(paused.conversation_uuid)).timeline
    (answered,) = [e.data for e in timeline if e.kind is TimelineKind.HUMAN_ANSWER]
    assert answered["caller"] == {
        "face": "jsonrpc",
        "key_prefix": "answerkey",
        "key_name": "reviewer",
    }


async def test_a_tool_result_names_who_gave_it(database_url: str) -> None:
    model = ScriptedModel([ToolCall("lookup", {"q": "Acme"}, call_id="l1"), Reply("Found.")])
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        await _catalog().import_into(ph)
        starter = ph.for_tenant(ph.tenant, caller=STARTER)
        returned = await starter.command.start_and_send("Look Acme up", action="RESEARCH")
        (call,) = returned.tool_calls
        answerer = ph.for_tenant(ph.tenant, caller=ANSWERER)
        await answerer.command.submit_tool_result(
            returned.conversation_uuid, call.id, "a rocket maker"
        )
        timeline = (await ph.query.get_transcript(returned.conversation_uuid)).timeline
    (given,) = [
        e.data
        for e in timeline
        if e.kind is TimelineKind.TOOL_EXECUTION and e.data.get("status") == "result from caller"
    ]
    assert given["caller"] == {"face": "jsonrpc", "key_prefix": "answerkey", "key_name": "reviewer"}


async def _per_key_ledger(database_url: str) -> dict[str | None, tuple[int, int]]:
    """Each API key's turns and input tokens under the per-key budget."""
    db = Database(database_url)
    try:
        async with db.engine.connect() as connection:
            rows = (await connection.execute(select(budget_usage_table))).all()
    finally:
        await db.dispose()
    return {row.subject: (row.turns, row.spent_input) for row in rows if row.budget == "PERKEY"}


async def test_the_turn_answers_resume_is_charged_to_the_answering_key(
    database_url: str,
) -> None:
    ask = ToolCall("AskUserQuestion", {"question": "Which size?"}, call_id="q1")
    model = ScriptedModel([ask, Reply("Ordered.", input_tokens=7, output_tokens=3)])
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        builder = _catalog()
        builder.add("budgets", code="PERKEY", scope="api_key", turns=1)
        await builder.import_into(ph)
        starter = ph.for_tenant(ph.tenant, caller=STARTER)
        paused = await starter.command.start_and_send("Order a shirt", action="RESEARCH")
        assert paused.status is ProcessStatus.WAITING
        answerer = ph.for_tenant(ph.tenant, caller=ANSWERER)
        # The starting key's one turn is spent: charged to it, this was refused.
        done = await answerer.command.submit_answers(paused.conversation_uuid, {"q1": "M"})
        assert done.status is ProcessStatus.COMPLETED
    charged = await _per_key_ledger(database_url)
    assert set(charged) == {"startkey", "answerkey"}
    assert charged["answerkey"] == (1, 7)


async def test_the_turn_a_tool_result_resumes_is_charged_to_the_giving_key(
    database_url: str,
) -> None:
    model = ScriptedModel(
        [
            ToolCall("lookup", {"q": "Acme"}, call_id="l1"),
            Reply("Found.", input_tokens=11, output_tokens=2),
        ]
    )
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        builder = _catalog()
        builder.add("budgets", code="PERKEY", scope="api_key", turns=100)
        await builder.import_into(ph)
        starter = ph.for_tenant(ph.tenant, caller=STARTER)
        returned = await starter.command.start_and_send("Look Acme up", action="RESEARCH")
        (call,) = returned.tool_calls
        answerer = ph.for_tenant(ph.tenant, caller=ANSWERER)
        done = await answerer.command.submit_tool_result(
            returned.conversation_uuid, call.id, "a rocket maker"
        )
        assert done.status is ProcessStatus.COMPLETED
    charged = await _per_key_ledger(database_url)
    assert charged["startkey"][0] == 1
    assert charged["answerkey"] == (1, 11)
