"""The NATS JetStream bus, on nats-py.

Each topic is a subject with a stream of its own (``PH_<topic>``); a
consumer group is a durable pull consumer shared by its members, and an
unacknowledged message comes again after ``ack_wait``.
"""

from __future__ import annotations

__all__ = ["NatsBus"]

import logging
import re
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import anyio

from pilothouse.events._bus import BusError, Delivery, shown_url

logger = logging.getLogger("pilothouse.events.nats")

_FIRST_CONNECT_ATTEMPTS = 2
"""Retries of the first connection (0.5 s apart) before start() fails.

An address where no server answers at start is a configuration error to
report, as Kafka's bootstrap does, not an outage to wait out; once
connected, the client reconnects for as long as it takes."""


class _ConnectionLog:
    """nats-py's connection callbacks as one log line per change.

    Its default error callback logs a traceback for every failed attempt:
    two a second, for ever, while the server is away.
    """

    def __init__(self, where: str) -> None:
        self._where = where
        self._last: str | None = None
        self.closing = False

    async def error(self, exc: Exception) -> None:
        text = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if text != self._last:  # the same failure again: said once
            self._last = text
            logger.warning("nats at %s: %s", self._where, text)

    async def disconnected(self) -> None:
        if not self.closing:
            logger.warning("nats at %s: disconnected; reconnecting", self._where)

    async def reconnected(self) -> None:
        self._last = None
        logger.warning("nats at %s: reconnected", self._where)


def _reply(message: Any, verb: str, what: str) -> Callable[[], Awaitable[None]]:
    """``message.<verb>()`` (``ack`` or ``nak``) as a delivery's callback.

    A failure raises :class:`BusError`; JetStream delivers the message again
    after ``ack_wait`` all the same.
    """

    async def reply() -> None:
        from nats.errors import Error as NatsError

        try:
            await getattr(message, verb)()
        except NatsError as exc:
            raise BusError(f"nats: {what} lost: {exc}") from exc

    return reply


def _name(prefix: str, topic: str) -> str:
    # Stream and durable names may not hold '.', '*', '>' or spaces.
    return prefix + re.sub(r"[^A-Za-z0-9_-]", "_", topic)


class NatsBus:
    """A bus over NATS JetStream.

    Args:
        url: ``nats://host:port``.
        ack_wait: seconds before an unacknowledged message is delivered again.
    """

    def __init__(self, url: str, *, ack_wait: float = 60.0) -> None:
        self._url = url
        self._where = shown_url(url)
        """The URL as errors and logs show it: without its credentials."""
        self._ack_wait = ack_wait
        self._nc: Any = None
        self._log: _ConnectionLog | None = None
        self._js: Any = None
        self._streams: set[str] = set()
        self._connecting = anyio.Lock()

    async def start(self) -> None:
        """Connect to the server (once, however many tasks ask at the same time)."""
        if self._nc is not None:
            return
        async with self._connecting:
            # A task that waited here finds the connection its peer made: two
            # connections, one of them never closed, otherwise.
            if self._nc is None:
                await self._connect()

    async def _connect(self) -> None:
        import nats
        from nats.errors import Error as NatsError

        log = _ConnectionLog(self._where)
        try:
            connect: Any = nats.connect  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
            nc: Any = await connect(
                self._url,
                connect_timeout=5,
                max_reconnect_attempts=_FIRST_CONNECT_ATTEMPTS,
                reconnect_time_wait=0.5,
                error_cb=log.error,
                disconnected_cb=log.disconnected,
                reconnected_cb=log.reconnected,
            )
        except (NatsError, OSError) as exc:
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            raise BusError(f"nats at {self._where}: cannot connect: {detail}") from exc
        # Connected: from now on an outage is waited out. nats-py reads the
        # option at every reconnect (tests/real: a NATS restart loses nothing).
        nc.options["max_reconnect_attempts"] = -1
        self._nc, self._log = nc, log
        self._js = nc.jetstream()

    async def close(self) -> None:
        """Drain and close the connection."""
        if self._nc is not None:
            nc, self._nc, self._js = self._nc, None, None
            if self._log is not None:
                self._log.closing = True
            await nc.close()

    async def _stream(self, topic: str) -> str:
        name = _name("PH_", topic)
        if name in self._streams:
            return name
        from nats.js.errors import NotFoundError

        await self.start()
        try:
            await self._js.stream_info(name)
        except NotFoundError:
            await self._js.add_stream(name=name, subjects=[topic])
        self._streams.add(name)
        return name

    async def publish(self, topic: str, value: bytes, *, key: str | None = None) -> None:
        """Publish and wait for JetStream's acknowledgement."""
        from nats.errors import Error as NatsError

        try:
            await self._stream(topic)
            headers = {"key": key} if key is not None else None
            await self._js.publish(topic, value, headers=headers)
        except NatsError as exc:
            raise BusError(f"nats at {self._where}: publish to '{topic}': {exc}") from exc

    async def consume(self, topic: str, group: str) -> AsyncGenerator[Delivery]:
        """The group's messages from a durable pull consumer.

        While the server is away (a restart), fetching waits and tries
        again; nats-py reconnects by itself.
        """
        from nats.errors import Error as NatsError
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import ConsumerConfig

        stream = await self._stream(topic)
        subscription = await self._js.pull_subscribe(
            topic,
            durable=_name("", group),
            stream=stream,
            config=ConsumerConfig(ack_wait=self._ack_wait),
        )
        try:
            while self._nc is not None:
                try:
                    batch = await subscription.fetch(10, timeout=1)
                except (NatsTimeout, TimeoutError):
                    # Nothing to fetch within the second (nats-py raises either).
                    continue
                except NatsError as exc:
                    logger.info("nats fetch on %s failed (%s); trying again", topic, exc)
                    await anyio.sleep(0.5)
                    continue
                for message in batch:
                    headers: dict[str, str] = message.headers or {}
                    metadata = message.metadata
                    yield Delivery(
                        topic,
                        message.data,
                        headers.get("key"),
                        metadata.num_pending if metadata else None,
                        _reply(message, "ack", "acknowledgement"),
                        _reply(message, "nak", "negative acknowledgement"),
                        deliveries=metadata.num_delivered if metadata else None,
                    )
        finally:
            if self._nc is not None and not self._nc.is_closed:
                with anyio.CancelScope(shield=True):
                    await subscription.unsubscribe()
