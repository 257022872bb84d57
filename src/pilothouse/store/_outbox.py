"""The event outbox and the processed-completions table.

A call of an event tool is written to ``event_outbox`` in the same
transaction that suspends its conversation (``WA``), so a crash between the
two is impossible: either the conversation waits and the command is in the
outbox, or neither happened. A relay publishes unsent rows and marks them
sent; after a crash it publishes them again (at least once). Completions are
applied at most once: ``event_processed`` is keyed by correlation id, and the
row is inserted in the transaction that applies the completion, so a
duplicate or late one finds it and is only counted.

The classes are mapped on the Core tables of :mod:`pilothouse.store._tables`;
what a turn writes to them (:class:`~pilothouse.store.NewOutboxMessage`,
:class:`~pilothouse.store.NewProcessed` and their rows) is in
:mod:`pilothouse.store._turnstore`, which does not import the ORM.
"""

from __future__ import annotations

__all__ = ["EventOutbox", "EventProcessed", "EventReply"]

from datetime import datetime
from typing import Any

from sqlalchemy.orm import Mapped

from pilothouse.store._base import Base
from pilothouse.store._tables import event_outbox_table, event_processed_table, event_reply_table


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

    __table__ = event_outbox_table

    id: Mapped[int]
    correlation_id: Mapped[str]
    tenant: Mapped[str]
    conversation_uuid: Mapped[str]
    call_id: Mapped[str]
    skill_name: Mapped[str]
    topic: Mapped[str]
    reply_to: Mapped[str]
    payload: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]
    deadline: Mapped[datetime]
    published_at: Mapped[datetime | None]
    attempts: Mapped[int]


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

    __table__ = event_processed_table

    correlation_id: Mapped[str]
    tenant: Mapped[str | None]
    conversation_uuid: Mapped[str | None]
    outcome: Mapped[str]
    processed_at: Mapped[datetime]
    duplicates: Mapped[int]
    last_duplicate_at: Mapped[datetime | None]
    detail: Mapped[str | None]


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

    __table__ = event_reply_table

    correlation_id: Mapped[str]
    tenant: Mapped[str]
    conversation_uuid: Mapped[str]
    reply_to: Mapped[str]
    created_at: Mapped[datetime]
    claimed_at: Mapped[datetime | None]
    published_at: Mapped[datetime | None]
