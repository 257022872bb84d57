"""Kafka durability settings reach the broker: acks=all and the topics' replication factor.

tansu (one broker) reports a topic's replicas as created: the factor asked
for shows as that many entries of its one node, so the test sees what the
admin request carried.
"""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path
from typing import Any

import anyio
import pytest
from event_brokers import Broker

from pilothouse.events import open_bus
from pilothouse.events._kafka import KafkaBus

pytestmark = [pytest.mark.anyio, pytest.mark.real]


async def _replicas(broker: Broker, topic: str) -> list[int]:
    from aiokafka.admin import AIOKafkaAdminClient

    admin: Any = AIOKafkaAdminClient(bootstrap_servers=broker.url.removeprefix("kafka://"))
    await admin.start()
    try:
        (described,) = await admin.describe_topics([topic])
    finally:
        await admin.close()
    return sorted({len(p["replicas"]) for p in described["partitions"]})


async def test_acks_all_and_the_replication_factor_reach_the_broker(tmp_path: Path) -> None:
    broker = Broker("kafka", tmp_path)
    broker.start()
    replicated = open_bus(broker.url, session_timeout=6.0, replication_factor=3)
    local = open_bus(broker.url, session_timeout=6.0, acks="1")
    assert isinstance(replicated, KafkaBus)
    assert isinstance(local, KafkaBus)
    try:
        await replicated.ensure_topic("durable")
        await local.ensure_topic("local")
        assert await _replicas(broker, "durable") == [3]
        assert await _replicas(broker, "local") == [1]

        await replicated.publish("durable", b"kept", key="k1")
        await local.publish("local", b"fast", key="k2")
        # aiokafka's producer asks for every in-sync replica (-1) or the leader (1).
        producer: Any = getattr(replicated, "_producer")  # noqa: B009
        assert producer._sender._acks == -1
        assert getattr(local, "_producer")._sender._acks == 1  # noqa: B009
        stream = replicated.consume("durable", "durability")
        async with aclosing(stream):
            with anyio.fail_after(60):
                delivery = await anext(stream)
        assert (delivery.value, delivery.key) == (b"kept", "k1")
    finally:
        await replicated.close()
        await local.close()
        broker.stop()
