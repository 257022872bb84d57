"""`pilothouse conversations recover`: stuck conversations retried or failed."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

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


class _Gate:
    """An OpenAI-compatible upstream on loopback that counts the requests it holds at once.

    While ``hold`` is set each request waits (up to ``patience`` seconds)
    until that many are held together, then all are answered: requests sent
    one after another are each answered after the wait, and the most held at
    once says how many were sent together.
    """

    def __init__(self) -> None:
        import asyncio
        import threading

        self.hold = 0
        self.patience = 5.0
        self.held = 0
        self.most = 0
        self._loop = asyncio.new_event_loop()
        self._all_in = asyncio.Event()
        ready = threading.Event()
        self.port = 0

        async def start() -> asyncio.Server:
            server = await asyncio.start_server(self._answer, "127.0.0.1", 0)
            self.port = server.sockets[0].getsockname()[1]
            ready.set()
            return server

        def run() -> None:
            server = self._loop.run_until_complete(start())
            self._loop.run_forever()
            server.close()
            self._loop.run_until_complete(server.wait_closed())
            self._loop.close()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        ready.wait(10)

    async def _answer(self, reader: Any, writer: Any) -> None:
        import asyncio
        import json

        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
        self.held += 1
        self.most = max(self.most, self.held)
        if self.hold and self.held >= self.hold:
            self._all_in.set()
        if self.hold:
            try:
                await asyncio.wait_for(self._all_in.wait(), self.patience)
            except TimeoutError:
                pass
        self.held -= 1
        body = json.dumps(
            {
                "id": "c1",
                "object": "chat.completion",
                "created": 1,
                "model": "mock",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "recovered"},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
            }
        ).encode()
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n"
            + f"Content-Length: {len(body)}\r\n\r\n".encode()
            + body
        )
        await writer.drain()
        writer.close()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


_GATE_CATALOG = """\
providers:
  - code: GTP
    kind: openai-compatible
    base_url: http://127.0.0.1:{port}/v1
models:
  - code: GTM
    provider: GTP
    model_name: mock
configurations:
  - code: GTC
    max_tokens: 16
    retry_count: 0
actions:
  - code: GATEA
    name: Answer
    model: GTM
    configuration: GTC
    prompt: Answer.
    ask_user: false
"""


async def _answered_then_orphaned(url: str, folder: Any, port: int, count: int) -> list[str]:
    """``count`` answered conversations, then left RU by a process that has exited."""
    import socket

    from pilothouse.api import Pilothouse
    from pilothouse.settings import Settings

    catalog = folder / "gate.yaml"
    catalog.write_text(_GATE_CATALOG.format(port=port))
    async with Pilothouse(Settings(database_url=url, secrets_file=None)) as ph:
        await ph.catalog.import_files([catalog])
        answered = [
            await ph.command.start_and_send(action="GATEA", text=f"question {n}")
            for n in range(count)
        ]
        uuids = [result.conversation_uuid for result in answered]
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    db = Database(url)
    try:
        async with db.sessions.begin() as session:
            await session.execute(
                insert(TurnOwner).values(
                    id="gone-owner", host=socket.gethostname(), pid=child.pid, started_at=utcnow()
                )
            )
            await session.execute(
                update(Conversation)
                .where(Conversation.uuid.in_(uuids))
                .values(status=ProcessStatus.RUNNING, owner="gone-owner")
            )
    finally:
        await db.dispose()
    return uuids


def test_recover_all_retry_with_concurrency_retries_that_many_at_once(
    database_url: str, tmp_path: Any
) -> None:
    from pilothouse.testing import allow_model_requests

    gate = _Gate()
    try:
        with allow_model_requests():
            uuids = anyio.run(_answered_then_orphaned, database_url, tmp_path, gate.port, 3)
            gate.hold, gate.most = 3, 0
            done = runner.invoke(
                app,
                [
                    "--database-url",
                    database_url,
                    "conversations",
                    "recover",
                    "--all",
                    "--retry",
                    "--concurrency",
                    "3",
                ],
            )
        assert done.exit_code == 0, done.output
        for uuid in uuids:
            assert f"{uuid}: retried, now CO" in done.output
        # The three retried turns' model calls were in flight together.
        assert gate.most == 3
        assert set(anyio.run(_statuses, database_url).values()) == {ProcessStatus.COMPLETED}
    finally:
        gate.close()


def test_recover_names_a_conversation_it_cannot_recover_and_still_recovers_the_others(
    database_url: str,
) -> None:
    uuids = anyio.run(_left_running, database_url, 2)
    done = runner.invoke(
        app,
        ["--database-url", database_url, "conversations", "recover", "--fail", "nowhere", *uuids],
    )
    assert done.exit_code == 2
    assert "nowhere: not recovered:" in done.output
    for uuid in uuids:
        assert f"{uuid}: recorded FA" in done.output
