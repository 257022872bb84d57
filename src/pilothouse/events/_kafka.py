"""The Kafka-protocol bus, on aiokafka.

Plain producer (no idempotence, no transactions: tansu refuses both, and
pilothouse keeps idempotency in its own tables), consumer groups with
manual commits: a message's offset is committed only when its consumer
acknowledges it, so a crash before that delivers it again.
"""

from __future__ import annotations

__all__ = ["ACKS", "KafkaBus"]

import asyncio
import bisect
import logging
from collections.abc import AsyncGenerator
from typing import Any, cast

import anyio

from pilothouse.errors import InvalidFieldError
from pilothouse.events._bus import BusError, Delivery

logger = logging.getLogger("pilothouse.events.kafka")

ACKS = ("all", "1")
"""The producer acknowledgements a bus may ask for (``0`` would lose messages unseen)."""

_ABANDONED_COMMIT_GRACE = 1.0
"""Seconds a stopped consumer's abandoned commit gets to finish before it is cancelled."""


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
        acks: ``all`` (a publish returns once every in-sync replica has the
            message: what the outbox's "published" needs to mean on a
            cluster) or ``1`` (the partition leader alone: a leader lost
            before its followers copied it loses the message).
        replication_factor: replicas of each topic this bus creates; 1 fits
            a single local broker (which refuses more), a production cluster
            wants 3.
    """

    def __init__(
        self,
        servers: str,
        *,
        session_timeout: float = 10.0,
        partitions: float = 4,
        fetch_wait: float = 0.05,
        acks: str = "all",
        replication_factor: int = 1,
    ) -> None:
        if acks not in ACKS:
            raise InvalidFieldError(
                "acks", f"must be 'all' or '1', not {acks!r}: write 'all' for a cluster"
            )
        # Typed int, but a config file's "3" or a True would reach aiokafka unchecked.
        factor = cast(object, replication_factor)
        if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
            raise InvalidFieldError(
                "replication_factor",
                f"must be a whole number of at least 1, not {replication_factor!r}",
            )
        self.servers = servers
        self.acks = acks
        self.replication_factor = replication_factor
        self._servers = servers
        self._fetch_wait_ms = int(fetch_wait * 1000)
        self._session_ms = int(session_timeout * 1000)
        self._partitions = int(partitions)
        self._producer: Any = None
        self._consumers: list[Any] = []
        self._topics: set[str] = set()
        self._starting = anyio.Lock()

    async def start(self) -> None:
        """Start the producer (once, however many tasks ask at the same time)."""
        if self._producer is not None:
            return
        async with self._starting:
            # A task that waited here finds its peer's producer: two
            # producers, one of them never stopped, otherwise.
            if self._producer is None:
                await self._start_producer()

    async def _start_producer(self) -> None:
        from aiokafka import AIOKafkaProducer  # pyright: ignore[reportMissingTypeStubs]
        from aiokafka.errors import KafkaError  # pyright: ignore[reportMissingTypeStubs]

        producer = AIOKafkaProducer(
            bootstrap_servers=self._servers,
            enable_idempotence=False,
            acks="all" if self.acks == "all" else 1,
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
            await admin.create_topics([NewTopic(topic, self._partitions, self.replication_factor)])
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

    async def answer(self, topic: str, value: bytes, *, key: str | None = None) -> None:
        """Publish on a caller's reply topic: as any message (Kafka has no inboxes)."""
        await self.publish(topic, value, key=key)

    async def declare(self, topic: str) -> None:
        """Create ``topic`` unless it exists."""
        await self.ensure_topic(topic)

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
        commits = _InOrderCommits(consumer)
        try:
            record: Any
            async for record in consumer:
                partition = TopicPartition(record.topic, record.partition)
                offset = record.offset + 1
                commits.delivered(partition, record.offset)

                async def ack(partition: Any = partition, offset: int = record.offset) -> None:
                    try:
                        await commits.acknowledge(partition, offset)
                    except KafkaError as exc:
                        # Not committed: the group gets the message again.
                        raise BusError(f"kafka: commit lost: {exc}") from exc

                async def redeliver(
                    partition: Any = partition, offset: int = record.offset
                ) -> None:
                    await self._seek_back(consumer, partition, offset)

                high: int | None = consumer.highwater(partition)
                lag = None if high is None else max(0, high - offset)
                raw_key: bytes | None = record.key
                value: bytes = record.value or b""
                key = raw_key.decode() if raw_key is not None else None
                yield Delivery(str(record.topic), value, key, lag, ack, redeliver)
        finally:
            # Shielded: a cancelled consumer must still leave its group, close
            # its connections and end what it left running.
            with anyio.CancelScope(shield=True):
                if consumer in self._consumers:
                    self._consumers.remove(consumer)
                    await consumer.stop()
                # Stopped here or by close(): a commit left by a cancelled
                # acknowledgement would otherwise retry for ever.
                await commits.close()

    async def _seek_back(self, consumer: Any, partition: Any, offset: int) -> None:
        """Have ``consumer`` fetch ``partition`` again from ``offset`` (a message handed back).

        Its offset is not committed (commits wait for it), so a seek is all a
        redelivery takes; later offsets of the partition come again with it.
        """
        from aiokafka.errors import IllegalStateError, KafkaError  # pyright: ignore[reportMissingTypeStubs]

        if consumer not in self._consumers:
            return  # stopped: the group's next member starts at or before it
        try:
            # Never forward: another message handed back earlier in the
            # partition and not yet delivered again must not be skipped.
            position: int = await consumer.position(partition)
            consumer.seek(partition, min(offset, position))
        except IllegalStateError:
            # Revoked by a rebalance: its new owner starts from the committed
            # offset, which is at or before this message.
            return
        except KafkaError as exc:
            raise BusError(f"kafka: cannot seek back to a message handed back: {exc}") from exc


