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
from typing import TYPE_CHECKING, Any

import anyio

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
from pilothouse.store import TurnHandle, TurnStore

if TYPE_CHECKING:
    from pilothouse.runtime._compile import CompiledAction
    from pilothouse.runtime._events import EventHub, Listener, TurnResult
    from pilothouse.runtime._shared import Runtime


async def take(store: TurnStore, tenant: str, opening: Opening) -> TurnHandle:
    """Take the conversation for the turn, with its first step."""
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
            )
        case TakeConversation():
            return await store.begin_turn(
                tenant,
                opening.uuid,
                allowed=opening.allowed,
                first=opening.first,
                read_memory=opening.read_memory,
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
    listener: Listener | None,
    hub: EventHub,
    tenant: str,
) -> StartAhead | None:
    """Send the turn's start statement and go on, when the turn allows it; else None.

    Only on PostgreSQL (where the statement waits for the server's disk),
    for a new conversation's new message (not a resumed call) of an action
    that runs nothing before its model call and its next write: no tools,
    advisors, retrieval, scoped memory, shared memory to read, budgets or
    replay; and nobody watches the turn (no listener sees it running before
    its record exists).
    """
    if not (
        runtime.database.is_asyncpg
        and isinstance(opening, NewConversation)
        and opening.memory_id in (None, opening.uuid)
        and not compiled.advisors
        and not compiled.retrieval
        and compiled.memory.scoped is None
        and current_tape() is None
        and unseen_until_second_write(
            first, compiled, listener is not None or hub.wants_deltas(opening.uuid, tenant)
        )
    ):
        return None
    # Cached per catalog revision: a statement only the first time.
    if await runtime.budgets.rules(tenant, compiled.revision):
        return None
    ahead = StartAhead(take(runtime.store, tenant, opening), opening, tenant, compiled.revision)
    # The statement's turn on the event loop: it leaves before the build.
    # Not cancelled here: the statement is on its way, and the turn's
    # handlers (which wait for it) are not yet in place.
    with anyio.CancelScope(shield=True):
        await anyio.lowlevel.checkpoint()
    return ahead


class StartAhead:
    """The start statement of a new conversation, running while the turn goes on.

    Args:
        take: the statement that takes the conversation, not yet awaited.
        opening: what it writes.
        tenant: whose conversation it is.
        revision: the catalog revision the action was compiled at.
    """

    def __init__(
        self,
        take: Coroutine[Any, Any, TurnHandle],
        opening: NewConversation,
        tenant: str,
        revision: int,
    ) -> None:
        self._task: asyncio.Task[TurnHandle] = asyncio.ensure_future(take)
        self._revision = revision
        self.turn: Turn | None = None
        """The turn whose handle the real one replaces (set once the turn exists)."""
        self.audit: bool | None = None
        """The runtime configuration's audit switch, applied to the real handle."""
        self._checked = False
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
            handle=turn.handle, compiled=turn.compiled, config=turn.config, listener=turn.listener
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
        try:
            if not self._task.done():
                with anyio.CancelScope(shield=True):
                    await self._task
            handle = self._task.result()
        except Exception as exc:
            raise StartNotWritten(exc) from exc
        turn = self.turn
        if turn is not None and turn.handle is not handle:
            turn.handle = handle
            turn.started = None
            if self.audit is not None:
                handle.audit = self.audit
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
        with anyio.CancelScope(shield=True):
            await asyncio.wait([self._task])
        return None if self._task.cancelled() else self._task.exception()
