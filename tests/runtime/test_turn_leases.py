"""Turn owners and leases: orphaned RU turns become ST, recovery, cancels across processes.

Two ``Pilothouse`` objects on one database stand for two processes: each
has an owner id of its own. A dead process is an owner row whose pid ran a
child that has exited (this host) or whose heartbeat is old (another host).
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

import anyio
import pytest
from sqlalchemy import insert, select, update

from pilothouse.api import Pilothouse
from pilothouse.catalog._enums import ProcessStatus, TimelineKind
from pilothouse.errors import InvalidStateError
from pilothouse.runtime import TextDelta, TurnEvent, TurnResult
from pilothouse.runtime._shared import RunningTurns
from pilothouse.settings import Settings
from pilothouse.store import Conversation, Database, TimelineEvent
from pilothouse.store._base import utcnow
from pilothouse.store._records import CancelRequest, TurnOwner
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


def _dead_pid() -> int:
    """The pid of a process that has exited."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


async def _orphan(
    db: Database, uuid: str, *, host: str, pid: int, heartbeat_age: float | None
) -> str:
    """Make ``uuid`` look left ``RU`` by an owner on ``host`` with ``pid``; returns its id."""
    owner = f"owner-{pid}-{host}"[:36]
    now = utcnow()
    async with db.sessions.begin() as session:
        await session.execute(
            insert(TurnOwner).values(
                id=owner,
                host=host,
                pid=pid,
                pid_start=None,
                started_at=now,
                heartbeat_at=None
                if heartbeat_age is None
                else now - timedelta(seconds=heartbeat_age),
            )
        )
        await session.execute(
            update(Conversation)
            .where(Conversation.uuid == uuid)
            .values(status=ProcessStatus.RUNNING, owner=owner)
        )
    return owner


async def _finished(ph: Pilothouse) -> str:
    conversation = await ph.command.start_conversation(action="SUMBRAND", agent="ANALYST")
    await ph.command.send_message(conversation.uuid, "Acme builds rockets.")
    return conversation.uuid


async def _status(ph: Pilothouse, uuid: str) -> ProcessStatus:
    return (await ph.query.get_conversation(uuid)).status


async def test_a_turn_names_its_process_as_the_conversations_owner(catalog: Database) -> None:
    async with Pilothouse(Settings(), database=catalog, model=ScriptedModel(["ok"])) as ph:
        uuid = await _finished(ph)
        async with catalog.sessions() as session:
            owner = await session.scalar(
                select(Conversation.owner).where(Conversation.uuid == uuid)
            )
            row = await session.get(TurnOwner, owner)
        assert row is not None
        assert row.pid == os.getpid()
    # A clean close gives the owner row up.
    async with catalog.sessions() as session:
        assert await session.get(TurnOwner, owner) is None


async def test_a_turn_left_running_by_a_dead_process_is_marked_stuck_at_lease_start(
    catalog: Database,
) -> None:
    import socket

    model = ScriptedModel(["first", "retried answer"])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        uuid = await _finished(ph)
        pid = _dead_pid()
        await _orphan(catalog, uuid, host=socket.gethostname(), pid=pid, heartbeat_age=1)
        async with ph.lease() as swept:
            assert [(s.uuid, s.tenant) for s in swept] == [(uuid, "default")]
            assert f"pid {pid}" in swept[0].reason
        stored = await ph.query.get_conversation(uuid)
        assert stored.status is ProcessStatus.STUCK
        assert stored.error_detail is not None and "conversations recover" in stored.error_detail
        timeline = (await ph.query.get_transcript(uuid)).timeline
        last = timeline[-1]
        assert last.kind is TimelineKind.STATUS_CHANGE
        assert (last.data["from"], last.data["to"]) == ("RU", "ST")


async def test_a_live_process_turn_is_not_swept(catalog: Database) -> None:
    slow = ScriptedModel([Reply("word " * 200, chunk_delay=0.01)])
    async with (
        Pilothouse(Settings(), database=catalog, model=slow) as first,
        Pilothouse(Settings(), database=catalog, model=ScriptedModel(["x"])) as second,
    ):
        conversation = await first.command.start_conversation(action="SUMBRAND")
        streaming = anyio.Event()

        def on_event(event: TurnEvent) -> None:
            if isinstance(event, TextDelta):
                streaming.set()

        first.subscribe(on_event, conversation_uuid=conversation.uuid)
        async with anyio.create_task_group() as group:
            group.start_soon(first.command.send_message, conversation.uuid, "go")
            await streaming.wait()
            # The same pid, alive: the other "process" is not presumed dead.
            assert await second.sweep_orphans() == []
            assert await _status(second, conversation.uuid) is ProcessStatus.RUNNING
        assert await _status(second, conversation.uuid) is ProcessStatus.COMPLETED


async def test_another_hosts_owner_is_dead_only_once_its_heartbeat_is_older_than_the_lease(
    catalog: Database,
) -> None:
    settings = Settings(lease_seconds=30)
    async with Pilothouse(settings, database=catalog, model=ScriptedModel(["a", "b", "c"])) as ph:
        fresh, stale, silent = [await _finished(ph) for _ in range(3)]
        await _orphan(catalog, fresh, host="elsewhere-a", pid=10, heartbeat_age=5)
        await _orphan(catalog, stale, host="elsewhere-b", pid=11, heartbeat_age=120)
        await _orphan(catalog, silent, host="elsewhere-c", pid=12, heartbeat_age=None)
        swept = await ph.sweep_orphans()
        assert [s.uuid for s in swept] == [stale]
        assert "no heartbeat since" in swept[0].reason
        assert await _status(ph, fresh) is ProcessStatus.RUNNING
        # Forced: the operator knows those processes are gone.
        forced = {s.uuid for s in await ph.sweep_orphans(force=True)}
        assert forced == {fresh, silent}


