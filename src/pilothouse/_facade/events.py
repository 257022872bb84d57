"""The event half of the facade: outbox, completions, deadlines and worker runs.

``ph.events`` is what the event faces (``pilothouse.events``: the relay, the
completion consumer, the worker, ``run_action``) call; they import nothing
else of pilothouse but the public modules. Completions and the outbox span
every tenant of the database (a completion names its call, the call names
its tenant); :meth:`EventApi.run_tool` runs a tool of the facade's tenant.
"""

from __future__ import annotations

__all__ = ["EventApi"]

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pilothouse._facade.facet import Facet
from pilothouse.store import Database

if TYPE_CHECKING:
    from pilothouse.runtime import Runner, Runtime
    from pilothouse.runtime._eventcalls import (
        CompletionApplied,
        EventCalls,
        OutboxCommand,
        ToolRun,
    )


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

    async def unpublished(self, limit: int = 100) -> list[OutboxCommand]:
        """Commands in the outbox not yet published, oldest first (every tenant)."""
        return await (await self._calls()).unpublished(limit)

    async def mark_published(self, ids: list[int]) -> None:
        """Note outbox commands as published, once the bus has taken them."""
        await (await self._calls()).mark_published(ids)

    async def complete(
        self, correlation_id: str, *, result: Any = None, error: str | None = None
    ) -> CompletionApplied:
        """Apply a ``SkillCompletionEvent``: resume the waiting conversation, at most once.

        Args:
            correlation_id: the command's correlation id.
            result: the worker's result (any JSON value).
            error: the worker's error, instead of a result.

        Returns:
            What became of it: ``applied``, ``duplicate``, ``unknown``,
            ``stale`` (all recorded, none applied twice) or ``busy`` (the
            conversation runs a turn now: deliver it again later).
        """
        return await (await self._calls()).complete(correlation_id, result=result, error=error)

    async def expire(self) -> int:
        """End every event call past its deadline with a timeout result; return how many."""
        return await (await self._calls()).expire()

    async def recover(self, older_than: float = 60.0) -> int:
        """Continue conversations a dead process left ``RU`` after applying a completion.

        Args:
            older_than: seconds without a write before a running conversation
                counts as abandoned (longer than any model call of yours).

        Returns:
            How many were continued.
        """
        return await (await self._calls()).recover(older_than)

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
