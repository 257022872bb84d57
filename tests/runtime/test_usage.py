"""Usage reports add up to the recorded conversations, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel

pytestmark = pytest.mark.anyio

# $100 per million tokens each way: a reply of 10 + 10 tokens costs $0.002.
CATALOG = (
    CatalogBuilder()
    .model("PRICED", provider="TEST", model_name="priced", input_price=100, output_price=100)
    .model("CHEAP", provider="TEST", model_name="cheap", input_price=1, output_price=1)
    .action("ASK", prompt="Answer briefly.", model="PRICED", ask_user=False)
    .action("SUM", prompt="Summarize.", model="CHEAP", ask_user=False)
)


async def recorded(database_url: str) -> Pilothouse:
    model = ScriptedModel([Reply("ok", input_tokens=10, output_tokens=10)] * 10)
    ph = Pilothouse(Settings(database_url=database_url, secrets_file=None), model=model)
    await ph.__aenter__()
    await CATALOG.import_into(ph)
    for memory_id in ("ann", "ann", "bob"):
        await ph.command.start_and_send("Hi", action="ASK", memory_id=memory_id)
    await ph.command.start_and_send("Hi", action="SUM", memory_id="bob")
    return ph


async def test_usage_groups_the_recorded_conversations(database_url: str) -> None:
    ph = await recorded(database_url)
    try:
        by_action = await ph.query.usage(group_by=["action"])
        by_user_action = await ph.query.usage(group_by=["user", "action"])
        by_day = await ph.query.usage(group_by=["day", "tenant"])
        listed = await ph.query.list_conversations()
    finally:
        await ph.__aexit__(None, None, None)
    # Most costly first; the figures are the conversations' own totals.
    assert [(r.group, r.conversations, r.input_tokens, r.output_tokens) for r in by_action] == [
        ({"action": "ASK"}, 3, 30, 30),
        ({"action": "SUM"}, 1, 10, 10),
    ]
    assert Decimal(by_action[0].cost) == Decimal("0.006")
    assert Decimal(by_action[1].cost) == Decimal("0.00002")
    total = sum(Decimal(c.estimated_cost) for c in listed.items)
    assert sum(Decimal(r.cost) for r in by_action) == total
    assert {(r.group["user"], r.group["action"]): r.conversations for r in by_user_action} == {
        ("ann", "ASK"): 2,
        ("bob", "ASK"): 1,
        ("bob", "SUM"): 1,
    }
    today = datetime.now(UTC).date().isoformat()
    assert [(r.group, r.conversations) for r in by_day] == [
        ({"day": today, "tenant": "default"}, 4)
    ]


async def test_usage_counts_the_days_asked_for(database_url: str) -> None:
    ph = await recorded(database_url)
    today = datetime.now(UTC).date()
    try:
        inside = await ph.query.usage(group_by=["model"], since=today, until=today)
        after = await ph.query.usage(since=today + timedelta(days=1))
        before = await ph.query.usage(until=today - timedelta(days=1))
    finally:
        await ph.__aexit__(None, None, None)
    # The model is the one that answered, as the provider named it.
    assert [(r.group["model"], r.conversations) for r in inside] == [("scripted", 4)]
    assert after == [] and before == []


async def test_the_first_and_last_days_a_date_can_name_count_everything(
    database_url: str,
) -> None:
    # until is included, so its end is the next midnight: none follows 9999-12-31.
    ph = await recorded(database_url)
    try:
        everything = await ph.query.usage(group_by=["tenant"], since=date.min, until=date.max)
    finally:
        await ph.__aexit__(None, None, None)
    assert [r.conversations for r in everything] == [4]


@pytest.mark.parametrize(
    ("group_by", "field", "words"),
    [
        (["action", "colour"], "by", "'colour'; write one or more of tenant, key, agent"),
        (["action", "action"], "by", "name each grouping once"),
    ],
)
async def test_an_unknown_or_repeated_grouping_is_refused_by_name(
    database_url: str, group_by: list[str], field: str, words: str
) -> None:
    async with Pilothouse(Settings(database_url=database_url, secrets_file=None)) as ph:
        with pytest.raises(InvalidFieldError) as refused:
            await ph.query.usage(group_by=group_by)
        with pytest.raises(InvalidFieldError, match="is before since"):
            today = datetime.now(UTC).date()
            await ph.query.usage(since=today, until=today - timedelta(days=1))
    assert refused.value.field == field
    assert words in refused.value.rule
