"""The NATS JetStream bus, on nats-py.

A topic pilothouse publishes or consumes is kept by the stream whose
subjects cover it (a ``team.>`` stream keeps ``team.commands``), or, when
none does, by a stream of its own (``PH_<topic>``, with the bus's retention
and ``max_age``). A consumer group is a durable pull consumer shared by its
members, and an unacknowledged message comes again after ``ack_wait``.

An answer to a caller's ``replyTo`` makes no stream: it is published on
the subject as it is, stored by a stream that covers it (acknowledged), else
published on core NATS for whoever subscribes (a request's ``_INBOX``).
"""

from __future__ import annotations

__all__ = ["NatsBus"]

import logging
import re
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Any

import anyio

from pilothouse.errors import InvalidFieldError
from pilothouse.events._bus import BusError, Delivery, positive_seconds, shown_url

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


def _reply(message: Any, verb: str, what: str, **options: float) -> Callable[[], Awaitable[None]]:
    """``message.<verb>(**options)`` (``ack`` or ``nak``) as a delivery's callback.

    A failure raises :class:`BusError`; JetStream delivers the message again
    after ``ack_wait`` all the same.
    """

    async def reply() -> None:
        from nats.errors import Error as NatsError

        try:
            await getattr(message, verb)(**options)
        except NatsError as exc:
            raise BusError(f"nats: {what} lost: {exc}") from exc

    return reply


def _name(prefix: str, topic: str) -> str:
    # Stream and durable names may not hold '.', '*', '>' or spaces.
    return prefix + re.sub(r"[^A-Za-z0-9_-]", "_", topic)


RETENTIONS = ("limits", "interest", "workqueue")
"""JetStream's retention policies, as a stream pilothouse creates may have them."""

_INBOX = "_INBOX."
"""The prefix of a request's reply subject (``nc.request()``): never stored."""

_PASS_DELAY = 1.0
"""Seconds before a command a worker passed on is offered to the group again
(at once, the same worker could take it back in a tight loop)."""


class NatsBus:
    """A bus over NATS JetStream.

    Args:
        url: ``nats://host:port``.
        ack_wait: seconds before an unacknowledged message is delivered again.
        retention: the retention policy of the streams this bus creates
            (``limits``, ``interest`` or ``workqueue``); a stream that
            exists already keeps its own.
        max_age: seconds a stream this bus creates keeps a message (None:
            no limit).

    Raises:
        InvalidFieldError: an unknown retention, or a max_age that is no
            positive number of seconds.
    """

    def __init__(
        self,
        url: str,
        *,
        ack_wait: float = 60.0,
        retention: str = "limits",
        max_age: float | None = None,
    ) -> None:
        if retention not in RETENTIONS:
            raise InvalidFieldError(
                "retention", f"must be one of {', '.join(RETENTIONS)}, not {retention!r}"
            )
        self._url = url
        self._where = shown_url(url)
        """The URL as errors and logs show it: without its credentials."""
        self._ack_wait = ack_wait
        self._retention = retention
        self._max_age = None if max_age is None else positive_seconds("max_age", max_age)
        self._nc: Any = None
        self._log: _ConnectionLog | None = None
        self._js: Any = None
        self._streams: dict[str, str] = {}
        """Topic -> the stream that keeps it."""
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
        """The stream that keeps ``topic``: one that covers it, else a new ``PH_<topic>``."""
        known = self._streams.get(topic)
        if known is not None:
            return known
        from nats.js.api import RetentionPolicy, StreamConfig
        from nats.js.errors import NotFoundError

        await self.start()
        try:
            # A stream of the operator's (``team.>``) or one made before.
            name: str = await self._js.find_stream_name_by_subject(topic)
        except NotFoundError:
            name = _name("PH_", topic)
            await self._js.add_stream(
                StreamConfig(
                    name=name,
                    subjects=[topic],
                    retention=RetentionPolicy(self._retention),
                    max_age=self._max_age,
                )
            )
        self._streams[topic] = name
        return name

    async def declare(self, topic: str) -> None:
        """Make sure a stream keeps ``topic`` before anything is published on it.

        Raises:
            BusError: the server refused.
        """
        from nats.errors import Error as NatsError

        try:
            await self._stream(topic)
        except NatsError as exc:
            raise BusError(f"nats at {self._where}: stream for '{topic}': {exc}") from exc

    async def publish(self, topic: str, value: bytes, *, key: str | None = None) -> None:
        """Publish and wait for JetStream's acknowledgement."""
        from nats.errors import Error as NatsError

        try:
            await self._stream(topic)
            headers = {"key": key} if key is not None else None
            await self._js.publish(topic, value, headers=headers)
        except NatsError as exc:
            raise BusError(f"nats at {self._where}: publish to '{topic}': {exc}") from exc

    async def answer(self, topic: str, value: bytes, *, key: str | None = None) -> None:
        """Publish on a caller's reply subject; no stream is made for it.

        A stream whose subjects cover ``topic`` stores it (and acknowledges);
        a request's ``_INBOX`` subject, or one no stream covers, gets a core
        NATS publish: whoever subscribes at that moment receives it.
        """
        from nats.errors import Error as NatsError

        headers = {"key": key} if key is not None else None
        try:
            await self.start()
            if not topic.startswith(_INBOX) and await self._covered(topic):
                await self._js.publish(topic, value, headers=headers)
                return
            await self._nc.publish(topic, value, headers=headers)
            # Sent before returning, as an acknowledged publish would be.
            await self._nc.flush()
        except NatsError as exc:
            raise BusError(f"nats at {self._where}: answer on '{topic}': {exc}") from exc

    async def _covered(self, topic: str) -> bool:
        """Whether a stream's subjects cover ``topic`` (asked of the server, not tried).

        A JetStream publish is a request on the subject itself: tried on a
        subject no stream covers, it would reach the caller's subscriber as
        a request nobody answers, and time out.
        """
        from nats.js.errors import NotFoundError

        if topic in self._streams:
            return True
        try:
            self._streams[topic] = await self._js.find_stream_name_by_subject(topic)
        except NotFoundError:
            # Not remembered: a stream may be added for it later.
            return False
        return True

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
                        _reply(message, "nak", "hand-over", delay=_PASS_DELAY),
                        deliveries=metadata.num_delivered if metadata else None,
                    )
        finally:
            if self._nc is not None and not self._nc.is_closed:
                with anyio.CancelScope(shield=True):
                    await subscription.unsubscribe()
