"""Who runs which turn: process leases, orphaned turns, cancels across processes.

A running turn holds its conversation (``RU``). Each process that runs
turns is a :class:`~pilothouse.store.TurnOwner` row, registered once, and
every turn it takes carries its id in ``conversation.owner`` (set by the
statement that takes the conversation, so a turn pays nothing for it). A
process that dies (kill -9, out of memory, a lost host) leaves its turns
``RU``; :meth:`Leases.orphans` finds those no live process owns, and
:meth:`Leases.mark_stuck` moves them to ``ST`` with a detail saying what
happened, for ``pilothouse conversations recover``.

An owner is alive when:

- it is on this host: its pid runs and started when the owner registered
  (``pid_start``: a restarted container reuses pid 1);
- it is on another host: its heartbeat is younger than the lease. An owner
  without a heartbeat (a library process) on another host is never
  presumed dead; ``recover --force`` ends its turns.

A cancel for a turn another process runs is a ``turn_cancel`` row
(:meth:`Leases.request_cancel`); the owner polls for the requests addressed
to it (:meth:`Leases.take_cancel_requests`) and cancels the turn itself, so
the turn's own recorder writes ``TE`` with its usage, as a local cancel
would, and no two writers ever number the same timeline.
"""

from __future__ import annotations

__all__ = ["Leases", "Orphan", "OwnerIdentity", "process_start"]

import os
import socket
import uuid as uuid_module
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
from sqlalchemy import Connection, delete, func, insert, select, update

from pilothouse.catalog._enums import ProcessStatus, TimelineKind
from pilothouse.store._base import utcnow
from pilothouse.store._engine import Database
from pilothouse.store._tables import (
    conversation_table,
    timeline_event_table,
    turn_cancel_table,
    turn_owner_table,
)

