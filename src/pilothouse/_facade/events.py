"""The event half of the facade: outbox, completions, deadlines and worker runs.

``ph.events`` is what the event faces (``pilothouse.events``: the relay, the
completion consumer, the worker, ``run_action``) call; they import nothing
else of pilothouse but the public modules. Completions and the outbox span
every tenant of the database (a completion names its call, the call names
its tenant) unless ``tenants`` narrows them: a process started for some
tenants passes them, and rows of any other tenant are left alone.
:meth:`EventApi.run_tool` runs a tool of the facade's tenant.
"""

from __future__ import annotations

__all__ = ["EventApi"]

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING, Any, Literal

from pilothouse._facade.facet import Facet, checks_own_input
from pilothouse.store import Database

if TYPE_CHECKING:
    from pilothouse.runtime import Runner, Runtime
    from pilothouse.runtime._eventcalls import (
        CompletionApplied,
        EventCalls,
        OutboxCommand,
        ToolRun,
    )
    from pilothouse.runtime._eventreplies import EventReplies, FinishedReply


class EventApi(Facet):
    """Event tools and workers (see docs/events.md).

    Args:
        database: returns the database.
        tenant: the tenant :meth:`run_tool` acts for.
        runtime: returns the process's runtime.
        runner: returns a tenant's runner (with the process's authorizer).
    """

    def __init__(
        self,
        database: Callable[[], Database],
        tenant: str,
        runtime: Callable[[], Runtime],
        runner: Callable[[str], Runner],
    ) -> None:
        super().__init__(database, tenant)
        self._runtime = runtime
        self._runner = runner

    async def _calls(self) -> EventCalls:
        from pilothouse.runtime._eventcalls import EventCalls

        return EventCalls(await self._ready(), self._runner)

    async def _replies(self) -> EventReplies:
        from pilothouse.runtime._eventreplies import EventReplies

        return EventReplies(await self._ready(), self._runner)

    async def register_reply(
        self, correlation_id: str, conversation_uuid: str, reply_to: str
    ) -> Literal["new", "duplicate"]:
        """Note where a ``run_action``'s final answer goes, before its first turn (this tenant).

        Args:
            correlation_id: the ``run_action``'s correlation id.
            conversation_uuid: the conversation it runs in.
            reply_to: the topic of its ``turn_finished``.

        Returns:
            ``new`` (run it: this caller holds the reply until it calls
            :meth:`release_reply` or :meth:`replies_sent`) or ``duplicate``
            (its conversation exists: it was run already).
        """
        return await (await self._replies()).register(
            self.tenant, correlation_id, conversation_uuid, reply_to
        )

    async def release_reply(self, correlation_id: str) -> None:
        """Leave a waiting ``run_action``'s final answer to whichever process sees it finish."""
        await (await self._replies()).release(correlation_id)

    async def replies_sent(self, correlation_ids: list[str]) -> None:
        """Note ``run_action`` final answers as published."""
        await (await self._replies()).sent(correlation_ids)

    async def finished_replies(
        self, lease: float = 120.0, limit: int = 100, *, tenants: Collection[str] | None = None
    ) -> list[FinishedReply]:
        """Claim the unpublished final answers of finished ``run_action`` conversations.

        Publish each, then call :meth:`replies_sent`.

        Args:
            lease: seconds after which a claim of a process that died before
                noting its answer published is taken over (at least once).
            limit: at most this many.
            tenants: only these tenants' answers (None: every tenant).
        """
        return await (await self._replies()).finished(lease, limit, tenants)

    async def conversation_of(self, correlation_id: str) -> str | None:
        """The conversation an event call belongs to (every tenant), or None when unknown."""
        return await (await self._calls()).conversation_of(correlation_id)

    async def unpublished(
        self, limit: int = 100, *, tenants: Collection[str] | None = None, after: int = 0
    ) -> list[OutboxCommand]:
        """Commands in the outbox not yet published, oldest first.

        Args:
            limit: at most this many.
            tenants: only these tenants' commands (None: every tenant).
            after: only commands with a greater id (the last id of the
                previous page: a relay pages past rows it cannot publish).
        """
        return await (await self._calls()).unpublished(limit, tenants, after)

    async def mark_published(self, ids: list[int]) -> None:
        """Note outbox commands as published, once the bus has taken them."""
        await (await self._calls()).mark_published(ids)

    # A worker's result and error are a tool's output: stored escaped, never refused.
    @checks_own_input("result", "error")
    async def complete(
        self,
        correlation_id: str,
        *,
        result: Any = None,
        error: str | None = None,
        tenants: Collection[str] | None = None,
    ) -> CompletionApplied:
        """Apply a ``SkillCompletionEvent``: resume the waiting conversation, at most once.

        Args:
            correlation_id: the command's correlation id.
            result: the worker's result (any JSON value).
            error: the worker's error, instead of a result.
            tenants: apply only calls of these tenants (None: every tenant).

        Returns:
            What became of it: ``applied``, ``duplicate``, ``unknown``,
            ``stale`` (all recorded, none applied twice), ``busy`` (the
            conversation runs a turn now: deliver it again later) or
            ``refused`` (a call of a tenant not in ``tenants``: nothing
            recorded).
        """
        return await (await self._calls()).complete(
            correlation_id, result=result, error=error, tenants=tenants
        )

    async def expire(self, *, tenants: Collection[str] | None = None) -> int:
        """End every event call past its deadline with a timeout result; return how many.

        Args:
            tenants: only these tenants' calls (None: every tenant).
        """
        return await (await self._calls()).expire(tenants=tenants)

    async def recover(
        self, older_than: float = 60.0, *, tenants: Collection[str] | None = None
    ) -> int:
        """Continue conversations a dead process left ``RU`` after applying a completion.

        Args:
            older_than: seconds without a write before a running conversation
                counts as abandoned (longer than any model call of yours).
            tenants: only these tenants' conversations (None: every tenant).

        Returns:
            How many were continued.
        """
        return await (await self._calls()).recover(older_than, tenants)

    async def recover_actions(
        self,
        older_than: float = 120.0,
        *,
        tenants: Collection[str] | None = None,
        conversation_uuid: str | None = None,
    ) -> tuple[int, int]:
        """Run again, once, each ``run_action`` turn a dead process left; fail it the second time.

        A turn whose owner is gone (its process no longer runs on this host;
        on another host, no write for ``older_than`` seconds) is marked
        ``ST`` and run again on its stored history; its final answer goes to
        the ``run_action``'s ``replyTo`` (publish it with
        :meth:`finished_replies`). One interrupted again is ended ``FA`` with
        the reason instead.

        Args:
            older_than: seconds without a write before the turn of an owner
                that cannot be proved dead is taken over (longer than any
                model call of yours).
            tenants: only these tenants' conversations (None: every tenant).
            conversation_uuid: only this conversation (its ``run_action`` was
                delivered again). Without it, an action with a ``memoryId``
                is left to its redelivered command until it has had no write
                for ``older_than`` seconds, so that it runs again in its
                memory's order.

        Returns:
            How many were run again, and how many failed.
        """
        from pilothouse.runtime._actionrecovery import ActionRecovery

        recovery = ActionRecovery(await self._ready(), self._runner, self._runtime().leases)
        return await recovery.recover(older_than, tenants, conversation_uuid)

    async def counts(self) -> dict[str, int]:
        """Outbox and processed counts: commands, unsent, waiting, processed, duplicates."""
        return await (await self._calls()).counts()

    def register_tools(self, reference: str | Callable[..., Any]) -> list[str]:
        """Register Python tools for :meth:`run_tool`: a function, a reference or a module.

        Returns:
            The names registered.

        Raises:
            ToolError: the reference cannot be imported or a name is taken.
        """
        from pilothouse.runtime._toolset import CatalogToolSource

        source = self._runtime().tool_source
        if not isinstance(source, CatalogToolSource):
            raise TypeError("this process's tool source takes no registrations")
        return [t.definition.name for t in source.registry.register(reference)]

    # The arguments are a model's tool call, kept as the model wrote them.
    @checks_own_input("arguments")
    async def run_tool(
        self,
        name: str,
        arguments: dict[str, Any],
        *,
        conversation_uuid: str = "",
        call_id: str = "",
        timeout: float = 30.0,
    ) -> ToolRun:
        """Run a registered Python tool or a catalog tool of this tenant, as a worker.

        Raises:
            NotFoundError: no such tool.
        """
        from pilothouse.runtime._eventcalls import run_tool

        return await run_tool(
            self._runtime(),
            await self._ready(),
            self.tenant,
            name,
            arguments,
            conversation_uuid=conversation_uuid,
            call_id=call_id,
            timeout=timeout,
        )
