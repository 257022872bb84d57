"""A cancel another process takes while a turn is being prepared stops that turn.

Two runtimes on one database stand for two processes (two workers, or two
replicas): each is a lease owner of its own. While the worker checks and
compiles a turn, nothing of it is in the database yet, so the process that
gets the cancel finds no running turn and terminates the idle conversation
(``TE``). A terminated conversation takes new messages, so the turn then
took it and ran to the end: the cancel the user asked for was lost, and the
record said cancelled while a model call ran after it. The turn now ends
``TE`` with no model call, its cancel recorded; a message that arrives
after the cancel runs as usual.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy.util import await_only
from test_tool_loop import FakeSource, events, start, stored

from pilothouse.catalog._enums import MessageRole, ProcessStatus, TimelineKind
from pilothouse.errors import InvalidStateError
from pilothouse.runtime import Runner, TurnResult
from pilothouse.runtime._leasing import keep_lease
from pilothouse.store import (
    Database,
    NewMessage,
    OrmTurnStore,
    SqlTurnStore,
    TurnBatch,
    TurnStore,
)
from pilothouse.store import _ormstore as ormstore
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio

RunnerFactory = Callable[..., Runner]


async def cancel_while_prepared(
    runner: Runner,
    monkeypatch: pytest.MonkeyPatch,
    send: Callable[[], Awaitable[TurnResult]],
    cancel: Callable[[], Awaitable[bool]],
) -> tuple[TurnResult, bool]:
    """Run ``send`` with its turn held in its preparation while ``cancel`` runs.

    Returns:
        The turn's result and what the cancel answered.
    """
    preparing, go_on = anyio.Event(), anyio.Event()
    prepare = runner.prepare

    async def held(*args: Any, **kwargs: Any) -> Any:
        preparing.set()
        await go_on.wait()
        return await prepare(*args, **kwargs)

    monkeypatch.setattr(runner, "prepare", held)
    results: list[TurnResult] = []
    cancelled = False

    async def sent() -> None:
        results.append(await send())

    async with anyio.create_task_group() as group:
        group.start_soon(sent)
        await preparing.wait()
        # No wait for the end: held in its preparation, the turn cannot end yet.
        cancelled = await cancel()
        go_on.set()
    (result,) = results
    return result, cancelled


async def test_a_cancel_another_process_takes_while_the_turn_is_prepared_stops_it(
    catalog: Database, make_runner: RunnerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedModel([Reply("first answer"), Reply("too late")])
    worker = make_runner(model, tool_source=FakeSource({}))
    other = make_runner(ScriptedModel([]), tool_source=FakeSource({}))
    assert worker.runtime.leases.owner != other.runtime.leases.owner
    uuid = await start(catalog, "TOOLS")
    assert (await worker.send_message(uuid, "Hello")).status is ProcessStatus.COMPLETED
    result, cancelled = await cancel_while_prepared(
        worker,
        monkeypatch,
        lambda: worker.send_message(uuid, "Hi again"),
        lambda: other.cancel(uuid, wait=0),
    )
    # Nothing of the turn was written yet: no running turn to abort, so the
    # other process terminated the idle conversation.
    assert cancelled is False
    assert result.status is ProcessStatus.TERMINATED
    assert len(model.requests) == 1  # the first turn's; none after the cancel
    conversation, messages, _ = await stored(catalog, uuid)
    assert conversation.status is ProcessStatus.TERMINATED
    # The user's message is kept, with no answer after it.
    assert messages[-1].role is MessageRole.USER and messages[-1].content == "Hi again"
    timeline = await events(catalog, uuid)
    cancels = [event for event in timeline if event.kind is TimelineKind.CANCEL]
    # The other process's terminate, then the turn's own cancel, which says who asked.
    assert [event.data.get("running_here") for event in cancels] == [False, None]
    assert cancels[-1].data["requested_by"] == "another process"
    changes = [
        (event.data["from"], event.data["to"])
        for event in timeline
        if event.kind is TimelineKind.STATUS_CHANGE
    ]
    assert changes[-2:] == [("TE", "RU"), ("RU", "TE")]
    # No model request, nor any usage, after the first turn's.
    assert [event.kind for event in timeline].count(TimelineKind.REQUEST) == 1
    assert conversation.input_tokens == 10


async def test_a_message_that_arrives_after_another_processes_cancel_runs(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel([Reply("first answer"), Reply("after the cancel")])
    worker = make_runner(model, tool_source=FakeSource({}))
    other = make_runner(ScriptedModel([]), tool_source=FakeSource({}))
    uuid = await start(catalog, "TOOLS")
    await worker.send_message(uuid, "Hello")
    assert await other.cancel(uuid, wait=0) is False
    conversation, _, _ = await stored(catalog, uuid)
    assert conversation.status is ProcessStatus.TERMINATED
    result = await worker.send_message(uuid, "Go on")
    assert result.status is ProcessStatus.COMPLETED
    assert result.text == "after the cancel"
    conversation, messages, _ = await stored(catalog, uuid)
    assert conversation.status is ProcessStatus.COMPLETED
    assert messages[-1].content == "after the cancel"


@pytest.mark.parametrize("make_store", [OrmTurnStore, SqlTurnStore], ids=["orm", "sql"])
async def test_the_take_tells_a_cancel_since_the_message_arrived_from_one_before(
    catalog: Database, make_store: Callable[[Database], TurnStore]
) -> None:
    store = make_store(catalog)
    uuid = await start(catalog, "TOOLS")
    before = time.monotonic()
    cancel = await store.begin_turn("default", uuid, allowed={ProcessStatus.NOT_STARTED})
    await store.write(cancel, TurnBatch(status=ProcessStatus.TERMINATED, cancelled=True))
    after = time.monotonic()
    message = TurnBatch(messages=[NewMessage(MessageRole.USER, "Hi")])
    # Arrived before the cancel: taken, and told.
    taken = await store.begin_turn("default", uuid, first=message, arrived=before)
    assert taken.cancelled and taken.previous_status is ProcessStatus.TERMINATED
    await store.write(taken, TurnBatch(status=ProcessStatus.TERMINATED))
    # Arrived after it, or not a message's turn at all: not cancelled.
    taken = await store.begin_turn("default", uuid, first=message, arrived=after)
    assert not taken.cancelled
    await store.write(taken, TurnBatch(status=ProcessStatus.COMPLETED))
    assert not (await store.begin_turn("default", uuid)).cancelled


async def test_a_turn_that_takes_the_conversation_as_another_process_cancels_is_stopped(
    catalog: Database, make_runner: RunnerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The other process saw the conversation idle; the worker's turn took it
    # just after. The other process must not end the running turn's record
    # itself (two writers on one timeline, the turn running on): it asks
    # the worker to stop it, as for any turn the worker runs.
    calling, release = anyio.Event(), anyio.Event()

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calling.set()
        await release.wait()
        return ModelResponse(parts=[TextPart("too late")])

    worker = make_runner(FunctionModel(answer), tool_source=FakeSource({}))
    other = make_runner(ScriptedModel([]), tool_source=FakeSource({}))
    uuid = await start(catalog, "TOOLS")
    leases = other.runtime.leases
    running_owner = leases.running_owner
    results: list[TurnResult] = []

    async def send() -> None:
        results.append(await worker.send_message(uuid, "Hi"))

    async def seen_idle(tenant: str, conversation_uuid: str) -> tuple[bool, str | None]:
        # The check ran before the worker's take; the answer comes after it.
        monkeypatch.setattr(leases, "running_owner", running_owner)
        group.start_soon(send)
        await calling.wait()
        return False, None

    monkeypatch.setattr(leases, "running_owner", seen_idle)
    async with keep_lease(worker.runtime, poll_seconds=0.01), anyio.create_task_group() as group:
        assert await other.cancel(uuid) is True
        release.set()
    (result,) = results
    assert result.status is ProcessStatus.TERMINATED
    conversation, messages, _ = await stored(catalog, uuid)
    assert conversation.status is ProcessStatus.TERMINATED
    assert [message.content for message in messages if message.role is MessageRole.ASSISTANT] == []
    timeline = await events(catalog, uuid)
    assert [event.sequence for event in timeline] == list(range(1, len(timeline) + 1))
    (cancel,) = [event for event in timeline if event.kind is TimelineKind.CANCEL]
    assert cancel.data["requested_by"] == "another process"


async def test_a_cancel_of_a_terminated_conversation_stops_a_turn_still_being_prepared(
    catalog: Database, make_runner: RunnerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A terminated conversation (TE) takes new messages: its new message's
    # turn, still prepared by the worker, is cancelled through the other
    # process. The cancel was refused there ("was cancelled and is
    # finished") and the turn ran; it is recorded as for an idle
    # conversation, and the turn ends TE with no model call.
    model = ScriptedModel([Reply("first answer"), Reply("too late")])
    worker = make_runner(model, tool_source=FakeSource({}))
    other = make_runner(ScriptedModel([]), tool_source=FakeSource({}))
    uuid = await start(catalog, "TOOLS")
    assert (await worker.send_message(uuid, "Hello")).status is ProcessStatus.COMPLETED
    assert await other.cancel(uuid, wait=0) is False
    result, cancelled = await cancel_while_prepared(
        worker,
        monkeypatch,
        lambda: worker.send_message(uuid, "Hi again"),
        lambda: other.cancel(uuid, wait=0),
    )
    assert cancelled is False
    assert result.status is ProcessStatus.TERMINATED
    assert len(model.requests) == 1
    conversation, messages, _ = await stored(catalog, uuid)
    assert conversation.status is ProcessStatus.TERMINATED
    assert messages[-1].role is MessageRole.USER and messages[-1].content == "Hi again"
    timeline = await events(catalog, uuid)
    assert [event.sequence for event in timeline] == list(range(1, len(timeline) + 1))
    cancels = [event for event in timeline if event.kind is TimelineKind.CANCEL]
    # Both cancels of the other process are recorded, then the turn's own.
    assert [event.data.get("running_here") for event in cancels] == [False, False, None]
    assert cancels[-1].data["requested_by"] == "another process"
    assert [event.kind for event in timeline].count(TimelineKind.REQUEST) == 1


@pytest.mark.parametrize("status", [ProcessStatus.FAILED, ProcessStatus.KILLED])
async def test_a_cancel_of_a_finished_conversation_is_refused(
    catalog: Database, make_runner: RunnerFactory, status: ProcessStatus
) -> None:
    store = SqlTurnStore(catalog)
    uuid = await start(catalog, "TOOLS")
    taken = await store.begin_turn("default", uuid)
    await store.write(taken, TurnBatch(status=status))
    with pytest.raises(InvalidStateError, match="is finished; start a new conversation"):
        await make_runner(ScriptedModel([])).cancel(uuid, wait=0)
    conversation, _, _ = await stored(catalog, uuid)
    assert conversation.status is status


async def test_what_a_terminated_conversation_refuses_says_a_new_message_goes_on(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    uuid = await start(catalog, "TOOLS")
    assert await make_runner(ScriptedModel([])).cancel(uuid, wait=0) is False
    # Answers are for a waiting conversation: refused, saying what TE does take.
    with pytest.raises(InvalidStateError, match="was cancelled \\(TE\\); send it a new message"):
        await SqlTurnStore(catalog).begin_turn("default", uuid, allowed={ProcessStatus.WAITING})


# On PostgreSQL only: on SQLite the take holds the write lock from its read
# on, so nothing can commit between the two.
POSTGRES_ONLY = pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)


@POSTGRES_ONLY
@pytest.mark.parametrize("make_store", [OrmTurnStore, SqlTurnStore], ids=["orm", "sql"])
async def test_a_cancel_between_the_takes_read_and_its_write_ends_the_turn_cancelled(
    catalog: Database,
    make_store: Callable[[Database], TurnStore],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The take reads the conversation (and whether a cancel followed the
    # message), then takes it. A cancel another process commits in between
    # failed the take with "is running a turn" (nothing ran; it was
    # cancelled), or, from TE, let it take the conversation as if no cancel
    # came. The turn is taken and told it was cancelled, as when the read
    # sees the cancel.
    store = make_store(catalog)
    canceller = SqlTurnStore(catalog)
    uuid = await start(catalog, "TOOLS")
    arrived = time.monotonic()
    await cancel_between_read_and_take(store, canceller, uuid, monkeypatch)
    message = TurnBatch(messages=[NewMessage(MessageRole.USER, "Hi")])
    taken = await store.begin_turn("default", uuid, first=message, arrived=arrived)
    assert taken.cancelled and taken.previous_status is ProcessStatus.TERMINATED
    await store.write(taken, TurnBatch(status=ProcessStatus.TERMINATED))
    # From TE, again: a second cancel in the same place.
    arrived = time.monotonic()
    await cancel_between_read_and_take(store, canceller, uuid, monkeypatch)
    taken = await store.begin_turn("default", uuid, first=message, arrived=arrived)
    assert taken.cancelled and taken.previous_status is ProcessStatus.TERMINATED
    await store.write(taken, TurnBatch(status=ProcessStatus.TERMINATED))
    timeline = await events(catalog, uuid)
    assert [event.sequence for event in timeline] == list(range(1, len(timeline) + 1))
    _, messages, _ = await stored(catalog, uuid)
    assert [message.content for message in messages] == ["Hi", "Hi"]


@POSTGRES_ONLY
async def test_a_turn_between_the_takes_read_and_its_write_still_refuses_it(
    catalog: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Not a cancel: another turn took the conversation in between.
    store = SqlTurnStore(catalog)
    other = SqlTurnStore(catalog)
    uuid = await start(catalog, "TOOLS")

    async def take() -> None:
        await other.begin_turn("default", uuid)

    between_read_and_take(store, take, monkeypatch)
    with pytest.raises(InvalidStateError, match="is running a turn"):
        await store.begin_turn("default", uuid, arrived=time.monotonic())


def between_read_and_take(
    store: TurnStore, work: Callable[[], Awaitable[None]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run ``work`` once, committed, between the store's next read of a conversation and its take.

    PostgreSQL only: on SQLite the take's transaction holds the write lock
    from its read on, so nothing commits in between.
    """
    done = False
    if isinstance(store, SqlTurnStore):
        found = store._found

        def hooked(*args: Any) -> Any:
            nonlocal done
            row = found(*args)
            if not done:
                done = True
                # The read runs in a greenlet of SQLAlchemy's bridge: wait for the work there.
                await_only(work())
            return row

        monkeypatch.setattr(store, "_found", hooked)
        return
    conversation = ormstore._conversation

    async def read(*args: Any) -> Any:
        nonlocal done
        row = await conversation(*args)
        if not done:
            done = True
            await work()
        return row

    monkeypatch.setattr(ormstore, "_conversation", read)


