"""A ``run_action`` whose turn a dead process left: run again once, then failed.

A process killed (kill -9, out of memory, a lost host) while it ran a
``run_action``'s turn leaves its conversation ``RU`` and its reply
unpublished; the redelivered command finds the conversation and is (rightly)
not run as a new one. :meth:`ActionRecovery.recover` finds such turns once
their owner is gone (its process no longer runs on this host; on another
host, no write for ``older_than`` seconds), marks them ``ST`` with the reason
and runs each again on its stored history, once: the answer then goes to the
original ``replyTo`` through the relay, like any final answer. A turn that
was run again and was interrupted again is not run a third time: its
conversation ends ``FA`` with the reason, which the relay sends as the answer.

Only a turn that never waited on the bus is recovered here (no command in the
outbox): one interrupted after a completion was applied is continued by
:meth:`~pilothouse.runtime._eventcalls.EventCalls.recover`, which knows the
calls still waiting.

The run-once mark is an ``event_processed`` row keyed by the conversation's
uuid (outcome ``recovered``): its insert is the claim, so two processes that
find the same turn run it once between them.
"""

from __future__ import annotations

__all__ = ["RECOVERED", "ActionRecovery", "first_turn_only"]

import logging
from collections.abc import Callable, Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import ColumnElement, Select, exists, select, update
from sqlalchemy.exc import IntegrityError

from pilothouse.catalog._enums import ProcessStatus, TimelineKind
from pilothouse.errors import InvalidStateError, PilothouseError
from pilothouse.runtime._record import status_event
from pilothouse.runtime._runner import Runner
from pilothouse.store import (
    Conversation,
    Database,
    EventOutbox,
    EventProcessed,
    EventReply,
    NewEvent,
    TurnBatch,
)
from pilothouse.store._base import utcnow
from pilothouse.store._leases import Leases, Orphan

logger = logging.getLogger("pilothouse.events")

RECOVERED = "recovered"
"""The ``event_processed`` outcome that marks a ``run_action`` run again after a crash."""

_STUCK = frozenset({ProcessStatus.STUCK})


def first_turn_only() -> ColumnElement[bool]:
    """The conversation never sent a command to the bus (no outbox row): its turn is the first."""
    return ~exists(
        select(EventOutbox.correlation_id).where(EventOutbox.conversation_uuid == Conversation.uuid)
    )


