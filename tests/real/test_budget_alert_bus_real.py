"""Budget alerts published on real brokers: tansu (Kafka protocol) and NATS JetStream.

With ``PILOTHOUSE_BUDGET_ALERT_BUS`` set, each threshold a settle crosses
first in its period is one JSON message on the alert topic, keyed by tenant;
a consumer group reads exactly one message per threshold.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest
from event_brokers import Broker

from pilothouse.api import Pilothouse
from pilothouse.events import Bus, open_bus
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel
from pilothouse.types import ProcessStatus

pytestmark = [pytest.mark.real, pytest.mark.anyio]

TOPIC = "pilothouse.budget-alerts"


@pytest.fixture(params=["kafka", "nats"])
def broker(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Broker]:
    started = Broker(str(request.param), tmp_path)
    started.start()
    yield started
    started.stop()


def consumer_bus(broker: Broker) -> Bus:
    if broker.kind != "nats":
        return open_bus(broker.url, session_timeout=6.0)
    return open_bus(broker.url, ack_wait=5.0)


async def test_each_threshold_is_one_message_on_the_bus(broker: Broker, tmp_path: Path) -> None:
    consumer = consumer_bus(broker)
    await consumer.start()
    await consumer.declare(TOPIC)
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}",
        secrets_file=None,
        budget_alert_bus=broker.url,
    )
    # $100 per million tokens: each turn spends 20 tokens, $0.002 of $0.01.
    catalog = (
        CatalogBuilder()
        .model("PRICED", provider="TEST", model_name="priced", input_price=100, output_price=100)
        .configuration("SMAL", max_tokens=10, retry_delay=0)
        .action("ASK", prompt="Answer briefly.", model="PRICED", configuration="SMAL")
        .add("budgets", code="WATCH", money="0.01", on_limit="alert", thresholds=[50, 80, 100])
    )
    model = ScriptedModel([Reply("ok", input_tokens=10, output_tokens=10)] * 6)
    async with Pilothouse(settings, model=model) as ph:
        await catalog.import_into(ph)
        for _ in range(6):
            result = await ph.command.start_and_send("Hi", action="ASK")
            assert result.status is ProcessStatus.COMPLETED, result.error
    received: list[tuple[str | None, dict[str, Any]]] = []
    try:
        with anyio.move_on_after(30):
            async with aclosing(consumer.consume(TOPIC, "alert-readers")) as stream:
                async for delivery in stream:
                    received.append((delivery.key, json.loads(delivery.value)))
                    await delivery.ack()
                    if len(received) == 3:
                        # A little longer: a fourth (a duplicate) would show now.
                        with anyio.move_on_after(2):
                            async for extra in stream:
                                received.append((extra.key, json.loads(extra.value)))
                        break
    finally:
        await consumer.close()
    assert [body["threshold"] for _, body in received] == [50, 80, 100]
    assert {key for key, _ in received} == {"default"}
    assert all(body["type"] == "budget.threshold" for _, body in received)
    assert all(body["budget"] == "WATCH" and body["tenant"] == "default" for _, body in received)


def test_a_bus_that_is_not_kafka_or_nats_is_refused_at_start() -> None:
    with pytest.raises(ValueError, match="kafka:// or nats://"):
        Settings(budget_alert_bus="amqp://127.0.0.1", secrets_file=None)
