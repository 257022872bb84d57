"""`pilothouse conversations recover`: stuck conversations retried or failed."""

from __future__ import annotations

import subprocess
import sys

import anyio
import pytest
from sqlalchemy import insert, update
from typer.testing import CliRunner

from pilothouse.catalog._enums import ProcessStatus
from pilothouse.cli import app
from pilothouse.store import Conversation, Database, SqlTurnStore
from pilothouse.store._base import utcnow
from pilothouse.store._records import TurnOwner

runner = CliRunner()


async def _left_running(url: str, count: int) -> list[str]:
    """Conversations left RU by a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    db = Database(url)
    try:
        await db.ensure_schema()
        writer = SqlTurnStore(db)
        uuids = [
            (await writer.create("default", action_code="SUMMARIZE", agent_code=None)).uuid
            for _ in range(count)
        ]
        import socket

        async with db.sessions.begin() as session:
            await session.execute(
                insert(TurnOwner).values(
                    id="dead-owner",
                    host=socket.gethostname(),
                    pid=child.pid,
                    started_at=utcnow(),
                )
            )
            await session.execute(
                update(Conversation)
                .where(Conversation.uuid.in_(uuids))
                .values(status=ProcessStatus.RUNNING, owner="dead-owner")
            )
        return uuids
    finally:
        await db.dispose()


async def _statuses(url: str) -> dict[str, ProcessStatus]:
    db = Database(url)
    try:
        async with db.sessions() as session:
            rows = await session.execute(
                Conversation.__table__.select().with_only_columns(
                    Conversation.uuid, Conversation.status
                )
            )
            return {uuid: status for uuid, status in rows}
    finally:
        await db.dispose()


def test_recover_fail_marks_orphans_stuck_then_failed(database_url: str) -> None:
    uuids = anyio.run(_left_running, database_url, 2)
    done = runner.invoke(
        app, ["--database-url", database_url, "conversations", "recover", "--all", "--fail"]
    )
    assert done.exit_code == 0, done.output
    for uuid in uuids:
        assert f"{uuid}: marked ST" in done.output
        assert f"{uuid}: recorded FA" in done.output
    assert set(anyio.run(_statuses, database_url).values()) == {ProcessStatus.FAILED}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--all"], "--retry (call the model again) or --fail"),
        (["--fail"], "name the conversations to recover, or give --all"),
        (["x", "--all", "--fail"], "not both"),
    ],
)
def test_recover_refuses_an_incomplete_order_with_exit_2(
    database_url: str, args: list[str], message: str
) -> None:
    done = runner.invoke(app, ["--database-url", database_url, "conversations", "recover", *args])
    assert done.exit_code == 2
    assert message in done.output


def test_recover_of_a_conversation_that_is_not_stuck_exits_2_naming_it(database_url: str) -> None:
    uuids = anyio.run(_left_running, database_url, 1)
    first = runner.invoke(
        app, ["--database-url", database_url, "conversations", "recover", uuids[0], "--fail"]
    )
    assert first.exit_code == 0, first.output
    again = runner.invoke(
        app, ["--database-url", database_url, "conversations", "recover", uuids[0], "--fail"]
    )
    assert again.exit_code == 2
    assert uuids[0] in again.output
