"""A user's rights over scoped memory: erasure and access (export).

Both start from the same question, *what is stored about this user?*, and
answer it the same way (:func:`_find`), so an export shows exactly what an
erasure would remove:

- the user's sessions: those linked to them (``memory_session``), those of
  their session records, of their extraction jobs, and the conversations
  their records were derived from;
- every record whose ``user_id`` is theirs (every scope, every agent);
- every record of **any** scope derived from them: its current value or one
  of its versions names them as ``source_user``, or one of their sessions as
  ``source_conversation`` (an agent's learning extracted from their chat,
  say);
- their extraction jobs (which hold turn text).
"""

from __future__ import annotations

__all__ = ["Subject", "erase_user", "erasures", "export_user", "find_subject"]

import uuid as uuid_module
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from sqlalchemy import ColumnElement, and_, delete, or_, select

from pilothouse.memory._tables import (
    MemoryErasure,
    MemoryJob,
    MemoryRecord,
    MemoryRecordVersion,
    MemorySession,
)
from pilothouse.memory._types import ErasureReport, MemoryScope
from pilothouse.memory._versions import drop_versions

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from pilothouse.store import Database


_BATCH = 500
"""Records deleted per statement: a user may have more ids than one statement takes."""


@dataclass(frozen=True)
class Subject:
    """What identifies one user's data in one tenant.

    Attributes:
        tenant: the tenant.
        user_id: the user.
        sessions: the user's session ids (conversation uuids, as a rule).
    """

    tenant: str
    user_id: str
    sessions: frozenset[str]

    def records(self) -> ColumnElement[bool]:
        """The records stored about the user or derived from them, in any scope."""
        derived_version = select(MemoryRecordVersion.record_id).where(
            MemoryRecordVersion.tenant == self.tenant,
            or_(
                MemoryRecordVersion.source_user == self.user_id,
                MemoryRecordVersion.source_conversation.in_(self.sessions),
            ),
        )
        return and_(
            MemoryRecord.tenant == self.tenant,
            or_(
                MemoryRecord.user_id == self.user_id,
                and_(MemoryRecord.scope == "session", MemoryRecord.session_id.in_(self.sessions)),
                MemoryRecord.source_user == self.user_id,
                MemoryRecord.source_conversation.in_(self.sessions),
                MemoryRecord.id.in_(derived_version),
            ),
        )

    def jobs(self) -> ColumnElement[bool]:
        """The user's extraction jobs: theirs, or of one of their conversations."""
        return and_(
            MemoryJob.tenant == self.tenant,
            or_(MemoryJob.user_id == self.user_id, MemoryJob.conversation_uuid.in_(self.sessions)),
        )


async def _column(session: AsyncSession, column: Any, *where: ColumnElement[bool]) -> set[str]:
    found = (await session.scalars(select(column).where(*where))).all()
    return {str(value) for value in found if value is not None}


async def find_subject(session: AsyncSession, tenant: str, user_id: str) -> Subject:
    """The user's sessions, found every way the store links one to them.

    Raises:
        InvalidFieldError: a blank or over-long user id (field ``user_id``).
    """
    MemoryScope("user", user_id=user_id)  # validates the id
    sessions = await _column(
        session,
        MemorySession.session_id,
        MemorySession.tenant == tenant,
        MemorySession.user_id == user_id,
    )
    sessions |= await _column(
        session,
        MemoryRecord.session_id,
        MemoryRecord.tenant == tenant,
        MemoryRecord.user_id == user_id,
    )
    sessions |= await _column(
        session,
        MemoryRecord.source_conversation,
        MemoryRecord.tenant == tenant,
        MemoryRecord.source_user == user_id,
    )
    sessions |= await _column(
        session,
        MemoryRecordVersion.source_conversation,
        MemoryRecordVersion.tenant == tenant,
        MemoryRecordVersion.source_user == user_id,
    )
    sessions |= await _column(
        session,
        MemoryJob.conversation_uuid,
        MemoryJob.tenant == tenant,
        MemoryJob.user_id == user_id,
    )
    sessions |= await _column(
        session, MemoryJob.session_id, MemoryJob.tenant == tenant, MemoryJob.user_id == user_id
    )
    return Subject(tenant, user_id, frozenset(sessions))


