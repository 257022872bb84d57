"""Poison messages: a message whose handling raises is retried, then dead-lettered.

One message that makes its handler raise (a database error, a bug) must
not stop the consumer that took it, nor come back for ever: it is handed
back to the bus to be delivered again, and after ``max_deliver``
deliveries it is published unchanged on the dead-letter topic
(``<topic>.dlq``) and acknowledged. The count is the broker's when it
keeps one (NATS: the message's delivery count, so deliveries before a
restart count too), otherwise this process's count of failed handlings.
"""

from __future__ import annotations

__all__ = [
    "DEFAULT_MAX_DELIVER",
    "PoisonGuard",
    "check_max_deliver",
    "dead_letter_topic",
    "reply_target",
    "unreadable_reason",
]

import hashlib
import json
import logging
from typing import Any, cast

from pydantic import BaseModel, ValidationError

from pilothouse.errors import InvalidFieldError
from pilothouse.events._bus import Bus, Delivery
from pilothouse.events._payloads import (
    RunAction,
    SkillCompletionEvent,
    SkillInvocationEvent,
    TurnFinishedEvent,
)

logger = logging.getLogger("pilothouse.events")

DEFAULT_MAX_DELIVER = 5
"""Deliveries of a message whose handling raises before it is dead-lettered."""


def dead_letter_topic(topic: str) -> str:
    """Where a poison message of ``topic`` goes."""
    return f"{topic}.dlq"


def check_max_deliver(value: object) -> int:
    """Return ``value`` if it is a whole number of deliveries, at least 1.

    Raises:
        InvalidFieldError: naming ``max_deliver``.
    """
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidFieldError(
            "max_deliver", f"must be a whole number of deliveries, at least 1, not {value!r}"
        )
    return value


def reply_target(value: bytes) -> tuple[str, str] | None:
    """The ``correlationId`` and ``replyTo`` of a message that could not be read, if it has them.

    A refusal is answered only where the sender listens: both must be
    non-empty text of the lengths a valid message may have (64 and 249).
    """
    from pilothouse.api import check_input, loads_json

    try:
        data = loads_json(value, check=False)
    except (ValueError, RecursionError):
        return None
    if not isinstance(data, dict):
        return None
    fields = cast("dict[str, Any]", data)
    inner = fields.get("data")
    if "specversion" in fields and isinstance(inner, dict):
        fields = cast("dict[str, Any]", inner)
    correlation, reply_to = fields.get("correlationId"), fields.get("replyTo")
    if not (isinstance(correlation, str) and isinstance(reply_to, str)):
        return None
    if not (0 < len(correlation) <= 64 and 0 < len(reply_to) <= 249):
        return None
    try:
        # A NUL is refused by PostgreSQL and by brokers' topic names alike.
        check_input([correlation, reply_to], "reply target")
    except InvalidFieldError:
        return None
    return correlation, reply_to


_MODELS: dict[str, type[BaseModel]] = {
    "SkillInvocationEvent": SkillInvocationEvent,
    "SkillCompletionEvent": SkillCompletionEvent,
    "run_action": RunAction,
    "turn_finished": TurnFinishedEvent,
}


def unreadable_reason(exc: Exception) -> str:
    """Why a message could not be read, naming its field as the sender wrote it.

    The first of pydantic's errors, its path without the message's type
    (``input: Input should be a valid string``); an unknown field is named
    with the fields the message has.
    """
    if isinstance(exc, ValidationError):
        first = exc.errors(include_url=False)[0]
        path = [str(part) for part in first["loc"]]
        model = _MODELS.get(path[0]) if path else None
        if model is not None:
            path = path[1:]
        where = ".".join(path) or "message"
        if model is RunAction and path[:1] == ["input"]:
            # Its type is a union: pydantic names each branch it tried (input.str).
            shown = json.dumps(first["input"], default=str)
            shown = shown if len(shown) <= 40 else shown[:37] + "..."
            return f"input: must be text or an object of the prompt's placeholders, not {shown}"
        if first["type"] == "extra_forbidden" and model is not None:
            fields = ", ".join(f.alias or name for name, f in model.model_fields.items())
            return f"{where}: unknown field; remove it (the fields are {fields})"
        return f"{where}: {first['msg']}"
    if isinstance(exc, RecursionError):
        return "message: nested too deeply"
    return f"message: not JSON ({exc})"


class PoisonGuard:
    """Counts a consumer's failed handlings and dead-letters a message after ``max_deliver``.

    Args:
        bus: where the dead-letter topic is.
        max_deliver: deliveries of a message whose handling raises before
            it is dead-lettered.
        dead_letter: the dead-letter topic of every message it guards
            (a worker's ``dead_letter_topic``); by default ``<topic>.dlq``
            of the message's topic.
    """

    def __init__(self, bus: Bus, max_deliver: int, *, dead_letter: str | None = None) -> None:
        self._bus = bus
        self._dead_letter = dead_letter
        self.max_deliver = check_max_deliver(max_deliver)
        self._failures: dict[tuple[str, bytes], int] = {}

    @staticmethod
    def _key(delivery: Delivery) -> tuple[str, bytes]:
        return delivery.topic, hashlib.sha256(delivery.value).digest()

    async def set_aside(self, delivery: Delivery) -> str:
        """Publish a message that can never be handled (unreadable) on the dead-letter topic now.

        Delivered again, it would be refused again: it is not retried.

        Returns:
            The dead-letter topic.

        Raises:
            BusError: the dead-letter topic did not take it.
        """
        topic = self._dead_letter or dead_letter_topic(delivery.topic)
        await self._bus.publish(topic, delivery.value, key=delivery.key)
        return topic

    def handled(self, delivery: Delivery) -> None:
        """Forget the failures of a message that was handled after all."""
        if self._failures:
            self._failures.pop(self._key(delivery), None)

    async def failed(self, delivery: Delivery, exc: Exception) -> bool:
        """Hand back a message whose handling raised ``exc``; dead-letter it after ``max_deliver``.

        Returns:
            True when it was dead-lettered (and acknowledged).

        Raises:
            BusError: the dead-letter topic did not take it, or the broker
                was not told; the message comes again.
        """
        key = self._key(delivery)
        failures = self._failures.get(key, 0) + 1
        deliveries = max(failures, delivery.deliveries or 0)
        if deliveries < self.max_deliver:
            self._failures[key] = failures
            logger.error(
                "a message on %s could not be handled (delivery %d of %d), delivered again",
                delivery.topic,
                deliveries,
                self.max_deliver,
                exc_info=exc,
            )
            await delivery.redeliver()
            return False
        topic = self._dead_letter or dead_letter_topic(delivery.topic)
        logger.error(
            "a message on %s could not be handled in %d deliveries: dead-lettered on %s",
            delivery.topic,
            deliveries,
            topic,
            exc_info=exc,
        )
        await self._bus.publish(topic, delivery.value, key=delivery.key)
        self._failures.pop(key, None)
        await delivery.ack()
        return True