async def cancel_between_read_and_take(
    store: TurnStore, canceller: TurnStore, uuid: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Have ``canceller`` terminate ``uuid`` as a cancel does, between ``store``'s read and take."""

    async def cancel() -> None:
        handle = await canceller.begin_turn(
            "default", uuid, allowed={ProcessStatus.NOT_STARTED, ProcessStatus.TERMINATED}
        )
        await canceller.write(handle, TurnBatch(status=ProcessStatus.TERMINATED, cancelled=True))

    between_read_and_take(store, cancel, monkeypatch)


async def test_a_cancel_again_is_recorded_and_keeps_the_time_the_conversation_ended(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    # A second cancel of a terminated conversation still marks it (a turn may
    # be prepared elsewhere) and is on the timeline, but ends nothing: the
    # conversation's end stays the first cancel's.
    worker = make_runner(ScriptedModel([Reply("first answer")]), tool_source=FakeSource({}))
    uuid = await start(catalog, "TOOLS")
    await worker.send_message(uuid, "Hello")
    assert await worker.cancel(uuid, wait=0) is False
    ended, _, _ = await stored(catalog, uuid)
    assert ended.status is ProcessStatus.TERMINATED and ended.finished_at is not None
    time.sleep(0.01)  # so a moved end would show on a clock of any resolution
    assert await worker.cancel(uuid, wait=0) is False
    again, _, _ = await stored(catalog, uuid)
    assert again.status is ProcessStatus.TERMINATED
    assert again.finished_at == ended.finished_at
    timeline = await events(catalog, uuid)
    assert [event.kind for event in timeline].count(TimelineKind.CANCEL) == 2
