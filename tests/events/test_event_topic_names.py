"""Topic names a bus cannot publish on are refused when the catalog is written.

A name accepted there went to the outbox with every call and failed at
every publish; the rules are both buses': Kafka's topic names and NATS's
publish subjects.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pilothouse.api import Pilothouse
from pilothouse.catalog import import_catalog
from pilothouse.errors import CatalogValidationError
from pilothouse.settings import Settings
from pilothouse.store import Database

pytestmark = pytest.mark.anyio

BAD_NAMES = [
    ("topic", "bad..topic", "empty part between dots"),
    ("topic", ".", "empty part between dots"),
    ("reply_to", "..", "empty part between dots"),
    ("reply_to", "replies.", "empty part between dots"),
    ("topic", ".commands", "empty part between dots"),
    ("topic", "orders.*", "no topic name"),
    ("reply_to", "orders.>", "no topic name"),
    ("topic", "agent commands", "no topic name"),
    ("topic", "", "no topic name"),
    ("topic", "x" * 250, "no topic name"),
]


def _tool(field: str, name: str) -> dict[str, object]:
    return {
        "code": "LOOKUP",
        "name": "lookup_order",
        "kind": "event",
        "description": "Look up an order.",
        "input_schema": {"type": "object"},
        "settings": {field: name},
    }


@pytest.mark.parametrize(("field", "name", "says"), BAD_NAMES)
async def test_an_event_tools_topic_a_bus_refuses_is_refused_at_import(
    database: Database, tmp_path: Path, field: str, name: str, says: str
) -> None:
    path = tmp_path / "catalog.yaml"
    tool = _tool(field, name)
    path.write_text(
        textwrap.dedent(
            f"""
            tools:
              - code: LOOKUP
                name: lookup_order
                kind: event
                description: Look up an order.
                input_schema: {{type: object}}
                settings: {{{field}: "{name}"}}
            """
        ),
        encoding="utf-8",
    )
    with pytest.raises(CatalogValidationError) as raised:
        await import_catalog(database, "default", [path])
    (issue,) = raised.value.issues
    assert issue.field == f"settings.{field}"
    assert says in issue.rule
    assert f"'{name}'" in issue.rule
    async with Pilothouse(Settings(), database=database) as ph:
        with pytest.raises(CatalogValidationError, match=f"settings.{field}: .*{says}"):
            await ph.catalog.create("tools", tool)
        assert await ph.catalog.list_entries("tools") == []


@pytest.mark.parametrize("name", ["agent-commands", "orders.commands.v1", "a_b-c.D9", "x" * 249])
async def test_names_every_bus_takes_are_kept(database: Database, name: str) -> None:
    async with Pilothouse(Settings(), database=database) as ph:
        created = await ph.catalog.create("tools", _tool("topic", name))
        assert created.document["settings"] == {"topic": name}


async def test_a_tool_stored_before_the_rule_still_sends_its_calls_to_the_outbox(
    database: Database,
) -> None:
    # Such a row's calls fail alone at the relay (tests/events/test_event_outbox_backoff.py);
    # refusing it when a turn builds its tools would fail every turn of the action.
    from event_catalog import CATALOG, order_model
    from sqlalchemy import select, update

    from pilothouse.catalog import Tool
    from pilothouse.store import EventOutbox
    from pilothouse.types import ProcessStatus

    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=order_model()) as ph:
        await ph.catalog.import_text(CATALOG)
        async with database.sessions.begin() as session:
            await session.execute(
                update(Tool).where(Tool.code == "LOOKUP").values(settings={"topic": "bad..topic"})
            )
    async with Pilothouse(settings, database=database, model=order_model()) as ph:
        waiting = await ph.command.start_and_send("A-17", action="ORDERS")
        assert waiting.status is ProcessStatus.WAITING
        async with database.sessions() as session:
            assert list(await session.scalars(select(EventOutbox.topic))) == ["bad..topic"]
