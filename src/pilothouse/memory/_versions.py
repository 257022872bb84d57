"""A memory record's history: the values it held before each change, and when.

An edit, or an extraction deciding UPDATE, first writes the record's current
value to ``memory_version`` with ``valid_from`` (when the record began to
hold it: the previous change, or its creation) and ``valid_to`` (now), then
changes the record. The record is always the current value; its versions are
the past ones, each with its own provenance, so erasing a user can find a
record that once held a value derived from them.

Every function here runs inside the caller's transaction: a version is
written with its change or not at all.
"""

from __future__ import annotations

__all__ = ["drop_versions", "history", "keep_version"]

from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, delete, func, select

from pilothouse.memory._tables import MemoryRecord, MemoryRecordVersion
from pilothouse.memory._types import MemoryVersion

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession


async def keep_version(
    session: AsyncSession, row: MemoryRecord, change: str, now: datetime
) -> None:
    """Write ``row``'s current value as a version that ended ``now``.

    Args:
        session: the transaction that is about to change ``row``.
        row: the record, still holding its current value.
        change: what replaces the value: ``edit`` or ``extraction``.
        now: when the change happens.
    """
    started = await session.scalar(
        select(func.max(MemoryRecordVersion.valid_to)).where(
            MemoryRecordVersion.record_id == row.id
        )
    )
    session.add(
        MemoryRecordVersion(
            record_id=row.id,
            tenant=row.tenant,
            content=row.content,
            memory_type=row.memory_type,
            importance=row.importance,
            meta=dict(row.meta),
            source_conversation=row.source_conversation,
            source_user=row.source_user,
            change=change,
            valid_from=started or row.created_at,
            valid_to=now,
        )
    )


async def history(session: AsyncSession, row: MemoryRecord) -> list[MemoryVersion]:
    """Every value ``row`` held, oldest first; the last is its current value."""
    past = (
        await session.scalars(
            select(MemoryRecordVersion)
            .where(MemoryRecordVersion.record_id == row.id)
            .order_by(MemoryRecordVersion.valid_to, MemoryRecordVersion.id)
        )
    ).all()
    out = [
        MemoryVersion(
            memory_id=row.uuid,
            version=number,
            content=old.content,
            memory_type=old.memory_type,
            importance=old.importance,
            metadata=dict(old.meta),
            source_conversation=old.source_conversation,
            source_user=old.source_user,
            valid_from=old.valid_from,
            valid_to=old.valid_to,
            replaced_by=old.change,
        )
        for number, old in enumerate(past, start=1)
    ]
    out.append(
        MemoryVersion(
            memory_id=row.uuid,
            version=len(past) + 1,
            content=row.content,
            memory_type=row.memory_type,
            importance=row.importance,
            metadata=dict(row.meta),
            source_conversation=row.source_conversation,
            source_user=row.source_user,
            valid_from=past[-1].valid_to if past else row.created_at,
            valid_to=None,
            replaced_by=None,
        )
    )
    return out


async def drop_versions(session: AsyncSession, records: ColumnElement[bool]) -> int:
    """Delete the versions of the records matching ``records``; return how many.

    Called before the records themselves are deleted. The foreign key
    cascades as well; deleting here keeps the count and does not depend on
    the database enforcing it.
    """
    result: Any = await session.execute(
        delete(MemoryRecordVersion).where(
            MemoryRecordVersion.record_id.in_(select(MemoryRecord.id).where(records))
        )
    )
    return int(result.rowcount)