class ActionRecovery:
    """Runs again, once, the ``run_action`` turns dead processes left.

    Args:
        database: the store.
        runner: the runner of a tenant.
        leases: this process's lease (whose turns are never taken over) and
            its view of the other owners'.
    """

    def __init__(self, database: Database, runner: Callable[[str], Runner], leases: Leases) -> None:
        self._db = database
        self._runner = runner
        self._leases = leases

    async def recover(
        self,
        older_than: float,
        tenants: Collection[str] | None = None,
        conversation_uuid: str | None = None,
    ) -> tuple[int, int]:
        """Run interrupted ``run_action`` turns again, once; fail those interrupted twice.

        Args:
            older_than: seconds without a write after which a turn whose
                owner cannot be proved dead (another host's) is taken over.
            tenants: only these tenants' conversations (None: every tenant).
            conversation_uuid: only this conversation (the action's command
                was delivered again: it is recovered in its memory's order);
                None recovers every one, except an action with a ``memoryId``
                whose conversation had a write within ``older_than``: its
                command, delivered again, recovers it in its memory's order.

        Returns:
            How many were run again, and how many failed.
        """
        await self._mark_abandoned(older_than, tenants, conversation_uuid)
        retried = failed = 0
        for tenant, uuid, correlation_id, detail in await self._stuck(tenants, conversation_uuid):
            outcome = await self._recover_one(tenant, uuid, correlation_id, detail, older_than)
            retried += outcome == "retried"
            failed += outcome == "failed"
        return retried, failed

    def _candidates(
        self,
        statuses: Collection[ProcessStatus],
        tenants: Collection[str] | None,
        only: str | None,
    ) -> Select[str, str, str, str | None, datetime, str | None, str]:
        """``run_action`` conversations in ``statuses``, answer unsent, in their first turn."""
        statement = (
            select(
                Conversation.tenant,
                Conversation.uuid,
                EventReply.correlation_id,
                Conversation.owner,
                Conversation.updated_at,
                Conversation.error_detail,
                Conversation.memory_id,
            )
            .join(
                EventReply,
                (EventReply.conversation_uuid == Conversation.uuid)
                & (EventReply.tenant == Conversation.tenant),
            )
            .where(
                EventReply.published_at.is_(None),
                Conversation.status.in_(list(statuses)),
                first_turn_only(),
            )
        )
        if tenants is not None:
            statement = statement.where(Conversation.tenant.in_(list(tenants)))
        if only is not None:
            statement = statement.where(Conversation.uuid == only)
        return statement

    async def _mark_abandoned(
        self, older_than: float, tenants: Collection[str] | None, only: str | None
    ) -> None:
        """Move the ``RU`` turns of dead owners to ``ST``, with the reason."""
        cutoff = _naive(utcnow() - timedelta(seconds=older_than))
        async with self._db.sessions() as session:
            statement = self._candidates([ProcessStatus.RUNNING], tenants, only)
            rows = (await session.execute(statement)).all()
        for tenant, uuid, _, owner, updated_at, _, memory_id in rows:
            if owner == self._leases.owner:
                continue  # this process's own turn, running
            quiet = _naive(updated_at) < cutoff
            # A conversation without a memoryId has its own uuid as its memory.
            if only is None and memory_id != uuid and not quiet:
                continue  # left to its redelivered command, in its memory's order
            why: str | None = None
            if owner is None or not await self._leases.owner_alive(owner):
                why = "its process stopped while it ran the turn"
            elif quiet:
                why = f"its process wrote nothing for {older_than:g} s"
            if why is not None and await self._leases.mark_stuck(Orphan(tenant, uuid, owner, why)):
                logger.warning(
                    "run_action conversation %s (tenant %s) was left running: %s", uuid, tenant, why
                )

    async def _stuck(
        self, tenants: Collection[str] | None, only: str | None
    ) -> list[tuple[str, str, str, str]]:
        async with self._db.sessions() as session:
            rows = (await session.execute(self._candidates(_STUCK, tenants, only))).all()
        return [(t, u, c, _why(d or "")) for t, u, c, _, _, d, _ in rows]

    async def _recover_one(
        self, tenant: str, uuid: str, correlation_id: str, detail: str, older_than: float
    ) -> str:
        runner = self._runner(tenant)
        now = utcnow()
        try:
            async with self._db.sessions.begin() as session:
                session.add(
                    EventProcessed(
                        correlation_id=uuid,
                        tenant=tenant,
                        conversation_uuid=uuid,
                        outcome=RECOVERED,
                        processed_at=now,
                        duplicates=0,
                        detail=f"run_action {correlation_id}",
                    )
                )
                # Whichever process sees the conversation settle publishes
                # its answer (the dead process's claim would hold it back).
                await session.execute(
                    update(EventReply)
                    .where(EventReply.correlation_id == correlation_id)
                    .values(claimed_at=None)
                )
        except IntegrityError:
            return await self._fail_second(runner, uuid, correlation_id, detail, older_than)
        logger.warning(
            "run_action %s: its turn was interrupted (%s); running it again, once",
            correlation_id,
            detail,
        )
        try:
            await runner.resume(
                uuid,
                (),
                allowed=_STUCK,
                event=NewEvent(
                    TimelineKind.RECOVER,
                    {"how": "retry", "reason": "run_action interrupted", "detail": detail},
                ),
            )
        except InvalidStateError:
            return "taken"  # another process ended it meanwhile
        except PilothouseError as exc:
            # The action cannot run again (removed, say): its caller is told.
            await self._fail(
                runner,
                uuid,
                f"the run_action's turn was interrupted and could not run again: {exc}",
            )
            return "failed"
        return "retried"

    async def _fail_second(
        self, runner: Runner, uuid: str, correlation_id: str, detail: str, older_than: float
    ) -> str:
        """End a turn that was run again and stopped again; not while the retry is still taken."""
        async with self._db.sessions() as session:
            marked = await session.scalar(
                select(EventProcessed.processed_at).where(EventProcessed.correlation_id == uuid)
            )
            updated = await session.scalar(
                select(Conversation.updated_at).where(Conversation.uuid == uuid)
            )
        # The retry's own take writes after the mark; a conversation still
        # as the mark found it is another process's retry about to start
        # (or one that died before it: given ``older_than``).
        if marked is not None and updated is not None:
            fresh = _naive(updated) <= _naive(marked)
            if fresh and utcnow().replace(tzinfo=None) - _naive(marked) < timedelta(
                seconds=older_than
            ):
                return "waiting"
        reason = (
            f"the run_action's turn stopped twice: it was run again once after its process "
            f"stopped, and stopped again ({detail}); it is not run a third time"
        )
        logger.warning("run_action %s: %s", correlation_id, reason)
        return "failed" if await self._fail(runner, uuid, reason) else "taken"

    async def _fail(self, runner: Runner, uuid: str, reason: str) -> bool:
        try:
            handle = await runner.store.begin_turn(runner.tenant, uuid, allowed=_STUCK)
        except InvalidStateError:
            return False
        await runner.store.write(
            handle,
            TurnBatch(
                events=[
                    NewEvent(TimelineKind.RECOVER, {"how": "fail", "reason": reason}),
                    status_event(ProcessStatus.RUNNING, ProcessStatus.FAILED),
                ],
                status=ProcessStatus.FAILED,
                error_detail=reason,
                finished_at=utcnow(),
            ),
        )
        return True


def _why(detail: str) -> str:
    """The cause in a stuck conversation's detail, without the advice for a person."""
    return detail.removeprefix("the turn stopped without an ending: ").split("; retry or fail")[0]


def _naive(moment: Any) -> Any:
    """A timestamp without its zone (SQLite gives naive ones, PostgreSQL aware ones; both UTC)."""
    return moment.replace(tzinfo=None)
