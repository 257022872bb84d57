"""Bus options: what a bus does not have is refused by name, with what to write instead."""

from __future__ import annotations

from typing import Any

import pytest

from pilothouse.errors import InvalidFieldError
from pilothouse.events import describe_bus, open_bus
from pilothouse.events._kafka import KafkaBus


def test_kafka_asks_every_in_sync_replica_by_default_and_takes_its_options() -> None:
    bus = open_bus("kafka://k1:9092,k2:9092")
    assert isinstance(bus, KafkaBus)
    assert (bus.acks, bus.replication_factor) == ("all", 1)
    tuned = open_bus("kafka://k1:9092", acks="1", replication_factor=3)
    assert isinstance(tuned, KafkaBus)
    assert (tuned.acks, tuned.replication_factor) == ("1", 3)
    assert describe_bus(tuned, "kafka://k1:9092") == (
        "kafka, servers k1:9092 (acks 1, replication factor 3)"
    )


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"acks": "0"}, "acks"),
        ({"acks": "-1"}, "acks"),
        ({"replication_factor": 0}, "replication_factor"),
        ({"replication_factor": True}, "replication_factor"),
        ({"replication_factor": "3"}, "replication_factor"),
    ],
)
def test_kafka_refuses_settings_it_cannot_honour(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidFieldError) as raised:
        open_bus("kafka://127.0.0.1:9092", **options)
    assert raised.value.field == field


@pytest.mark.parametrize("url", ["nats://127.0.0.1:4222", "memory://"])
@pytest.mark.parametrize(("option", "value"), [("acks", "all"), ("replication_factor", 3)])
def test_only_kafka_takes_acks_and_a_replication_factor(url: str, option: str, value: Any) -> None:
    with pytest.raises(InvalidFieldError, match="only a Kafka bus has one") as raised:
        open_bus(url, **{option: value})
    assert raised.value.field == option


def test_a_nats_bus_is_described_without_its_password() -> None:
    url = "nats://ops:s3cret@nats.internal:4222"
    line = describe_bus(open_bus(url, ack_wait=30), url, 30)
    assert line == "nats, servers ***@nats.internal:4222 (ack_wait 30 s)"
    assert describe_bus(open_bus(url), url) == (
        "nats, servers ***@nats.internal:4222 (ack_wait 60 s)"
    )