_CONVERSATION = conversation_table
_OWNER = turn_owner_table
_EVENT = timeline_event_table
_CANCEL = turn_cancel_table


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` in clock ticks since boot; None if unknown.

    Linux only (``/proc``); elsewhere liveness rests on the pid alone.
    """
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after its end.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[19])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        # Another user's process: it exists.
        return True
    return True


@dataclass(frozen=True)
class OwnerIdentity:
    """This process as an owner of turns."""

    id: str
    host: str
    pid: int
    pid_start: int | None

    @classmethod
    def of_this_process(cls) -> OwnerIdentity:
        """A fresh owner id for this process."""
        pid = os.getpid()
        return cls(str(uuid_module.uuid4()), socket.gethostname(), pid, process_start(pid))


@dataclass(frozen=True)
class Orphan:
    """A conversation left running by an owner that is gone."""

    tenant: str
    uuid: str
    owner: str | None
    why: str


class Leases:
    """One process's lease, and what it knows of the others'.

    Args:
        database: the store's database.
        identity: this process as an owner.
        lease_seconds: how old another host's heartbeat may be before its
            owner is presumed dead.
    """

    def __init__(
        self, database: Database, identity: OwnerIdentity, *, lease_seconds: float = 30.0
    ) -> None:
        self._db = database
        self.identity = identity
        self.lease = timedelta(seconds=lease_seconds)
        self._registered = False
        # Concurrent first turns of a process register it once: two
        # delete-then-insert transactions at once clash on the key
        # (PostgreSQL: a unique violation that failed one of the turns).
        self._registering = anyio.Lock()

    @property
    def registered(self) -> bool:
        """Whether this process's owner row is written."""
        return self._registered

    @property
    def owner(self) -> str:
        """This process's owner id (what its turns write in ``conversation.owner``)."""
        return self.identity.id

    async def register(self, *, heartbeat: bool = False) -> None:
        """Record this process as an owner (once); with a heartbeat when it will renew it."""
        if self._registered and not heartbeat:
            return
        async with self._registering:
            if self._registered and not heartbeat:
                return
            await self._register(heartbeat)

    async def _register(self, heartbeat: bool) -> None:
        me = self.identity
        now = utcnow()

        def write(connection: Connection) -> None:
            connection.execute(delete(_OWNER).where(_OWNER.c.id == me.id))
            connection.execute(
                insert(_OWNER).values(
                    id=me.id,
                    host=me.host,
                    pid=me.pid,
                    pid_start=me.pid_start,
                    started_at=now,
                    heartbeat_at=now if heartbeat else None,
                )
            )

        await self._db.transaction(write)
        self._registered = True

    async def heartbeat(self) -> None:
        """Renew this process's lease."""
        now = utcnow()
        await self._db.transaction(
            lambda c: c.execute(
                update(_OWNER).where(_OWNER.c.id == self.owner).values(heartbeat_at=now)
            )
        )

    async def unregister(self) -> None:
        """Give the lease up (a clean stop): its turns, if any are left, are orphans."""
        await self._db.transaction(
            lambda c: c.execute(delete(_OWNER).where(_OWNER.c.id == self.owner))
        )
        self._registered = False

    def _dead_reason(self, row: Any, now: datetime) -> str | None:
        """Why the owner ``row`` is presumed dead; None while it may be alive."""
        if row.id == self.owner:
            return None
        if row.host == self.identity.host:
            if not _pid_alive(row.pid):
                return f"its process (pid {row.pid} on {row.host}) is gone"
            started = process_start(row.pid)
            if row.pid_start is not None and started is not None and started != row.pid_start:
                return f"its process (pid {row.pid} on {row.host}) is gone (the pid was reused)"
            return None
        if row.heartbeat_at is not None and now - row.heartbeat_at > self.lease:
            return (
                f"its process (pid {row.pid} on {row.host}) sent no heartbeat since "
                f"{row.heartbeat_at.isoformat(timespec='seconds')}"
            )
        return None

    async def orphans(self, *, force: bool = False) -> list[Orphan]:
        """Running conversations no live process owns.

        Args:
            force: also those of owners that cannot be proved dead (another
                host's owner without heartbeat, or one whose lease is still
                fresh), except this process's own.
        """
        now = utcnow()

        def read(connection: Connection) -> tuple[list[Any], dict[str, Any]]:
            running = list(
                connection.execute(
                    select(
                        _CONVERSATION.c.tenant, _CONVERSATION.c.uuid, _CONVERSATION.c.owner
                    ).where(_CONVERSATION.c.status == ProcessStatus.RUNNING)
                )
            )
            owners = {row.owner for row in running if row.owner is not None}
            found: dict[str, Any] = {}
            if owners:
                for row in connection.execute(select(_OWNER).where(_OWNER.c.id.in_(owners))).all():
                    found[row.id] = row
            return running, found

        running, owners = await self._db.transaction(read)
        found: list[Orphan] = []
        for tenant, uuid, owner in running:
            row = owners.get(owner) if owner is not None else None
            if owner == self.owner:
                continue
            if owner is None:
                why = "it was started by a version that did not record the turn's owner"
            elif row is None:
                why = "its process stopped without finishing it"
            else:
                why = self._dead_reason(row, now)
                if why is None and force:
                    why = f"recovery was forced (owner pid {row.pid} on {row.host})"
            if why is not None:
                found.append(Orphan(tenant, uuid, owner, why))
        return found

    async def mark_stuck(self, orphan: Orphan) -> bool:
        """Move an orphaned ``RU`` conversation to ``ST`` with the reason; False if it moved on.

        The status and owner in the WHERE clause make it safe against a
        sweep running at the same time in another process.
        """
        detail = (
            f"the turn stopped without an ending: {orphan.why}; "
            "retry or fail it with `pilothouse conversations recover`"
        )
        now = utcnow()

        def write(connection: Connection) -> bool:
            conversation = _CONVERSATION.c
            found = connection.execute(
                select(conversation.id, conversation.audit).where(
                    conversation.uuid == orphan.uuid, conversation.tenant == orphan.tenant
                )
            ).first()
            if found is None:
                return False
            owner_test = (
                conversation.owner.is_(None)
                if orphan.owner is None
                else conversation.owner == orphan.owner
            )
            moved = connection.execute(
                update(_CONVERSATION)
                .where(
                    conversation.id == found.id,
                    conversation.status == ProcessStatus.RUNNING,
                    owner_test,
                )
                .values(
                    status=ProcessStatus.STUCK,
                    error_detail=detail,
                    owner=None,
                    version=conversation.version + 1,
                    updated_at=now,
                )
            ).rowcount
            if moved != 1:
                return False
            if found.audit:
                last = connection.execute(
                    select(func.max(_EVENT.c.sequence)).where(_EVENT.c.conversation_id == found.id)
                ).scalar()
                connection.execute(
                    insert(_EVENT).values(
                        conversation_id=found.id,
                        sequence=int(last or 0) + 1,
                        kind=TimelineKind.STATUS_CHANGE,
                        data={
                            "from": ProcessStatus.RUNNING.value,
                            "to": ProcessStatus.STUCK.value,
                            "reason": detail,
                            "owner": orphan.owner,
                        },
                        created_at=now,
                    )
                )
            return True

        return await self._db.transaction(write)

    async def sweep(self, *, force: bool = False) -> list[Orphan]:
        """Mark every orphaned running conversation ``ST``; returns those marked.

        Then forgets the owners that are provably dead: their turns are marked.
        """
        marked: list[Orphan] = []
        for orphan in await self.orphans(force=force):
            if await self.mark_stuck(orphan):
                marked.append(orphan)
        await self._forget_dead_owners()
        return marked

    async def _forget_dead_owners(self) -> None:
        now = utcnow()
        rows = await self._db.transaction(lambda c: c.execute(select(_OWNER)).all())
        dead = [row.id for row in rows if self._dead_reason(row, now) is not None]
        if dead:
            await self._db.transaction(
                lambda c: c.execute(delete(_OWNER).where(_OWNER.c.id.in_(dead)))
            )

    async def running_owner(self, tenant: str, conversation_uuid: str) -> tuple[bool, str | None]:
        """Whether the conversation is ``RU`` and whose turn holds it."""
        found = await self._db.transaction(
            lambda c: c.execute(
                select(_CONVERSATION.c.status, _CONVERSATION.c.owner).where(
                    _CONVERSATION.c.uuid == conversation_uuid, _CONVERSATION.c.tenant == tenant
                )
            ).first()
        )
        if found is None:
            return False, None
        return found.status is ProcessStatus.RUNNING, found.owner

    async def gone(self, owners: set[str]) -> dict[str, str]:
        """Of ``owners``, those no live process holds, each with why (never this process).

        An owner without a row stopped (a clean stop gives its row up) or
        was forgotten as dead; one with a row is judged as for turns.
        """
        others = sorted(owners - {self.owner})
        if not others:
            return {}
        now = utcnow()
        rows = await self._db.transaction(
            lambda c: c.execute(select(_OWNER).where(_OWNER.c.id.in_(others))).all()
        )
        found = {row.id: row for row in rows}
        reasons: dict[str, str] = {}
        for owner in others:
            row = found.get(owner)
            why = "its process stopped" if row is None else self._dead_reason(row, now)
            if why is not None:
                reasons[owner] = why
        return reasons

    async def owner_alive(self, owner: str) -> bool:
        """Whether ``owner`` may still be running (not provably dead)."""
        row = await self._db.transaction(
            lambda c: c.execute(select(_OWNER).where(_OWNER.c.id == owner)).first()
        )
        return row is not None and self._dead_reason(row, utcnow()) is None

    async def request_cancel(
        self, tenant: str, conversation_uuid: str, owner: str, reason: str
    ) -> bool:
        """Ask ``owner`` to cancel the conversation's running turn; False if none runs."""
        now = utcnow()

        def write(connection: Connection) -> bool:
            conversation = _CONVERSATION.c
            found = connection.execute(
                select(conversation.id).where(
                    conversation.uuid == conversation_uuid,
                    conversation.tenant == tenant,
                    conversation.status == ProcessStatus.RUNNING,
                    conversation.owner == owner,
                )
            ).scalar()
            if found is None:
                return False
            connection.execute(delete(_CANCEL).where(_CANCEL.c.conversation_id == found))
            connection.execute(
                insert(_CANCEL).values(
                    conversation_id=found, owner=owner, reason=reason[:64], requested_at=now
                )
            )
            return True

        return await self._db.transaction(write)

    async def take_cancel_requests(self) -> list[tuple[str, str]]:
        """The (tenant, uuid) of this process's turns a cancel was asked for; consumed."""

        def take(connection: Connection) -> list[tuple[str, str]]:
            rows = list(
                connection.execute(
                    select(_CANCEL.c.conversation_id, _CONVERSATION.c.tenant, _CONVERSATION.c.uuid)
                    .join(_CONVERSATION, _CONVERSATION.c.id == _CANCEL.c.conversation_id)
                    .where(_CANCEL.c.owner == self.owner)
                )
            )
            if not rows:
                return []
            connection.execute(
                delete(_CANCEL).where(
                    _CANCEL.c.conversation_id.in_([row.conversation_id for row in rows])
                )
            )
            return [(row.tenant, row.uuid) for row in rows]

        return await self._db.transaction(take)

    async def forget_stale_requests(self, older_than: timedelta) -> None:
        """Delete cancel requests nobody took (their owner died or the turn had ended)."""
        limit = utcnow() - older_than
        await self._db.transaction(
            lambda c: c.execute(delete(_CANCEL).where(_CANCEL.c.requested_at < limit))
        )
