"""Taking a turn's conversation: at once, or while its first request is built.

On PostgreSQL the statement that records a new conversation with its first
message costs a round trip and a flush of the write-ahead log, and the
request to the model costs CPU to build. For a turn whose model call is all
that happens before its next write, pilothouse sends the statement first,
builds the request meanwhile, and lets the request's bytes leave only once
the statement has committed (:mod:`pilothouse._sendgate`). The record is as
durable as ever before any prompt leaves; the turn just stops waiting for
the disk and the CPU one after the other.

Until the statement returns, the turn runs on a provisional handle: what the
statement would return for a new conversation (its row id aside, which
nothing reads before the next write). At the gate the real handle replaces
it; if the catalog moved since the action was compiled, the request built
on the old compilation is never sent (:class:`CatalogMoved`) and the turn
starts over on the real handle, as a turn that took its conversation first
does. If the statement failed, nothing was written and nothing is sent: the
turn raises the statement's error (:class:`StartNotWritten` carries it to
the runner).

A turn whose model calls are held on budgets in the database's ledger
holds its start statement back instead: the first hold rides in the
statement's transaction (SQLite) or in the statement itself (PostgreSQL,
as one more ``WITH`` clause), so the turn commits once before its call
rather than twice. If that hold does not take (a period's first call, a
limit in the way) the start commits alone and the gate holds as for any
call.
"""

from __future__ import annotations

__all__ = [
    "CancelledAtGate",
    "CatalogMoved",
    "NotSent",
    "StartAhead",
    "StartNotWritten",
    "start_ahead",
    "take",
]

import asyncio
import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import fields
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
from sqlalchemy import Connection

from pilothouse._sendgate import SEND_GATE
from pilothouse.runtime._replaytape import current_tape
from pilothouse.runtime._turn import (
    NewConversation,
    Opening,
    Step,
    TakeConversation,
    Turn,
    unseen_until_second_write,
)
from pilothouse.store import StoredMessage, TurnHandle, TurnStore

if TYPE_CHECKING:
    from pilothouse.runtime._compile import CompiledAction
    from pilothouse.runtime._events import TurnResult
    from pilothouse.runtime._shared import Runtime


async def take(
    store: TurnStore, tenant: str, opening: Opening, read_memory: bool | None = None
) -> TurnHandle:
    """Take the conversation for the turn, with its first step.

    ``read_memory`` overrides the opening's (False: the memory was read already).
    """
    match opening:
        case NewConversation():
            return await store.start_turn(
                tenant,
                opening.uuid,
                action_code=opening.action_code,
                agent_code=opening.agent_code,
                first=opening.first,
                memory_id=opening.memory_id,
                audit=opening.audit,
                default_audit=opening.default_audit,
                check_catalog=True,
                caller=opening.caller,
                read_memory=opening.read_memory if read_memory is None else read_memory,
            )
        case TakeConversation():
            return await store.begin_turn(
                tenant,
                opening.uuid,
                allowed=opening.allowed,
                first=opening.first,
                read_memory=opening.read_memory,
                arrived=opening.arrived,
            )


class StartNotWritten(Exception):
    """The turn's start statement failed: nothing was written, nothing sent.

    Attributes:
        cause: the statement's error, which the turn raises.
    """

    def __init__(self, cause: BaseException) -> None:
        super().__init__(str(cause))
        self.cause = cause


class NotSent(Exception):
    """The request built while the start was in flight is not sent."""


class CatalogMoved(NotSent):
    """The catalog changed since the action was compiled."""


class CancelledAtGate(NotSent):
    """The turn was cancelled while its start was in flight: no call was made."""


