"""The bus adapter: one small protocol, three implementations.

A bus publishes bytes on a topic and delivers a topic's messages to a
consumer group (each message to one member of the group), at least once: a
message is delivered again until its consumer acknowledges it. Nothing here
is idempotent or transactional on the broker side (tansu refuses both);
pilothouse's idempotency lives in its own tables (docs/events.md).

``open_bus("memory://")``, ``open_bus("kafka://127.0.0.1:9092")`` or
``open_bus("nats://127.0.0.1:4222")`` gives the adapter for a URL.
"""

from __future__ import annotations

__all__ = ["DEFAULT_ACK_WAIT", "Bus", "BusError", "Delivery", "describe_bus", "open_bus"]

import math
from collections.abc import AsyncGenerator, Collection
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol
from urllib.parse import parse_qsl, urlsplit, urlunsplit

from pilothouse.errors import InvalidFieldError, PilothouseError

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable


DEFAULT_ACK_WAIT = 60.0
"""Seconds before NATS delivers an unacknowledged message again, unless told otherwise."""


class BusError(PilothouseError):
    """The broker could not be reached or refused a request."""


def shown_url(url: str) -> str:
    """``url`` as errors and logs may show it: a user or password in it becomes ``***``."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


def positive_seconds(name: str, value: object) -> float:
    """Return ``value`` if it is a positive, finite number of seconds.

    Zero would make the loop it paces spin (or time everything out at
    once); infinity or NaN would make it never run.

    Raises:
        InvalidFieldError: naming ``name``.
    """
    # Typed object: a string from a config file is refused here too, by name.
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < math.inf:
        raise InvalidFieldError(name, f"must be a positive number of seconds, not {value!r}")
    return float(value)


def served_tenants(default: str, tenants: Collection[str] | None) -> frozenset[str]:
    """The tenants a bus process serves: ``tenants``, or its facade's tenant alone.

    A message naming any other tenant is refused: the bus carries no
    credentials, so what a process was started for is the boundary.

    Raises:
        InvalidFieldError: ``tenants`` is empty, a string, or names an empty tenant.
    """
    if tenants is None:
        return frozenset({default})
    # A string is a collection of letters: "acme" would serve 'a', 'c', 'm', 'e'.
    if isinstance(tenants, str) or not tenants or not all(tenants):
        raise InvalidFieldError(
            "tenants", f"must name at least one tenant (a list such as ['acme']), not {tenants!r}"
        )
    return frozenset(tenants)


def tenant_list(tenants: frozenset[str]) -> str:
    """The served tenants as a log line or an error names them."""
    return ", ".join(f"'{t}'" for t in sorted(tenants))


@dataclass
class Delivery:
    """One message delivered to a consumer.

    Attributes:
        topic: where it was published.
        value: its bytes.
        key: its key (the correlation id for pilothouse's messages).
        lag: messages of the topic after this one not yet consumed by the
            group, when the broker says (a metric, not a promise).
        deliveries: how many times the broker has delivered it, this time
            included, when it says (NATS does; a hand-back counts too).
    """

    topic: str
    value: bytes
    key: str | None = None
    lag: int | None = None
    _ack: Callable[[], Awaitable[None]] | None = field(default=None, repr=False)
    _redeliver: Callable[[], Awaitable[None]] | None = field(default=None, repr=False)
    _pass: Callable[[], Awaitable[None]] | None = field(default=None, repr=False)
    deliveries: int | None = None

    async def ack(self) -> None:
        """Acknowledge it: the group will not be given it again."""
        if self._ack is not None:
            await self._ack()

    async def redeliver(self) -> None:
        """Hand it back unacknowledged, to be delivered again now (a negative acknowledgement).

        Without it, an unacknowledged message comes again only when the
        broker gives up on it: NATS after its ack wait, a Kafka group after
        its next rebalance, which in a stable group may be hours. NATS is
        told at once (``nak``); a Kafka consumer seeks its partition back to
        the message, so the partition's later messages that were delivered
        come again too (their consumers find them applied: duplicates);
        the memory bus puts it back first in line.

        Raises:
            BusError: the broker was not told; the message still comes again
                the way an unacknowledged one does.
        """
        if self._redeliver is not None:
            await self._redeliver()

    async def pass_on(self) -> None:
        """Leave it to another member of the group: this consumer does not handle it.

        NATS hands it back (``nak``) to be offered to the group again a
        second later, to whichever member fetches it. A Kafka group cannot
        skip a message without committing past it, and the memory bus
        follows Kafka: there it is acknowledged, so the group does not get
        it again (give consumers that handle different messages groups or
        topics of their own).

        Raises:
            BusError: the broker was not told.
        """
        if self._pass is not None:
            await self._pass()
        else:
            await self.ack()


class Bus(Protocol):
    """A message bus: Kafka protocol, NATS JetStream, or memory."""

    async def start(self) -> None:
        """Connect (idempotent)."""
        ...

    async def close(self) -> None:
        """Disconnect; consumers stop."""
        ...

    async def publish(self, topic: str, value: bytes, *, key: str | None = None) -> None:
        """Publish one message; returns once the broker has it.

        Raises:
            BusError: the broker did not take it.
        """
        ...

    async def answer(self, topic: str, value: bytes, *, key: str | None = None) -> None:
        """Publish one message on a caller's reply topic (``replyTo``).

        NATS makes no stream for it: a stream that covers the subject stores
        it, else it goes out on core NATS (a request's ``_INBOX``). Kafka
        and memory publish it as any message.

        Raises:
            BusError: the broker did not take it.
        """
        ...

    async def declare(self, topic: str) -> None:
        """Make sure the broker keeps ``topic``'s messages before any is published.

        Raises:
            BusError: the broker refused.
        """
        ...

    def consume(self, topic: str, group: str) -> AsyncGenerator[Delivery]:
        """Deliver ``topic``'s messages to ``group``; unacknowledged ones come again."""
        ...


def _nats_bus(url: str, ack_wait: float | None) -> Bus:
    """A NATS bus; ``?retention=...&max_age=...`` in the URL set its new streams' limits."""
    from pilothouse.events._nats import NatsBus

    parts = urlsplit(url)
    options: dict[str, Any] = {} if ack_wait is None else {"ack_wait": ack_wait}
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name == "retention":
            options["retention"] = value
        elif name == "max_age":
            try:
                options["max_age"] = float(value)
            except ValueError:
                raise InvalidFieldError(
                    "max_age", f"must be a positive number of seconds, not {value!r}"
                ) from None
        else:
            raise InvalidFieldError(
                name,
                f"'{shown_url(url)}' has an option NATS does not have: "
                "write retention=limits|interest|workqueue and max_age=<seconds>, or nothing",
            )
    return NatsBus(urlunsplit(parts._replace(query="")), **options)


def open_bus(
    url: str,
    *,
    session_timeout: float | None = None,
    ack_wait: float | None = None,
    acks: str | None = None,
    replication_factor: int | None = None,
) -> Bus:
    """The bus of a URL: ``memory://``, ``kafka://host:port[,host:port]``, ``nats://host:port``.

    A NATS URL may set the retention and age limit of the streams the bus
    creates: ``nats://host:4222?retention=limits&max_age=604800`` (seconds).

    Args:
        url: where the broker is.
        session_timeout: a Kafka consumer group's session timeout in seconds
            (tansu: 2, so a new member joins in about a second).
        ack_wait: seconds before NATS delivers an unacknowledged message again.
        acks: Kafka producer acknowledgements, ``all`` (default) or ``1``.
        replication_factor: replicas of the Kafka topics the bus creates
            (default 1: one local broker; 3 on a production cluster).

    Raises:
        InvalidFieldError: an unknown scheme, or an option the bus does not have
            (an unknown NATS URL option, retention or a bad max_age included).
    """
    scheme = urlsplit(url).scheme
    # 0 would redeliver every message at once (ack_wait) or expire every
    # group member between heartbeats (session_timeout).
    if ack_wait is not None:
        ack_wait = positive_seconds("ack_wait", ack_wait)
    if session_timeout is not None:
        session_timeout = positive_seconds("session_timeout", session_timeout)
    if scheme == "kafka":
        from pilothouse.events._kafka import KafkaBus

        if ack_wait is not None:
            raise InvalidFieldError(
                "ack_wait", "only NATS has one; Kafka redelivers from the last commit: remove it"
            )
        return KafkaBus(
            url.removeprefix("kafka://"),
            session_timeout=10.0 if session_timeout is None else session_timeout,
            acks="all" if acks is None else acks,
            replication_factor=1 if replication_factor is None else replication_factor,
        )
    if session_timeout is not None:
        raise InvalidFieldError(
            "session_timeout",
            f"only Kafka consumer groups have one, not '{shown_url(url)}': remove it",
        )
    for name, value in (
        ("acks", acks),
        ("replication_factor", replication_factor),
    ):  # what only a Kafka producer and its topics have
        if value is not None:
            raise InvalidFieldError(
                name, f"only a Kafka bus has one, not '{shown_url(url)}': remove it"
            )
    if scheme == "nats":
        return _nats_bus(url, DEFAULT_ACK_WAIT if ack_wait is None else ack_wait)
    if ack_wait is not None:
        raise InvalidFieldError("ack_wait", f"only NATS has one, not '{shown_url(url)}': remove it")
    if scheme == "memory":
        from pilothouse.events._memory import MemoryBus

        return MemoryBus()
    raise InvalidFieldError(
        "bus",
        f"unknown bus '{shown_url(url)}': write memory://, kafka://host:port or nats://host:port",
    )


def describe_bus(bus: Bus, url: str, ack_wait: float | None = None) -> str:
    """The bus as a start-up line names it: kind, servers and its delivery settings.

    Args:
        bus: what :func:`open_bus` returned for ``url``.
        url: the bus URL; shown as :func:`shown_url` shows it (no user or password).
        ack_wait: the ``ack_wait`` passed to :func:`open_bus` (None: the default).
    """
    from pilothouse.events._kafka import KafkaBus

    if isinstance(bus, KafkaBus):
        return (
            f"kafka, servers {bus.servers} (acks {bus.acks}, replication factor "
            f"{bus.replication_factor})"
        )
    if urlsplit(url).scheme == "nats":
        wait = DEFAULT_ACK_WAIT if ack_wait is None else ack_wait
        return f"nats, servers {urlsplit(shown_url(url)).netloc} (ack_wait {wait:g} s)"
    return shown_url(url)
