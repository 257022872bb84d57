"""Conversation lineage: titles, forks and hiding, beside the append-only audit rows.

A conversation's messages and timeline are never updated or deleted
(:mod:`pilothouse.store._records`). What a chat client needs to change
(its title, whether it is listed, that an edit replaced it by a fork) lives
in one ``conversation_link`` row per conversation; every change of that row
is also appended to the conversation's timeline, so the audit log tells
the whole story.
"""

from __future__ import annotations

__all__ = ["ConversationLink", "append_event", "link_of"]

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import Index, Integer, String, func, select
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Mapped, mapped_column

from pilothouse.catalog._enums import TimelineKind
from pilothouse.store._base import Base, utcnow
from pilothouse.store._records import Conversation, TimelineEvent
from pilothouse.store._types import UtcDateTime


class ConversationLink(Base):
    """The mutable label of a conversation: title, parent (a fork's), hidden."""

    __tablename__ = "conversation_link"
    __table_args__ = (Index("ix_conversation_link_tenant_parent", "tenant", "parent_uuid"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(32))
    conversation_uuid: Mapped[str] = mapped_column(String(36), unique=True)
    parent_uuid: Mapped[str | None] = mapped_column(String(36))
    fork_sequence: Mapped[int | None] = mapped_column(Integer)
    """The parent's messages before this sequence were copied into the fork."""
    title: Mapped[str | None] = mapped_column(String(200))
    hidden: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, onupdate=utcnow)


async def link_of(session: AsyncSession, tenant: str, uuid: str) -> ConversationLink | None:
    """Return the conversation's link row, or None when it has none yet."""
    found = await session.scalars(
        select(ConversationLink).where(
            ConversationLink.tenant == tenant, ConversationLink.conversation_uuid == uuid
        )
    )
    return found.one_or_none()


async def append_event(
    session: AsyncSession,
    conversation: Conversation,
    kind: TimelineKind,
    data: Mapping[str, Any],
) -> None:
    """Append one event to a conversation's timeline, after its last one.

    The caller holds the transaction; the conversation is idle (not ``RU``),
    so no turn writes its timeline at the same time.
    """
    last = await session.scalar(
        select(func.max(TimelineEvent.sequence)).where(
            TimelineEvent.conversation_id == conversation.id
        )
    )
    session.add(
        TimelineEvent(
            conversation_id=conversation.id,
            sequence=(last or 0) + 1,
            kind=kind,
            data=dict(data),
        )
    )