async def test_a_running_turn_without_owner_from_an_older_version_is_swept(
    catalog: Database,
) -> None:
    async with Pilothouse(Settings(), database=catalog, model=ScriptedModel(["ok"])) as ph:
        uuid = await _finished(ph)
        async with catalog.sessions.begin() as session:
            await session.execute(
                update(Conversation)
                .where(Conversation.uuid == uuid)
                .values(status=ProcessStatus.RUNNING, owner=None)
            )
        swept = await ph.sweep_orphans()
        assert [s.uuid for s in swept] == [uuid]
        assert "did not record the turn's owner" in swept[0].reason


async def test_recover_retry_runs_the_stuck_turn_again_and_fail_records_fa(
    catalog: Database,
) -> None:
    import socket

    model = ScriptedModel(["first", "first too", "retried answer"])
    async with Pilothouse(Settings(), database=catalog, model=model) as ph:
        retried, failed = await _finished(ph), await _finished(ph)
        for uuid in (retried, failed):
            await _orphan(
                catalog, uuid, host=socket.gethostname(), pid=_dead_pid(), heartbeat_age=None
            )
        assert len(await ph.sweep_orphans()) == 2
        result = await ph.command.recover(retried, retry=True)
        assert result is not None
        assert (result.status, result.output) == (ProcessStatus.COMPLETED, "retried answer")
        kinds = [e.kind for e in (await ph.query.get_transcript(retried)).timeline]
        assert TimelineKind.RECOVER in kinds
        assert await ph.command.recover(failed, retry=False) is None
        stored = await ph.query.get_conversation(failed)
        assert stored.status is ProcessStatus.FAILED
        assert stored.error_detail is not None and "recovered as failed" in stored.error_detail
        with pytest.raises(InvalidStateError, match="is in status|has failed"):
            await ph.command.recover(failed, retry=True)


async def test_a_cancel_handled_by_another_process_ends_the_turn_te_with_its_usage(
    catalog: Database,
) -> None:
    slow = ScriptedModel([Reply("word " * 300, chunk_delay=0.01, input_tokens=7)])
    async with (
        Pilothouse(Settings(), database=catalog, model=slow) as worker,
        Pilothouse(Settings(), database=catalog, model=ScriptedModel(["x"])) as other,
    ):
        conversation = await worker.command.start_conversation(action="SUMBRAND")
        streaming = anyio.Event()
        results: list[TurnResult] = []

        def on_event(event: TurnEvent) -> None:
            if isinstance(event, TextDelta):
                streaming.set()

        async def run() -> None:
            results.append(await worker.command.send_message(conversation.uuid, "go"))

        worker.subscribe(on_event, conversation_uuid=conversation.uuid)
        async with worker.lease(poll_seconds=0.05), anyio.create_task_group() as group:
            group.start_soon(run)
            await streaming.wait()
            # Not running in `other`: the request goes through the database.
            assert await other.command.cancel(conversation.uuid) is True
        assert results[0].status is ProcessStatus.TERMINATED
        stored = await other.query.get_conversation(conversation.uuid)
        assert stored.status is ProcessStatus.TERMINATED
        timeline = (await other.query.get_transcript(conversation.uuid)).timeline
        sequences = [e.sequence for e in timeline]
        assert sequences == list(range(1, len(sequences) + 1))
        # The cancel was recorded by the turn itself, not by the other process.
        cancels = [e for e in timeline if e.kind is TimelineKind.CANCEL]
        assert len(cancels) == 1 and "running_here" not in cancels[0].data
        assert cancels[0].data["requested_by"] == "another process"
        async with catalog.sessions() as session:
            assert list(await session.scalars(select(CancelRequest))) == []


async def test_a_cancel_asked_before_a_turn_began_does_not_cancel_it() -> None:
    turns = RunningTurns()
    asked = utcnow()
    await anyio.sleep(0.01)
    scope = turns.register("default", "c1")
    assert turns.cancel("default", "c1", requested_at=asked) is False
    assert not scope.cancel_called
    assert turns.cancel("default", "c1", requested_at=utcnow()) is True


async def test_an_idle_conversation_owned_by_a_dead_process_is_terminated_by_cancel(
    catalog: Database,
) -> None:
    import socket

    async with Pilothouse(Settings(), database=catalog, model=ScriptedModel(["ok"])) as ph:
        uuid = await _finished(ph)
        await _orphan(catalog, uuid, host=socket.gethostname(), pid=_dead_pid(), heartbeat_age=1)
        assert await ph.command.cancel(uuid) is False
        assert await _status(ph, uuid) is ProcessStatus.TERMINATED
        async with catalog.sessions() as session:
            events = list(
                await session.scalars(select(TimelineEvent.kind).order_by(TimelineEvent.id))
            )
        assert TimelineKind.CANCEL in events
