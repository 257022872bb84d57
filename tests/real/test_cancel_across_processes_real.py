"""A cancel another process takes while a turn is prepared, on a real PostgreSQL.

Two ``Pilothouse`` objects on one PostgreSQL database stand for two
replicas (each a lease owner of its own). The worker holds a turn in its
preparation, before anything of it is written; the other replica gets the
cancel, finds nothing running and terminates the idle conversation. The
turn must then end ``TE`` with no model call, rather than take the
terminated conversation and run: the database's clock orders the cancel
and the message's arrival, whatever the processes' clocks say. A message
that arrives after the cancel runs.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from pilothouse.api import Pilothouse
from pilothouse.catalog._enums import MessageRole, ProcessStatus, TimelineKind
from pilothouse.runtime import Runner, TurnResult
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel

pytestmark = [pytest.mark.anyio, pytest.mark.real, pytest.mark.postgres]

CATALOG = CatalogBuilder().action("SAY", prompt="Say it.", ask_user=False)


def hold_preparation(
    worker: Pilothouse, monkeypatch: pytest.MonkeyPatch
) -> tuple[anyio.Event, anyio.Event]:
    """Hold the worker's turns in their preparation: (preparing, go on)."""
    preparing, go_on = anyio.Event(), anyio.Event()
    runtime = worker._shared.runtime()
    prepare = Runner.prepare

    async def held(self: Runner, *args: Any, **kwargs: Any) -> Any:
        if self.runtime is runtime:
            preparing.set()
            await go_on.wait()
        return await prepare(self, *args, **kwargs)

    monkeypatch.setattr(Runner, "prepare", held)
    return preparing, go_on


async def test_a_cancel_on_another_replica_stops_a_turn_still_being_prepared(
    postgres_database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedModel([Reply("first answer", input_tokens=10), Reply("too late")])
    settings = Settings(database_url=postgres_database_url)
    async with (
        Pilothouse(settings, model=model) as worker,
        Pilothouse(settings, model=ScriptedModel([])) as other,
    ):
        await CATALOG.import_into(worker)
        first = await worker.command.start_and_send("Hello", action="SAY")
        uuid = first.conversation_uuid
        assert first.status is ProcessStatus.COMPLETED
        preparing, go_on = hold_preparation(worker, monkeypatch)
        results: list[TurnResult] = []

        async def send() -> None:
            results.append(await worker.command.send_message(uuid, "Hi again"))

        async with anyio.create_task_group() as group:
            group.start_soon(send)
            await preparing.wait()
            # Nothing of the turn is written: the other replica terminates the idle conversation.
            assert await other.command.cancel(uuid) is False
            go_on.set()
        (result,) = results
        assert result.status is ProcessStatus.TERMINATED
        assert len(model.requests) == 1
        stored = await other.query.get_conversation(uuid)
        assert stored.status is ProcessStatus.TERMINATED
        assert stored.input_tokens == 10
        transcript = await other.query.get_transcript(uuid)
        last = transcript.messages[-1]
        assert last.role is MessageRole.USER and last.content == "Hi again"
        timeline = transcript.timeline
        cancels = [event for event in timeline if event.kind is TimelineKind.CANCEL]
        assert [event.data.get("running_here") for event in cancels] == [False, None]
        assert cancels[-1].data["requested_by"] == "another process"
        assert [event.kind for event in timeline].count(TimelineKind.REQUEST) == 1
        assert timeline[-1].kind is TimelineKind.STATUS_CHANGE
        assert timeline[-1].data == {"from": "RU", "to": "TE"}


async def test_a_message_after_a_cancel_on_another_replica_runs(
    postgres_database_url: str,
) -> None:
    model = ScriptedModel([Reply("first answer"), Reply("after the cancel")])
    settings = Settings(database_url=postgres_database_url)
    async with (
        Pilothouse(settings, model=model) as worker,
        Pilothouse(settings, model=ScriptedModel([])) as other,
    ):
        await CATALOG.import_into(worker)
        uuid = (await worker.command.start_and_send("Hello", action="SAY")).conversation_uuid
        assert await other.command.cancel(uuid) is False
        assert (await worker.query.get_conversation(uuid)).status is ProcessStatus.TERMINATED
        result = await worker.command.send_message(uuid, "Go on")
        assert result.status is ProcessStatus.COMPLETED
        assert result.text == "after the cancel"
