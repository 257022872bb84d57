"""Extraction jobs a lost process held, put back to ``pending`` at once.

A claimed job names the process that runs it (``outcome.owner``, its turn
owner id). When that process is gone (killed, out of memory, a lost host:
judged as for turns, :class:`~pilothouse.store._leases.Leases`), the job
would otherwise wait for its whole lease (300 s). A service recovers such
jobs when it starts and at every renewal of its own lease. This module
imports only the tables, so a service pays no model or embedder for it.
"""

from __future__ import annotations

__all__ = ["recover_orphaned_jobs"]

import logging
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import select, update

from pilothouse.memory._tables import MemoryJob
from pilothouse.store._base import utcnow

if TYPE_CHECKING:
    from sqlalchemy import CursorResult

    from pilothouse.store import Database
    from pilothouse.store._leases import Leases

logger = logging.getLogger(__name__)


async def recover_orphaned_jobs(database: Database, leases: Leases) -> list[int]:
    """Put back to ``pending`` the running jobs whose process is gone; return their ids.

    The lost attempt counts. Its worker applied nothing (its transaction
    never committed); should it still be running after all, its completion
    is fenced off, the job no longer being ``running`` under its attempt.
    Jobs that name no owner (claimed without a lease) wait for their lease.
    """
    async with database.sessions() as session:
        running = (
            await session.execute(
                select(MemoryJob.id, MemoryJob.attempts, MemoryJob.outcome).where(
                    MemoryJob.status == "running"
                )
            )
        ).all()
    owned: dict[int, tuple[int, str]] = {}
    for row in running:
        outcome: Any = row.outcome
        owner = cast("dict[str, Any]", outcome).get("owner") if isinstance(outcome, dict) else None
        if isinstance(owner, str):
            owned[row.id] = (row.attempts, owner)
    if not owned:
        return []
    gone = await leases.gone({owner for _, owner in owned.values()})
    recovered: list[int] = []
    for job_id, (attempts, owner) in owned.items():
        why = gone.get(owner)
        if why is None:
            continue
        async with database.sessions() as session, session.begin():
            done = await session.execute(
                update(MemoryJob)
                .where(
                    MemoryJob.id == job_id,
                    MemoryJob.status == "running",
                    MemoryJob.attempts == attempts,
                )
                .values(
                    status="pending",
                    lease_until=None,
                    error=f"its worker was lost mid-run ({why}); taken again",
                    outcome={},
                    updated_at=utcnow(),
                )
                .execution_options(synchronize_session=False)
            )
        if cast("CursorResult[Any]", done).rowcount:
            logger.warning(
                "memory job %s: its worker %s was lost mid-run (%s); pending again",
                job_id,
                owner,
                why,
            )
            recovered.append(job_id)
    return recovered
