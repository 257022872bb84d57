"""The in-memory bus, for unit tests and single-process use.

Each topic is a list; each consumer group has a cursor over it. A message
handed out but not acknowledged when its consumer stops is handed out
again to the next consumer of the group, as a broker would after a
rebalance.
"""

from __future__ import annotations

__all__ = ["MemoryBus"]

import asyncio
import bisect
from collections.abc import AsyncGenerator, Iterable

from pilothouse.events._bus import BusError, Delivery


class MemoryBus:
    """A bus in this process's memory (no broker)."""

    def __init__(self) -> None:
        self._logs: dict[str, list[tuple[str | None, bytes]]] = {}
        self._next: dict[tuple[str, str], int] = {}
        self._returned: dict[tuple[str, str], list[int]] = {}
        self._changed = asyncio.Condition()
        self._closed = False

    async def start(self) -> None:
        """Nothing to connect."""
        self._closed = False

    async def close(self) -> None:
        """Stop every consumer."""
        self._closed = True
        async with self._changed:
            self._changed.notify_all()

    def messages(self, topic: str) -> list[bytes]:
        """Everything published on ``topic`` so far (tests read it)."""
        return [value for _, value in self._logs.get(topic, [])]

    async def publish(self, topic: str, value: bytes, *, key: str | None = None) -> None:
        """Append to the topic and wake its consumers."""
        if self._closed:
            raise BusError("the memory bus is closed")
        async with self._changed:
            self._logs.setdefault(topic, []).append((key, value))
            self._changed.notify_all()

    async def answer(self, topic: str, value: bytes, *, key: str | None = None) -> None:
        """Publish on a caller's reply topic: as any message."""
        await self.publish(topic, value, key=key)

    async def declare(self, topic: str) -> None:
        """Nothing to create: a topic exists once something is published on it."""

    async def consume(self, topic: str, group: str) -> AsyncGenerator[Delivery]:
        """Hand out the topic's messages to the group, each to one consumer.

        Acknowledgements may come in any order and after the next message was
        taken (a consumer applying several at once); what is not acknowledged
        when the consumer stops goes back to the group.
        """
        slot = (topic, group)
        unacked: set[int] = set()
        try:
            while not self._closed:
                async with self._changed:
                    index = self._claim(slot)
                    while index is None and not self._closed:
                        await self._changed.wait()
                        index = self._claim(slot)
                if index is None:
                    return
                key, value = self._logs[topic][index]
                unacked.add(index)

                async def ack(index: int = index) -> None:
                    unacked.discard(index)

                async def redeliver(index: int = index) -> None:
                    if index in unacked:
                        unacked.discard(index)
                        async with self._changed:
                            self._give_back(slot, [index])
                            self._changed.notify_all()

                lag = len(self._logs[topic]) - self._next[slot]
                yield Delivery(topic, value, key, lag, ack, redeliver)
        finally:
            # Not acknowledged: the group gets them again.
            self._give_back(slot, unacked)
            # Given back once: a late redeliver() must not add a second copy.
            unacked.clear()

    def _give_back(self, slot: tuple[str, str], indexes: Iterable[int]) -> None:
        """Put messages back in the group's line, in log order."""
        returned = self._returned.setdefault(slot, [])
        for index in indexes:
            bisect.insort(returned, index)

    def _claim(self, slot: tuple[str, str]) -> int | None:
        returned = self._returned.get(slot)
        if returned:
            return returned.pop(0)
        position = self._next.get(slot, 0)
        if position < len(self._logs.get(slot[0], [])):
            self._next[slot] = position + 1
            return position
        return None
