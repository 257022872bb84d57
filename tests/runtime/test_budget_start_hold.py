"""A new conversation's first budget hold commits with the conversation's start.

For a turn whose model call is all that happens before its next write, the
start statement waits for the first model call's hold and carries it: one
commit before the call instead of two (on PostgreSQL the round trips are
counted in ``tests/store/test_round_trips.py``). These tests pin what that
must not change: the hold is on the ledger before anything is sent, nothing
is held for a start that failed, a turn that starts over (the catalog moved
meanwhile) settles what it held and counts once, and a shared memory's
messages still reach the request.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage
from test_budgets import ledger

from pilothouse.api import Pilothouse
from pilothouse.errors import ConflictError
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel
from pilothouse.types import ProcessStatus

pytestmark = pytest.mark.anyio

PRICE = 100
SPENT = Decimal("0.002")
"""What a call of 10 input and 10 output tokens costs at $100 per million each way."""


def catalog(prompt: str = "Answer briefly.", **budget: Any) -> CatalogBuilder:
    builder = (
        CatalogBuilder()
        .model(
            "PRICED", provider="TEST", model_name="priced", input_price=PRICE, output_price=PRICE
        )
        .configuration("SMAL", max_tokens=10, retry_delay=0)
        .add("memory_strategies", code="FULL", name="Whole history", kind="FULL")
        .action(
            "ASK",
            prompt=prompt,
            model="PRICED",
            configuration="SMAL",
            ask_user=False,
            memory_strategy="FULL",
        )
    )
    if budget:
        builder.add("budgets", **budget)
    return builder


def replies(count: int) -> list[Reply]:
    return [Reply("ok", input_tokens=10, output_tokens=10)] * count


async def test_on_sqlite_a_budgeted_turn_commits_as_often_as_one_without(tmp_path: Any) -> None:
    """The hold rides on the start's commit; the settle rides on the ending's."""
    commits: dict[str, int] = {}
    variants: tuple[tuple[str, list[dict[str, Any]]], ...] = (
        ("none", []),
        ("one", [{"code": "TENANT", "money": "100", "turns": 1000}]),
        (
            "three",
            [
                {"code": "TENANT", "money": "100", "turns": 1000},
                {"code": "ASKS", "scope": "action", "turns": 1000},
                {"code": "DAY", "period": "day", "money": "100", "turns": 1000},
            ],
        ),
    )
    for name, budgets in variants:
        url = f"sqlite+aiosqlite:///{tmp_path / name}.db"
        settings = Settings(database_url=url, secrets_file=None)
        async with Pilothouse(settings, model=ScriptedModel(replies(3))) as ph:
            builder = catalog()
            for budget in budgets:
                builder.add("budgets", **budget)
            await builder.import_into(ph)
            # The period's first call makes the ledger row: not counted.
            await ph.command.start_and_send("warm up", action="ASK")
            runner = ph._shared.database._sqlite
            assert runner is not None
            before = runner._commits
            result = await ph.command.start_and_send("Hi", action="ASK")
            assert result.status is ProcessStatus.COMPLETED, result.error
            commits[name] = runner._commits - before
            # Every budget held and settled both turns.
            statuses = await ph.query.budget_status()
            assert sorted((st.budget, st.spent["turns"]) for st in statuses) == sorted(
                (budget["code"], "2") for budget in budgets
            ), statuses
    assert commits == {"none": 2, "one": 2, "three": 2}


async def test_the_hold_is_on_the_ledger_before_the_call_is_made(database_url: str) -> None:
    seen: list[tuple[Decimal, int]] = []

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # Read on a connection of its own, as another process would.
        (row,) = await ledger(database_url)
        seen.append((Decimal(row.held_money), row.turns))
        return ModelResponse(
            parts=[TextPart("ok")], usage=RequestUsage(input_tokens=10, output_tokens=10)
        )

    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=FunctionModel(answer)) as ph:
        await catalog(code="TENANT", money="100").import_into(ph)
        await ph.command.start_and_send("warm up", action="ASK")
        result = await ph.command.start_and_send("Hi", action="ASK")
    assert result.status is ProcessStatus.COMPLETED, result.error
    # Each call's worst case (prompt counted offline, max_tokens as output)
    # is held, and its turn counted, when it is made.
    (_, first), (held, second) = seen
    assert held > SPENT and (first, second) == (1, 2)
    (row,) = await ledger(database_url)
    assert Decimal(row.held_money) == 0 and Decimal(row.spent_money) == 2 * SPENT


async def test_a_start_that_fails_holds_nothing(database_url: str) -> None:
    model = ScriptedModel(replies(3))
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        await catalog(code="TENANT", money="100").import_into(ph)
        first = await ph.command.start_and_send("warm up", action="ASK")
        (before,) = await ledger(database_url)
        with pytest.raises(ConflictError):
            await ph.command.start_and_send(
                "Hi", action="ASK", conversation_uuid=first.conversation_uuid
            )
    (after,) = await ledger(database_url)
    assert len(model.requests) == 1
    assert (Decimal(after.held_money), after.turns) == (Decimal(before.held_money), before.turns)
    assert Decimal(after.held_money) == 0


async def test_a_turn_that_starts_over_settles_its_first_hold_and_counts_once(
    database_url: str,
) -> None:
    """The catalog moved between the cached compilation and the start: the turn compiles again."""
    model = ScriptedModel(replies(3))
    settings = Settings(database_url=database_url, secrets_file=None)
    budget = {"code": "TENANT", "money": "100", "turns": 100}
    async with Pilothouse(settings, model=model) as ph, Pilothouse(settings) as other:
        await catalog("Old prompt.", **budget).import_into(ph)
        await ph.command.start_and_send("before", action="ASK")
        # Another process (an operator's import) changes the action.
        await catalog("New prompt.", **budget).import_into(other)
        result = await ph.command.start_and_send("after", action="ASK")
    assert result.status is ProcessStatus.COMPLETED, result.error
    systems = [
        str(getattr(request.messages[0].parts[0], "content", "")) for request in model.requests
    ]
    assert [s.rsplit("\n\n", 1)[-1] for s in systems] == ["Old prompt.", "New prompt."]
    (row,) = await ledger(database_url)
    # The hold made for the request that never left is released, not spent;
    # the turn counts once against the turn limit.
    assert Decimal(row.held_money) == 0 and row.held_input == 0 and row.held_output == 0
    assert Decimal(row.spent_money) == 2 * SPENT and row.turns == 2


async def test_a_shared_memory_reaches_the_request_of_a_budgeted_turn(database_url: str) -> None:
    model = ScriptedModel(replies(3))
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        await catalog(code="USER", scope="user", output_tokens=1000).import_into(ph)
        await ph.command.start_and_send("My name is Ada.", action="ASK", memory_id="ada")
        result = await ph.command.start_and_send("What is my name?", action="ASK", memory_id="ada")
        assert result.status is ProcessStatus.COMPLETED, result.error
        # Later turns of the conversation read its own history with the take.
        later = await ph.command.send_message(result.conversation_uuid, "Again?")
        assert later.status is ProcessStatus.COMPLETED, later.error
    said = [
        [
            str(getattr(part, "content", ""))
            for message in request.messages
            for part in message.parts
        ]
        for request in model.requests
    ]
    assert "My name is Ada." in said[1] and "What is my name?" in said[1]
    assert "My name is Ada." in said[2] and "What is my name?" in said[2] and "Again?" in said[2]
    (row,) = await ledger(database_url)
    assert row.subject == "ada" and row.turns == 3 and row.spent_output == 30


async def test_one_shot_conversations_share_the_rows_they_are_charged_to(
    database_url: str,
) -> None:
    """The rows a caller is charged to are worked out once, not once per conversation.

    Callers are told apart only by what some budget is scoped to: with a
    tenant budget, every conversation of its own is the same caller.
    """
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=ScriptedModel(replies(5))) as ph:
        await catalog(code="TENANT", money="100").import_into(ph)
        for _ in range(5):
            result = await ph.command.start_and_send("Hi", action="ASK")
            assert result.status is ProcessStatus.COMPLETED, result.error
        gate = ph._shared.runtime().budgets
        assert len(gate._charged) == 1
