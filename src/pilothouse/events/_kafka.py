"""The Kafka-protocol bus, on aiokafka.

Plain producer (no idempotence, no transactions: tansu refuses both, and
pilothouse keeps idempotency in its own tables), consumer groups with
manual commits: a message's offset is committed only when its consumer
acknowledges it, so a crash before that delivers it again.
"""

from __future__ import annotations

__all__ = ["KafkaBus"]

from collections.abc import AsyncGenerator
from typing import Any

import anyio

from pilothouse.events._bus import BusError, Delivery


class KafkaBus:
    """A bus over a Kafka-protocol broker (Apache Kafka, Redpanda, tansu).

    Args:
        servers: ``host:port[,host:port]``.
        session_timeout: the consumer group's session timeout in seconds; a
            new member joins in about half of it (tansu: use 2).
        partitions: partitions of the topics this bus creates.
        fetch_wait: seconds the broker may hold a fetch while it has nothing;
            aiokafka's 0.5 s default adds up to that to every round trip on
            tansu (measured: bench/events.py), so commands wait 0.05 s.
    """

    def __init__(
        self,
        servers: str,
        *,
        session_timeout: float = 10.0,
        partitions: float = 4,
        fetch_wait: float = 0.05,
    ) -> None:
        self._servers = servers
        self._fetch_wait_ms = int(fetch_wait * 1000)
        self._session_ms = int(session_timeout * 1000)
        self._partitions = int(partitions)
        self._producer: Any = None
        self._consumers: list[Any] = []
        self._topics: set[str] = set()

    async def start(self) -> None:
        """Start the producer."""
        if self._producer is not None:
            return
        from aiokafka import AIOKafkaProducer  # pyright: ignore[reportMissingTypeStubs]
        from aiokafka.errors import KafkaError  # pyright: ignore[reportMissingTypeStubs]

        producer = AIOKafkaProducer(
            bootstrap_servers=self._servers, enable_idempotence=False, acks=1
        )
        try:
            await producer.start()
        except KafkaError as exc:
            await producer.stop()
            raise BusError(f"kafka at {self._servers}: {exc}") from exc
        self._producer = producer

    async def close(self) -> None:
        """Stop the producer and every consumer."""
        for consumer in self._consumers:
            await consumer.stop()
        self._consumers.clear()
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None

    async def ensure_topic(self, topic: str) -> None:
        """Create ``topic`` unless it exists (a consumer of a missing topic waits for nothing)."""
        if topic in self._topics:
            return
        from aiokafka.admin import AIOKafkaAdminClient, NewTopic  # pyright: ignore[reportMissingTypeStubs]
        from aiokafka.errors import KafkaError, TopicAlreadyExistsError  # pyright: ignore[reportMissingTypeStubs]

        admin = AIOKafkaAdminClient(bootstrap_servers=self._servers)
        try:
            await admin.start()
            await admin.create_topics([NewTopic(topic, self._partitions, 1)])
        except TopicAlreadyExistsError:
            pass  # what we wanted
        except KafkaError as exc:
            raise BusError(f"kafka at {self._servers}: cannot create '{topic}': {exc}") from exc
        finally:
            await admin.close()
        self._topics.add(topic)

    async def publish(self, topic: str, value: bytes, *, key: str | None = None) -> None:
        """Send and wait for the broker's acknowledgement."""
        from aiokafka.errors import KafkaError  # pyright: ignore[reportMissingTypeStubs]

        await self.start()
        try:
            await self._producer.send_and_wait(
                topic, value, key=key.encode() if key is not None else None
            )
        except KafkaError as exc:
            raise BusError(f"kafka at {self._servers}: publish to '{topic}': {exc}") from exc

    async def consume(self, topic: str, group: str) -> AsyncGenerator[Delivery]:
        """The group's messages; an acknowledgement commits the message's offset."""
        from aiokafka import AIOKafkaConsumer, TopicPartition  # pyright: ignore[reportMissingTypeStubs]
        from aiokafka.errors import KafkaError  # pyright: ignore[reportMissingTypeStubs]

        await self.ensure_topic(topic)
        consumer: Any = AIOKafkaConsumer(
            topic,
            bootstrap_servers=self._servers,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=self._session_ms,
            fetch_max_wait_ms=self._fetch_wait_ms,
            heartbeat_interval_ms=max(100, self._session_ms // 6),
        )
        try:
            await consumer.start()
        except KafkaError as exc:
            await consumer.stop()
            raise BusError(f"kafka at {self._servers}: consume '{topic}': {exc}") from exc
        self._consumers.append(consumer)
        try:
            record: Any
            async for record in consumer:
                partition = TopicPartition(record.topic, record.partition)
                offset = record.offset + 1

                async def ack(partition: Any = partition, offset: int = offset) -> None:
                    try:
                        await consumer.commit({partition: offset})
                    except KafkaError as exc:
                        # Not committed: the group gets the message again.
                        raise BusError(f"kafka: commit lost: {exc}") from exc

                high: int | None = consumer.highwater(partition)
                lag = None if high is None else max(0, high - offset)
                raw_key: bytes | None = record.key
                value: bytes = record.value or b""
                key = raw_key.decode() if raw_key is not None else None
                yield Delivery(str(record.topic), value, key, lag, ack)
        finally:
            if consumer in self._consumers:
                self._consumers.remove(consumer)
                # Shielded: a cancelled consumer must still leave its group
                # and close its connections.
                with anyio.CancelScope(shield=True):
                    await consumer.stop()