async def start_ahead(
    runtime: Runtime,
    opening: Opening,
    first: Step,
    compiled: CompiledAction,
    watched: bool,
    tenant: str,
) -> StartAhead | None:
    """Send the turn's start statement and go on, or hold it back, when the turn allows; else None.

    For a new conversation's new message (not a resumed call) of an action
    that runs nothing before its model call and its next write: no tools,
    advisors, retrieval, scoped memory or replay; and nobody watches the
    turn (``watched``: no listener or stream sees it running before its
    record exists). Then:

    - with budgets held in the database's ledger, the statement waits for
      the first model call's hold and carries it (in its transaction on
      SQLite, in the statement itself on PostgreSQL): one commit instead of
      two (:meth:`StartAhead.start_with`); a shared memory's messages are
      read first, for the request;
    - otherwise, on PostgreSQL (where the statement waits for the server's
      disk) and for a conversation with a memory of its own, it is sent now
      and the request is built meanwhile.
    """
    if not (
        isinstance(opening, NewConversation)
        and not compiled.advisors
        and not compiled.retrieval
        and compiled.memory.scoped is None
        and current_tape() is None
        and unseen_until_second_write(first, compiled, watched)
    ):
        return None
    shared = opening.memory_id not in (None, opening.uuid)
    # Cached per catalog revision: a statement only the first time.
    if await runtime.budgets.rules(tenant, compiled.revision):
        if runtime.budgets.in_redis:
            return None  # the hold is a Redis script: nothing to carry
        memory: list[StoredMessage] = []
        if shared:
            # The request is built on the shared memory before the start is
            # sent: read it now rather than in the start's transaction.
            assert opening.memory_id is not None, "shared"
            memory = await runtime.store.memory(tenant, opening.memory_id)
        # Not dataclasses.replace(opening, read_memory=...): copying the
        # frozen opening cost more than the rest of the start-ahead.
        read_memory = opening.read_memory and not shared
        ahead = StartAhead(
            partial(take, runtime.store, tenant, opening, read_memory),
            opening,
            tenant,
            compiled.revision,
            deferred=True,
            read_memory=read_memory,
        )
        ahead.provisional.memory = memory
        return ahead
    if shared or not runtime.database.is_asyncpg:
        return None
    ahead = StartAhead(
        partial(take, runtime.store, tenant, opening), opening, tenant, compiled.revision
    )
    # The statement's turn on the event loop: it leaves before the build.
    # Not cancelled here: the statement is on its way, and the turn's
    # handlers (which wait for it) are not yet in place.
    with anyio.CancelScope(shield=True):
        await anyio.lowlevel.checkpoint()
    return ahead


