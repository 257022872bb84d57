"""``run_action`` through real brokers: run concurrently, in order per memory, and after a crash.

tansu (Kafka protocol) and NATS JetStream, each on a free loopback port
(``event_brokers``). The concurrency test runs the service in this process
with a model that counts its calls in flight; the crash tests run
``pilothouse events``'s service as a subprocess (``event_process.py
actions``), kill it with SIGKILL while its model call runs and start it
again.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest
from action_models import CATALOG, Tally, tally_model
from event_brokers import Broker
from sqlalchemy import select

from pilothouse.api import Pilothouse
from pilothouse.events import Bus, EventService, RunAction, encode, open_bus
from pilothouse.settings import Settings
from pilothouse.store import Conversation, Database, EventProcessed
from pilothouse.types import ProcessStatus

pytestmark = [pytest.mark.anyio, pytest.mark.real]

HERE = Path(__file__).resolve().parent


@pytest.fixture(params=["kafka", "nats"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    started = Broker(str(request.param), tmp_path)
    started.start()
    yield started
    started.stop()


def bus_of(broker: Broker) -> Bus:
    if broker.kind != "nats":
        return open_bus(broker.url, session_timeout=6.0)
    return open_bus(broker.url, ack_wait=5.0)


async def read_answers(bus: Bus, topic: str, into: list[dict[str, Any]]) -> None:
    # aclosing: the cancelled reader leaves its group now, not at collection.
    async with aclosing(bus.consume(topic, "caller")) as stream:
        async for delivery in stream:
            into.append(json.loads(delivery.value))
            await delivery.ack()


async def test_run_actions_run_concurrently_and_in_order_within_one_memory(
    broker: Broker, tmp_path: Path
) -> None:
    tally = Tally()
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    bus, caller = bus_of(broker), bus_of(broker)
    answers: list[dict[str, Any]] = []
    memories, each = 4, 3
    async with Pilothouse(settings, model=tally_model(tally)) as ph:
        await ph.catalog.import_text(CATALOG)
        service = EventService(ph, bus, action_topic="actions-c", concurrency=4)
        try:
            async with anyio.create_task_group() as group:
                await group.start(service.run)
                group.start_soon(read_answers, caller, "answers-c", answers)
                for index in range(each):
                    for memory in range(memories):
                        command = RunAction(
                            action="ECHO",
                            input=f"m{memory}#{index}",
                            memory_id=f"m{memory}",
                            correlation_id=f"c-{memory}-{index}",
                            reply_to="answers-c",
                        )
                        # Keyed by the memory: Kafka keeps order within a partition.
                        await caller.publish("actions-c", encode(command), key=f"m{memory}")
                with anyio.fail_after(120):
                    while len(answers) < memories * each:
                        await anyio.sleep(0.1)
                group.cancel_scope.cancel()
        finally:
            await bus.close()
            await caller.close()
    assert sorted(a["correlationId"] for a in answers) == sorted(
        f"c-{m}-{i}" for m in range(memories) for i in range(each)
    )
    assert all((a["status"], a["final"]) == ("CO", True) for a in answers)
    # More than one model call at once, never two of one memory, each memory in order.
    assert tally.most > 1, f"at most {tally.most} model call in flight"
    assert tally.most_per_memory == 1
    assert dict(tally.order) == {f"m{m}": list(range(each)) for m in range(memories)}


def start_actions_process(
    url: str, broker: Broker, topic: str, log: Path, *, hang: bool
) -> subprocess.Popen[str]:
    environment = {**os.environ, "EVENT_PROCESS_LOG": str(log)}
    if hang:
        environment["EVENT_MODEL_HANG"] = "1"
    process = subprocess.Popen(
        [sys.executable, str(HERE / "event_process.py"), "actions", url, broker.url, topic],
        stdout=subprocess.PIPE,
        text=True,
        env=environment,
    )
    return process


async def wait_ready(process: subprocess.Popen[str]) -> None:
    assert process.stdout is not None
    line = await anyio.to_thread.run_sync(process.stdout.readline)
    assert json.loads(line) == {"ready": True}


async def kill_9(process: subprocess.Popen[str]) -> None:
    process.send_signal(signal.SIGKILL)
    await anyio.to_thread.run_sync(process.wait)


async def wait_for(db: Database, uuid: str, *, status: ProcessStatus, marked: bool) -> None:
    """Until the conversation has ``status`` (and, with ``marked``, was taken over once)."""
    with anyio.fail_after(90):
        while True:
            async with db.sessions() as session:
                found = await session.scalar(
                    select(Conversation.status).where(Conversation.uuid == uuid)
                )
                mark = await session.scalar(
                    select(EventProcessed.outcome).where(EventProcessed.correlation_id == uuid)
                )
            if found is status and (mark is not None) is marked:
                return
            await anyio.sleep(0.1)


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[tuple[str, Database]]:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    async with Pilothouse(Settings(database_url=url)) as ph:
        await ph.catalog.import_text(CATALOG)
    db = Database(url)
    try:
        yield url, db
    finally:
        await db.dispose()


async def _crash_run(
    broker: Broker, tmp_path: Path, database: tuple[str, Database], crashes: int
) -> list[dict[str, Any]]:
    """Kill the process in a run_action's model call ``crashes`` times; then one that answers."""
    url, db = database
    caller = bus_of(broker)
    answers: list[dict[str, Any]] = []
    processes: list[subprocess.Popen[str]] = []
    log = tmp_path / "event_process.log"
    try:
        async with anyio.create_task_group() as group:
            group.start_soon(read_answers, caller, "answers-k", answers)
            first = start_actions_process(url, broker, "actions-k", log, hang=True)
            processes.append(first)
            await wait_ready(first)
            command = RunAction(
                action="ECHO", input="hello", correlation_id="crash-1", reply_to="answers-k"
            )
            await caller.publish("actions-k", encode(command))
            uuid = await _conversation_of_action(db)
            await wait_for(db, uuid, status=ProcessStatus.RUNNING, marked=False)
            await kill_9(first)
            if crashes == 2:
                # The restarted process takes it over and crashes in its model call too.
                second = start_actions_process(url, broker, "actions-k", log, hang=True)
                processes.append(second)
                await wait_ready(second)
                await wait_for(db, uuid, status=ProcessStatus.RUNNING, marked=True)
                await kill_9(second)
            last = start_actions_process(url, broker, "actions-k", log, hang=False)
            processes.append(last)
            await wait_ready(last)
            with anyio.fail_after(120):
                while not answers:
                    await anyio.sleep(0.1)
            # Long enough for a redelivered run_action (NATS ack_wait 5 s) to
            # be handled: it must not be answered again.
            await anyio.sleep(6.0)
            group.cancel_scope.cancel()
    finally:
        for process in processes:
            if process.poll() is None:
                process.terminate()
                process.wait(15)
            if process.stdout is not None:
                process.stdout.close()
        await caller.close()
    return answers


async def _conversation_of_action(db: Database) -> str:
    with anyio.fail_after(60):
        while True:
            async with db.sessions() as session:
                found = await session.scalar(select(Conversation.uuid))
            if found is not None:
                return found
            await anyio.sleep(0.1)


async def test_a_run_action_killed_mid_turn_is_run_again_on_restart_and_answered_once(
    broker: Broker, tmp_path: Path, database: tuple[str, Database]
) -> None:
    answers = await _crash_run(broker, tmp_path, database, crashes=1)
    assert [(a["correlationId"], a["status"], a["final"]) for a in answers] == [
        ("crash-1", "CO", True)
    ]
    assert answers[0]["output"] == "echo hello"


async def test_a_run_action_killed_twice_is_not_run_a_third_time_and_fails_with_the_reason(
    broker: Broker, tmp_path: Path, database: tuple[str, Database]
) -> None:
    answers = await _crash_run(broker, tmp_path, database, crashes=2)
    assert [(a["correlationId"], a["status"], a["final"]) for a in answers] == [
        ("crash-1", "FA", True)
    ]
    assert "stopped twice" in answers[0]["error"], answers[0]["error"]
