from __future__ import annotations

import json
import uuid as uuid_module
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import anyio
import pytest
from sqlalchemy import update
from typer.testing import CliRunner, Result

from pilothouse.catalog._enums import (
    FinishReason,
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
)
from pilothouse.cli import app
from pilothouse.store import (
    Conversation,
    Database,
    NewAttachment,
    NewEvent,
    NewMessage,
    NewToolCall,
    SqlTurnStore,
    ToolCallOutcome,
    TurnBatch,
    Usage,
)

runner = CliRunner()


@dataclass
class Seeded:
    url: str
    tenant: str
    done: str
    """A completed SUMMARIZE conversation of ANALYST, created 2025-03-01."""
    fresh: str
    """A not-started TRANSLATE conversation without agent, created 2025-03-05."""

    def invoke(self, *args: str) -> Result:
        return runner.invoke(
            app, ["--database-url", self.url, "--tenant", self.tenant, "conversations", *args]
        )


async def _seed(url: str, tenant: str) -> tuple[str, str]:
    db = Database(url)
    try:
        await db.ensure_schema()
        writer = SqlTurnStore(db)
        done = await writer.create(tenant, action_code="SUMMARIZE", agent_code="ANALYST")
        handle = await writer.begin_turn(tenant, done.uuid)
        await writer.write(
            handle,
            TurnBatch(
                messages=[
                    NewMessage(
                        MessageRole.USER,
                        "Summarize [bold]this[/]",
                        attachments=(NewAttachment("text/plain", content=b"abc", name="a.txt"),),
                    ),
                    NewMessage(MessageRole.ASSISTANT, ""),
                ],
                tool_calls=[NewToolCall("c1", "get_weather", {"city": "Paris"})],
                events=[NewEvent(TimelineKind.REQUEST, {"model": "m"})],
                usage=Usage(input_tokens=12, output_tokens=5, estimated_cost=Decimal("0.0042")),
            ),
        )
        await writer.write(
            handle,
            TurnBatch(
                messages=[
                    NewMessage(MessageRole.TOOL, "sunny", tool_call_id="c1"),
                    NewMessage(MessageRole.ASSISTANT, "It is sunny in Paris."),
                ],
                outcomes=[ToolCallOutcome("c1", ToolCallStatus.SUCCEEDED, "sunny")],
                status=ProcessStatus.COMPLETED,
                finish_reason=FinishReason.STOP,
                response_model="test-model",
            ),
        )
        fresh = await writer.create(tenant, action_code="TRANSLATE", agent_code=None)
        async with db.sessions.begin() as session:
            for key, day in ((done.uuid, 1), (fresh.uuid, 5)):
                await session.execute(
                    update(Conversation)
                    .where(Conversation.uuid == key)
                    .values(
                        created_at=datetime(2025, 3, day, 12, tzinfo=UTC),
                        version=Conversation.version + 1,
                    )
                )
        return done.uuid, fresh.uuid
    finally:
        await db.dispose()


@pytest.fixture
def seeded(database_url: str) -> Seeded:
    # A tenant of its own keeps this test's rows apart on the shared PostgreSQL database.
    tenant = f"t{uuid_module.uuid4().hex[:12]}"
    done, fresh = anyio.run(_seed, database_url, tenant)
    return Seeded(url=database_url, tenant=tenant, done=done, fresh=fresh)


def test_list_shows_a_table_newest_first(seeded: Seeded) -> None:
    result = seeded.invoke("list")
    assert result.exit_code == 0, result.output
    assert seeded.done in result.stdout and seeded.fresh in result.stdout
    assert result.stdout.index(seeded.fresh) < result.stdout.index(seeded.done)
    for text in ("ANALYST", "SUMMARIZE", "TRANSLATE", "CO", "ST", "12/5", "0.0042", "2025-03-01"):
        assert text in result.stdout
    assert "of 2" in result.stdout