class _InOrderCommits:
    """Commits a partition's offsets in order while acknowledgements come in any order.

    Kafka's committed offset says "everything before it is done": a consumer
    that applies several messages at once must not commit past one still
    running, or a crash would lose it. An acknowledged offset is committed
    once every offset delivered before it on its partition is acknowledged.
    """

    def __init__(self, consumer: Any) -> None:
        self._consumer = consumer
        self._pending: dict[Any, list[int]] = {}
        self._acked: dict[Any, set[int]] = {}
        self._committed: dict[Any, int] = {}
        self._lock = anyio.Lock()
        self._abandoned: asyncio.Task[Any] | None = None
        """A commit whose caller was cancelled, maybe still running."""

    def delivered(self, partition: Any, offset: int) -> None:
        """Note a delivered offset (a rebalance may deliver one again)."""
        pending = self._pending.setdefault(partition, [])
        at = bisect.bisect_left(pending, offset)
        if at == len(pending) or pending[at] != offset:
            pending.insert(at, offset)

    async def acknowledge(self, partition: Any, offset: int) -> None:
        """Note ``offset`` done; commit as far as every earlier one is done."""
        acked = self._acked.setdefault(partition, set())
        acked.add(offset)
        pending = self._pending.get(partition, [])
        upto: int | None = None
        while pending and pending[0] in acked:
            done = pending.pop(0)
            acked.discard(done)
            upto = done + 1
        if upto is None:
            return  # an earlier offset still runs: committed with it
        async with self._lock:
            # Commits of one partition go out one at a time and never backwards.
            if upto > self._committed.get(partition, -1):
                await self._commit({partition: upto})
                self._committed[partition] = upto

    async def _commit(self, offsets: dict[Any, int]) -> None:
        """``consumer.commit(offsets)`` in a task its caller never cancels.

        aiokafka sends the commit request inside ``asyncio.shield``. When the
        caller is cancelled (a worker stopping while the broker is down), the
        shield on Python 3.11 drops its callback on the request's task, so the
        request's later failure is never retrieved: asyncio reports "Task
        exception was never retrieved" (and anyio's test runner fails whatever
        test it lands in). Here the commit runs to its end in its own task; a
        caller that stops waiting leaves it to finish, its failure is logged,
        and the next commit waits for it, so commits never go out of order.
        """
        if self._abandoned is not None:
            await asyncio.wait({self._abandoned})
            self._abandoned = None
        task = asyncio.ensure_future(self._consumer.commit(offsets))
        try:
            await asyncio.wait({task})
        except asyncio.CancelledError:
            task.add_done_callback(_abandoned_commit_done)
            self._abandoned = task
            raise
        # The caller waited: the outcome is its own (a KafkaError becomes BusError).
        task.result()

    async def close(self) -> None:
        """End a commit left by a cancelled caller; call once the consumer has stopped.

        aiokafka retries a commit for as long as the group's coordinator is
        unknown, which after ``stop()`` is for ever. A commit that still runs
        gets a second to finish (a live broker answers in milliseconds), then
        is cancelled: by then its requests fail at once (the consumer's
        connections are closed) and it waits in aiokafka's retry sleep, so no
        request is left behind. Not committed: the group delivers the message
        again.
        """
        task, self._abandoned = self._abandoned, None
        if task is None or task.done():
            return
        await asyncio.wait({task}, timeout=_ABANDONED_COMMIT_GRACE)
        if not task.done():
            task.cancel()
            await asyncio.wait({task})


def _abandoned_commit_done(task: asyncio.Task[Any]) -> None:
    """Retrieve the outcome of a commit whose caller was cancelled."""
    if task.cancelled():
        return
    error = task.exception()
    if error is not None:
        # Not committed: the group delivers the message again (at least once).
        logger.warning("kafka: a commit left by its cancelled caller failed: %s", error)