class StartAhead:
    """The start statement of a new conversation, running (or held back) while the turn goes on.

    Args:
        take: makes the statement that takes the conversation.
        opening: what it writes.
        tenant: whose conversation it is.
        revision: the catalog revision the action was compiled at.
        read_memory: whether the statement reads the memory (None: as the
            opening says; False: it was read before, into the provisional handle).
        deferred: hold the statement back until the first model call's
            budget hold rides on it (:meth:`start_with`), or the turn needs
            its record (a write, the send gate), whichever comes first.
    """

    def __init__(
        self,
        take: Callable[[], Coroutine[Any, Any, TurnHandle]],
        opening: NewConversation,
        tenant: str,
        revision: int,
        *,
        deferred: bool = False,
        read_memory: bool | None = None,
    ) -> None:
        self._take = take
        self._first = opening.first
        self._memory_read = opening.read_memory if read_memory is None else read_memory
        # Sent now on a task of its own; or, held back, written inline when
        # first needed (a task there would cost more than it saves).
        self._task = None if deferred else asyncio.ensure_future(take())
        self._outcome: TurnHandle | Exception | None = None
        """The held-back start's handle once written, or its error."""
        self._revision = revision
        self.turn: Turn | None = None
        """The turn whose handle the real one replaces (set once the turn exists)."""
        self.audit: bool | None = None
        """The runtime configuration's audit switch, applied to the real handle."""
        self._checked = False
        self._placed: TurnHandle | None = None
        """The real handle once put on the turn: later calls of :meth:`settled` return it."""
        self.provisional = TurnHandle(
            tenant=tenant,
            conversation_id=0,  # the statement returns it; nothing reads it before
            uuid=opening.uuid,
            action_code=opening.action_code,
            agent_code=opening.agent_code,
            memory_id=opening.memory_id or opening.uuid,
            audit=True,
            next_message=1,
            next_event=1,
            catalog_revision=revision,
        )

    def attach(self, turn: Turn, audit: bool | None) -> None:
        """Name the turn whose handle the real one replaces, and its audit switch."""
        self.turn, self.audit = turn, audit
        turn.started = self.settled
        if self._task is None:
            turn.start_with = self.start_with

    async def _start_now(self, work: Callable[[Connection], None] | None) -> None:
        """Write the held-back start now, ``work`` in its transaction; keep the outcome."""
        ledger = self._first.ledger
        if work is not None:
            ledger.append(work)
        try:
            self._outcome = await self._take()
        except Exception as exc:
            self._outcome = exc
        except BaseException:
            # Cancelled before the statement began (waiting for a connection):
            # nothing was written, and whoever writes it next holds nothing.
            if work is not None:
                ledger.remove(work)
            raise

    async def start_with(self, work: Callable[[Connection], None] | None) -> bool:
        """Write the held-back start now, with ``work`` in its transaction.

        Args:
            work: ledger work (the first model call's budget hold) to commit
                with the start, or None to write the start alone.

        Returns:
            Whether the start carried ``work`` (False: it was written already).

        Raises:
            StartNotWritten: the statement failed (``work`` is not committed).
        """
        carried = self._task is None and self._outcome is None and work is not None
        if carried:
            await self._start_now(work)
        await self.settled()
        return carried

    async def steps(
        self, run: Callable[[Turn, Step], Awaitable[TurnResult]], turn: Turn, first: Step
    ) -> TurnResult:
        """Run the turn's steps with the send gate open.

        If the request was not sent, nothing of the attempt is kept (no
        request event, no usage): a cancelled turn is then cancelled as
        before its model call; if the catalog moved, the turn starts over
        on the real handle, as a turn that took its conversation first does
        (it compiles again).
        """
        token = SEND_GATE.set(self)
        try:
            return await run(turn, first)
        except NotSent as unsent:
            cancelled = isinstance(unsent, CancelledAtGate)
        finally:
            SEND_GATE.reset(token)
        fresh = Turn(
            handle=turn.handle,
            compiled=turn.compiled,
            config=turn.config,
            listener=turn.listener,
            # A hold already made stays held until its settle is written,
            # and the turn is counted against turn limits once.
            settles=turn.settles,
            after_write=turn.after_write,
            budget_counted=turn.budget_counted,
        )
        for name in (f.name for f in fields(Turn)):
            # The same object: the runner records the turn it holds.
            setattr(turn, name, getattr(fresh, name))
        if cancelled:
            # Raises the cancellation here, where the runner records it.
            await anyio.lowlevel.checkpoint()
        return await run(turn, first)

    async def settled(self) -> TurnHandle:
        """The real handle, once the statement has committed; put on the turn.

        Not interrupted by cancellation: the statement itself is not (the
        store's writes are shielded), and a cancel must find the record.

        Raises:
            StartNotWritten: the statement failed.
        """
        placed = self._placed
        if placed is not None:
            # Asked again by every write and the send gate: nothing left to do.
            return placed
        task = self._task
        if task is None:
            if self._outcome is None:
                await self._start_now(None)
            outcome = self._outcome
            if isinstance(outcome, Exception):
                raise StartNotWritten(outcome) from outcome
            assert outcome is not None, "written"
            handle = outcome
        else:
            try:
                if not task.done():
                    with anyio.CancelScope(shield=True):
                        await task
                handle = task.result()
            except Exception as exc:
                raise StartNotWritten(exc) from exc
        turn = self.turn
        if turn is not None and turn.handle is not handle:
            if not self._memory_read:
                # Read before the start: what the request was built on.
                handle.memory = self.provisional.memory
            turn.handle = handle
            turn.started = turn.start_with = None
            if self.audit is not None:
                handle.audit = self.audit
        if turn is not None:
            self._placed = handle
        return handle

    async def passed(self) -> None:
        """The send gate: return once the start is durable and the request still right.

        Raises:
            StartNotWritten: the statement failed; nothing may be sent.
            CatalogMoved: the catalog changed since the request was built.
            CancelledAtGate: the turn was cancelled while it waited here
                (raised instead of the cancellation, which the model call
                would count as a call the provider had read).
        """
        handle = await self.settled()
        if not self._checked:
            self._checked = True
            if handle.catalog_revision != self._revision:
                raise CatalogMoved
            if anyio.current_effective_deadline() == -math.inf:
                raise CancelledAtGate

    async def failure(self) -> BaseException | None:
        """The statement's error once it has ended, None if it wrote the start.

        For a turn that is failing: when the start was not written there is
        nothing to record, and the turn raises the statement's error.
        """
        task = self._task
        if task is None:
            if self._outcome is None:
                with anyio.CancelScope(shield=True):
                    await self._start_now(None)
            return self._outcome if isinstance(self._outcome, Exception) else None
        with anyio.CancelScope(shield=True):
            await asyncio.wait([task])
        return None if task.cancelled() else task.exception()