def test_list_json_has_items_and_total(seeded: Seeded) -> None:
    result = seeded.invoke("list", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert (document["total"], document["limit"], document["offset"]) == (2, 50, 0)
    assert [c["uuid"] for c in document["items"]] == [seeded.fresh, seeded.done]
    done = document["items"][1]
    assert (done["status"], done["finish_reason"], done["agent_code"]) == ("CO", "ST", "ANALYST")
    assert (done["input_tokens"], done["output_tokens"]) == (12, 5)
    assert Decimal(done["estimated_cost"]) == Decimal("0.0042")


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (["--agent", "ANALYST"], ["done"]),
        (["--action", "TRANSLATE"], ["fresh"]),
        (["--status", "CO"], ["done"]),
        (["--status", "not_started"], ["fresh"]),
        (["--since", "2025-03-02"], ["fresh"]),
        (["--until", "2025-03-02T00:00:00+00:00"], ["done"]),
        (["--since", "2025-03-01", "--until", "2025-03-06"], ["fresh", "done"]),
        (["--limit", "1"], ["fresh"]),
        (["--limit", "1", "--offset", "1"], ["done"]),
        (["--agent", "NOBODY"], []),
    ],
)
def test_list_filters(seeded: Seeded, options: list[str], expected: list[str]) -> None:
    result = seeded.invoke("list", "--json", *options)
    assert result.exit_code == 0, result.output
    uuids = [c["uuid"] for c in json.loads(result.stdout)["items"]]
    assert uuids == [getattr(seeded, name) for name in expected]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--status", "XX"], "--status: unknown status 'XX'"),
        (["--since", "yesterday"], "--since: 'yesterday' is not an ISO 8601"),
        (["--until", "soon"], "--until: 'soon' is not an ISO 8601"),
    ],
)
def test_list_refuses_bad_options_with_one_line(
    seeded: Seeded, options: list[str], message: str
) -> None:
    result = seeded.invoke("list", *options)
    assert result.exit_code == 2
    assert message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_show_prints_transcript_tokens_cost_and_timeline(seeded: Seeded) -> None:
    result = seeded.invoke("show", seeded.done)
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in (
        seeded.done,
        "CO (completed)",
        "in 12 / out 5",
        "0.0042",
        "test-model",
        "Summarize [bold]this[/]",  # user text is shown as typed, not as markup
        "a.txt",
        "It is sunny in Paris.",
        "get_weather",
        '{"city": "Paris"}',
        "status_change",
        "request",
    ):
        assert text in out, text


def test_show_json_is_one_object_with_messages_tool_calls_and_timeline(seeded: Seeded) -> None:
    result = seeded.invoke("show", seeded.done, "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    assert document["uuid"] == seeded.done
    assert {"status", "finish_reason", "input_tokens", "output_tokens", "estimated_cost"} <= set(
        document
    )
    assert [(m["sequence"], m["role"]) for m in document["messages"]] == [
        (1, "US"),
        (2, "AS"),
        (3, "TO"),
        (4, "AS"),
    ]
    assert document["messages"][0]["content"] == "Summarize [bold]this[/]"
    assert document["messages"][0]["attachments"][0]["size"] == 3
    assert document["tool_calls"][0]["name"] == "get_weather"
    assert [e["kind"] for e in document["timeline"]] == ["status_change", "request"]


def test_show_of_an_empty_conversation(seeded: Seeded) -> None:
    result = seeded.invoke("show", seeded.fresh)
    assert result.exit_code == 0, result.output
    assert "no messages" in result.stdout
    assert "NS (not_started)" in result.stdout


def test_show_unknown_uuid_exits_2_with_one_line(seeded: Seeded) -> None:
    result = seeded.invoke("show", "no-such-uuid")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: conversation 'no-such-uuid' not found"


def test_show_of_another_tenants_conversation_is_not_found(seeded: Seeded) -> None:
    result = runner.invoke(
        app,
        ["--database-url", seeded.url, "--tenant", "someone-else", "conversations", "show"]
        + [seeded.done],
    )
    assert result.exit_code == 2
    assert result.stderr.strip() == f"error: conversation '{seeded.done}' not found"


def test_unreachable_database_exits_2_without_the_password() -> None:
    result = runner.invoke(
        app,
        [
            "--database-url",
            "postgresql+asyncpg://user:hunter2@127.0.0.1:1/none",
            "conversations",
            "list",
        ],
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: database postgresql+asyncpg://user:***@127.0.0.1:1")
    assert "hunter2" not in result.output
