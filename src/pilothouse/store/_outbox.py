"""The event outbox and the processed-completions table.

A call of an event tool is written to ``event_outbox`` in the same
transaction that suspends its conversation (``WA``), so a crash between the
two is impossible: either the conversation waits and the command is in the
outbox, or neither happened. A relay publishes unsent rows and marks them
sent; after a crash it publishes them again (at least once). Completions are
applied at most once: ``event_processed`` is keyed by correlation id, and the
row is inserted in the transaction that applies the completion, so a
duplicate or late one finds it and is only counted.
"""

from __future__ import annotations

__all__ = [
    "EventOutbox",
    "EventProcessed",
    "EventReply",
    "NewOutboxMessage",
    "NewProcessed",
    "outbox_row",
    "processed_row",
]

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from pilothouse.store._base import Base, utcnow
from pilothouse.store._types import UtcDateTime


class EventOutbox(Base):
    """One command waiting to be published, or published already.

    Attributes:
        correlation_id: names the call on the bus; the completion carries it.
        tenant: the conversation's tenant.
        conversation_uuid: the suspended conversation.
        call_id: the model's tool call id the completion answers.
        skill_name: what the worker runs (the tool's name or its ``skill``).
        topic: the command topic.
        reply_to: the topic the completion is expected on.
        payload: the ``SkillInvocationEvent`` as published.
        deadline: after it, the call ends with a timeout result.
        published_at: when the relay published it; None while unsent.
        attempts: publish attempts so far.
    """

    __tablename__ = "event_outbox"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    correlation_id: Mapped[str] = mapped_column(String(64), unique=True)
    tenant: Mapped[str] = mapped_column(String(32))
    conversation_uuid: Mapped[str] = mapped_column(String(36), index=True)
    call_id: Mapped[str] = mapped_column(String(128))
    skill_name: Mapped[str] = mapped_column(String(128))
    topic: Mapped[str] = mapped_column(String(249))
    reply_to: Mapped[str] = mapped_column(String(249))
    payload: Mapped[dict[str, Any]] = mapped_column()
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    deadline: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
    published_at: Mapped[datetime | None] = mapped_column(UtcDateTime, index=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)


class EventProcessed(Base):
    """A completion applied (or a deadline that ended the call), by correlation id.

    Attributes:
        correlation_id: the call's correlation id (primary key: a second
            insert fails, which is what keeps a completion from applying twice).
        outcome: ``result``, ``error``, ``timeout`` or ``unknown`` (no such call).
        duplicates: completions received after this one and ignored.
        last_duplicate_at: when the last of them came.
        detail: the first duplicate's reason, e.g. ``late: after timeout``.
    """

    __tablename__ = "event_processed"

    correlation_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str | None] = mapped_column(String(32))
    conversation_uuid: Mapped[str | None] = mapped_column(String(36))
    outcome: Mapped[str] = mapped_column(String(16))
    processed_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    duplicates: Mapped[int] = mapped_column(Integer, default=0)
    last_duplicate_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    detail: Mapped[str | None] = mapped_column(Text)


class EventReply(Base):
    """Where a ``run_action``'s final ``turn_finished`` goes once its conversation finishes.

    Written before the action's first turn; a turn that ends waiting on the
    bus leaves it unpublished, and whichever process sees the conversation
    finished (by a completion, a caller's result, a deadline, a cancel)
    publishes the answer and notes it here.

    Attributes:
        correlation_id: the ``run_action``'s correlation id (the answer carries it).
        tenant: the conversation's tenant.
        conversation_uuid: the conversation run for it.
        reply_to: the topic the answer goes to.
        claimed_at: when a process took it to publish (or to run the first
            turn); another may take it once the claim is old.
        published_at: when the final answer was published; None until then.
    """

    __tablename__ = "event_reply"

    correlation_id: Mapped[str] = mapped_column(String(64), primary_key=True)
    tenant: Mapped[str] = mapped_column(String(32))
    conversation_uuid: Mapped[str] = mapped_column(String(36), unique=True)
    reply_to: Mapped[str] = mapped_column(String(249))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    claimed_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
    published_at: Mapped[datetime | None] = mapped_column(UtcDateTime, index=True)


@dataclass(frozen=True, slots=True)
class NewOutboxMessage:
    """A command to write to the outbox with the step that suspends the conversation."""

    correlation_id: str
    call_id: str
    skill_name: str
    topic: str
    reply_to: str
    payload: dict[str, Any]
    deadline: datetime


@dataclass(frozen=True, slots=True)
class NewProcessed:
    """A completion applied by the step that records its result (same transaction)."""

    correlation_id: str
    outcome: str


def processed_row(
    processed: NewProcessed, tenant: str | None, conversation_uuid: str | None, now: datetime
) -> dict[str, Any]:
    """The ``event_processed`` column values of ``processed``."""
    return {
        "correlation_id": processed.correlation_id,
        "tenant": tenant,
        "conversation_uuid": conversation_uuid,
        "outcome": processed.outcome,
        "processed_at": now,
        "duplicates": 0,
        "last_duplicate_at": None,
        "detail": None,
    }


def outbox_row(
    message: NewOutboxMessage, tenant: str, conversation_uuid: str, now: datetime
) -> dict[str, Any]:
    """The ``event_outbox`` column values of ``message``."""
    return {
        "correlation_id": message.correlation_id,
        "tenant": tenant,
        "conversation_uuid": conversation_uuid,
        "call_id": message.call_id,
        "skill_name": message.skill_name,
        "topic": message.topic,
        "reply_to": message.reply_to,
        "payload": message.payload,
        "created_at": now,
        "deadline": message.deadline,
        "published_at": None,
        "attempts": 0,
    }