async def erase_user(
    database: Database, tenant: str, user_id: str, *, requested_by: str, reason: str = ""
) -> ErasureReport:
    """Erase everything memory keeps about one user, in one transaction, and log it.

    See :meth:`pilothouse.memory.ScopedMemory.erase_user`.
    """
    from pilothouse.memory._store import subject_digest
    from pilothouse.store._datasets import delete_cases_of_conversations
    from pilothouse.store._records import Conversation

    async with database.sessions() as session, session.begin():
        subject = await find_subject(session, tenant, user_id)
        # The ids first: the condition looks at versions, which go before their records.
        ids = list((await session.scalars(select(MemoryRecord.id).where(subject.records()))).all())
        versions = 0
        for start in range(0, len(ids), _BATCH):
            batch = MemoryRecord.id.in_(ids[start : start + _BATCH])
            versions += await drop_versions(session, batch)
            await session.execute(
                delete(MemoryRecord).where(batch).execution_options(synchronize_session=False)
            )
        jobs: Any = await session.execute(delete(MemoryJob).where(subject.jobs()))
        cut = 0
        if subject.sessions:
            conversations = (
                await session.scalars(
                    select(Conversation).where(
                        Conversation.tenant == tenant, Conversation.uuid.in_(subject.sessions)
                    )
                )
            ).all()
            for conversation in conversations:
                conversation.memory_id = f"erased:{uuid_module.uuid4().hex}"
                cut += 1
        # Evaluation datasets keep nothing taken from this user's conversations.
        cases = await delete_cases_of_conversations(
            await session.connection(), tenant, subject.sessions
        )
        await session.execute(
            delete(MemorySession).where(
                MemorySession.tenant == tenant, MemorySession.user_id == user_id
            )
        )
        erasure = MemoryErasure(
            tenant=tenant,
            subject_digest=subject_digest(tenant, user_id),
            requested_by=requested_by[:128],
            reason=reason[:512],
            counts={
                "records": len(ids),
                "versions": versions,
                "jobs": int(jobs.rowcount),
                "conversations": cut,
                "dataset_cases": cases,
            },
        )
        session.add(erasure)
        await session.flush()
        return ErasureReport(
            erasure_id=erasure.id,
            records=len(ids),
            jobs=int(jobs.rowcount),
            conversations=cut,
            versions=versions,
            requested_by=erasure.requested_by,
        )


async def export_user(database: Database, tenant: str, user_id: str) -> dict[str, Any]:
    """What memory keeps about one user, as one JSON-ready document.

    Returns:
        ``{"memories": [...], "jobs": [...], "sessions": [...],
        "conversation_uuids": [...]}``: every record :func:`erase_user` would
        delete (each with ``versions``, oldest first, the last current),
        every extraction job (with the turn text it holds), the user's
        session ids, and which of them are conversations of the tenant.
        Expired session records not yet deleted are included: they are
        still stored.

    Raises:
        InvalidFieldError: a blank or over-long user id (field ``user_id``).
    """
    from pilothouse.memory._store import to_item
    from pilothouse.memory._versions import history
    from pilothouse.store._records import Conversation

    async with database.sessions() as session:
        subject = await find_subject(session, tenant, user_id)
        rows = (
            await session.scalars(
                select(MemoryRecord)
                .where(subject.records())
                .order_by(MemoryRecord.created_at, MemoryRecord.id)
            )
        ).all()
        memories = [
            {
                **to_item(row).as_json(),
                "versions": [version.as_json() for version in await history(session, row)],
            }
            for row in rows
        ]
        jobs = (
            await session.scalars(select(MemoryJob).where(subject.jobs()).order_by(MemoryJob.id))
        ).all()
        conversations = (
            await session.scalars(
                select(Conversation.uuid)
                .where(Conversation.tenant == tenant, Conversation.uuid.in_(subject.sessions))
                .order_by(Conversation.created_at, Conversation.id)
            )
        ).all()
    return {
        "memories": memories,
        "jobs": [
            {
                "id": job.id,
                "status": job.status,
                "conversation_uuid": job.conversation_uuid,
                "session_id": job.session_id,
                "agent": job.agent,
                "action_code": job.action_code,
                "messages": list(job.messages),
                "attempts": job.attempts,
                "error": job.error,
                "outcome": dict(job.outcome),
                "created_at": job.created_at.isoformat(),
                "finished_at": job.finished_at.isoformat() if job.finished_at else None,
            }
            for job in jobs
        ],
        "sessions": sorted(subject.sessions),
        "conversation_uuids": list(conversations),
    }


async def erasures(
    database: Database, tenant: str, user_id: str | None = None
) -> list[dict[str, Any]]:
    """The tenant's erasure events (of one user, by digest, when given)."""
    from pilothouse.memory._store import subject_digest

    query = select(MemoryErasure).where(MemoryErasure.tenant == tenant)
    if user_id is not None:
        query = query.where(MemoryErasure.subject_digest == subject_digest(tenant, user_id))
    async with database.sessions() as session:
        rows = (await session.scalars(query.order_by(MemoryErasure.id))).all()
    return [
        {
            "id": row.id,
            "subject_digest": row.subject_digest,
            "requested_by": row.requested_by,
            "reason": row.reason,
            "counts": dict(row.counts),
            "created_at": row.created_at.isoformat(),
        }
        for row in rows
    ]
