"""Bad and poison messages through real brokers: NATS JetStream, and tansu (Kafka protocol).

- ``pilothouse events`` (the CLI process) on PostgreSQL: a ``run_action``
  with a 100-character ``memoryId`` (which PostgreSQL's ``varchar(64)``
  refused, stopping the process, again after every restart), one with
  ``input: 42`` and one with an unknown field are each answered ``FA``
  naming the field, and the next valid one is run by the same process;
- through each broker, a completion whose handling raises is handed back
  (NATS: ``nak``; Kafka: a seek back to it) and, after ``max_deliver``
  deliveries, published on ``agent-events.dlq``; completions with an extra
  ``timestamp`` and in seed 002's echo shape are applied.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import aclosing, contextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from event_brokers import Broker
from fault_upstream import Reply, Upstream, completion, running_upstream

from pilothouse.api import Pilothouse
from pilothouse.events import Bus, EventService, open_bus
from pilothouse.settings import Settings
from pilothouse.types import ProcessStatus

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "events"))
_shared = importlib.import_module("event_catalog")
CATALOG: str = _shared.CATALOG
order_model = _shared.order_model

pytestmark = [pytest.mark.anyio, pytest.mark.real]

CLI = [sys.executable, "-c", "from pilothouse.cli import main; main()"]


@pytest.fixture
def nats(tmp_path: Path) -> Iterator[Broker]:
    started = Broker("nats", tmp_path)
    started.start()
    yield started
    started.stop()


@pytest.fixture(params=["nats", "kafka"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    started = Broker(str(request.param), tmp_path)
    started.start()
    yield started
    started.stop()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        up.script(Reply(body=completion("internal answer")))
        yield up


def ask_catalog(base_url: str) -> dict[str, Any]:
    """An action on an OpenAI-compatible provider at ``base_url``."""
    return {
        "providers": [{"code": "UP", "kind": "openai-compatible", "base_url": base_url}],
        "models": [{"code": "UPMODEL", "provider": "UP", "model_name": "mock"}],
        "configurations": [{"code": "ONCE", "max_tokens": 64, "retry_count": 0}],
        "actions": [
            {
                "code": "ASK",
                "name": "Ask",
                "model": "UPMODEL",
                "configuration": "ONCE",
                "prompt": "Answer.",
                "ask_user": False,
            }
        ],
    }


@contextmanager
def events_process(
    tmp_path: Path, database_url: str, bus_url: str
) -> Iterator[subprocess.Popen[bytes]]:
    """``pilothouse events`` consuming ``acts``, until the block ends."""
    log = tmp_path / "events.log"
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PILOTHOUSE_")}
    # The provider is on loopback: allowed, as an operator would for it.
    environment["PILOTHOUSE_EGRESS_ALLOW"] = "127.0.0.0/8"
    args = ["--database-url", database_url, "events", "--bus", bus_url, "--action-topic", "acts"]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*CLI, *args], stdout=out, stderr=subprocess.STDOUT, env=environment
        )
    try:
        yield process
    finally:
        process.terminate()
        try:
            process.wait(15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


async def read(bus: Bus, topic: str, count: int, timeout: float = 60) -> list[bytes]:
    """The first ``count`` messages on ``topic``."""
    found: list[bytes] = []
    with anyio.fail_after(timeout):
        async with aclosing(bus.consume(topic, "reader")) as stream:
            async for delivery in stream:
                await delivery.ack()
                found.append(delivery.value)
                if len(found) == count:
                    return found
    raise AssertionError(f"{len(found)} of {count} messages on {topic}")


def run_action(correlation_id: str, **fields: Any) -> bytes:
    message = {"action": "ASK", "input": "Hi", "correlationId": correlation_id}
    return json.dumps({**message, "replyTo": "replies", **fields}).encode()


@pytest.mark.postgres
async def test_bad_run_actions_are_answered_failed_and_the_process_goes_on(
    tmp_path: Path, nats: Broker, postgres_database_url: str, upstream: Upstream
) -> None:
    async with Pilothouse(Settings(database_url=postgres_database_url)) as operator:
        await operator.catalog.import_documents([ask_catalog(upstream.base_url)])
    bus = open_bus(nats.url)
    try:
        await bus.publish("acts", run_action("long-memory", memoryId="m" * 100))
        await bus.publish("acts", run_action("number", input=42))
        await bus.publish("acts", run_action("extra", priority="high"))
        await bus.publish("acts", run_action("valid", memoryId="client-7"))
        with events_process(tmp_path, postgres_database_url, nats.url) as process:
            answers = {
                answer["correlationId"]: answer
                for answer in map(json.loads, await read(bus, "replies", 4))
            }
            # Still running: the bad messages stopped nothing.
            assert process.poll() is None
    finally:
        await bus.close()
    assert answers["long-memory"]["status"] == "FA"
    assert answers["long-memory"]["error"] == (
        "invalid_input: memoryId: String should have at most 64 characters"
    )
    assert answers["number"]["status"] == "FA"
    assert answers["number"]["error"] == (
        "invalid_input: input: must be text or an object of the prompt's placeholders, not 42"
    )
    assert answers["extra"]["status"] == "FA"
    assert answers["extra"]["error"].startswith("invalid_input: priority: unknown field; remove it")
    assert (answers["valid"]["status"], answers["valid"]["output"]) == ("CO", "internal answer")
    assert len(upstream.requests) == 1


@pytest.fixture
async def ph(tmp_path: Path) -> AsyncIterator[Pilothouse]:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    async with Pilothouse(settings, model=order_model()) as facade:
        await facade.catalog.import_text(CATALOG)
        yield facade


async def test_a_poison_completion_is_dead_lettered_and_tolerant_completions_are_applied(
    broker: Broker, ph: Pilothouse, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = await ph.command.start_and_send("A-17", action="ORDERS")
    second = await ph.command.start_and_send("A-18", action="ORDERS")
    attempts: list[str] = []
    complete = type(ph.events).complete

    async def poisoned(self: Any, correlation_id: str, **kwargs: Any) -> Any:
        # Stands for what a database error or a bug does: the handler raises.
        attempts.append(correlation_id)
        if correlation_id == "poison":
            raise RuntimeError("the handler broke")
        return await complete(self, correlation_id, **kwargs)

    monkeypatch.setattr(type(ph.events), "complete", poisoned)
    if broker.kind == "nats":
        # With a 60 s ack wait, only the nak brings the poison back in time.
        bus = open_bus(broker.url, ack_wait=60.0)
    else:
        # tansu: a new group member joins in about half the session timeout;
        # the poison comes back by the consumer's seek, counted by the process.
        bus = open_bus(broker.url, session_timeout=6.0)
    poison = b'{"correlationId": "poison", "result": 1}'
    extra = {
        "type": "SkillCompletionEvent",
        "correlationId": first.tool_calls[0].correlation_id,
        "result": "shipped",
        "timestamp": "2026-12-06T08:00:00Z",
    }
    echo = {
        "correlationId": second.tool_calls[0].correlation_id,
        "skillName": "lookup_order",
        "result": "packed",
    }
    dead = b""
    try:
        await bus.publish("agent-events", poison)
        await bus.publish("agent-events", json.dumps(extra).encode())
        await bus.publish("agent-events", json.dumps(echo).encode())
        service = EventService(ph, bus, max_deliver=3)
        async with anyio.create_task_group() as group:
            await group.start(service.run)
            (dead,) = await read(bus, "agent-events.dlq", 1, timeout=60)
            with anyio.fail_after(60):
                for waiting in (first, second):
                    uuid = waiting.conversation_uuid
                    while (await ph.query.get_conversation(uuid)).status is not (
                        ProcessStatus.COMPLETED
                    ):
                        await anyio.sleep(0.05)
            group.cancel_scope.cancel()
    finally:
        await bus.close()
    assert dead == poison
    assert attempts.count("poison") == 3
    for waiting, result in ((first, "shipped"), (second, "packed")):
        (call,) = (await ph.query.get_transcript(waiting.conversation_uuid)).tool_calls
        assert call.result == result
