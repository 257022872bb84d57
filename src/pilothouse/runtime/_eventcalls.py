"""Event tools: the outbox side and completions from workers.

A call of an event tool ended its turn ``WA`` with a command in
``event_outbox`` (same transaction). This module gives the relay the
unsent commands, applies a worker's ``SkillCompletionEvent`` by resuming
the conversation (the reply and the ``event_processed`` row in one
transaction), and ends overdue calls with a timeout result. It works for
any tenant: the outbox row names the conversation's tenant. Each method
takes ``tenants``: a process started for some tenants passes them, and
rows of other tenants are neither read nor applied (None: every tenant).

At most once: a completion whose correlation id is in ``event_processed``
is a duplicate (or late, after the timeout): it is counted there and
ignored. A completion for a conversation that is running a turn right now
(another call's completion being applied) is ``busy``: the caller tries
again later, the bus keeps it meanwhile.
"""

from __future__ import annotations

__all__ = ["CompletionApplied", "EventCalls", "OutboxCommand", "ToolRun", "run_tool"]

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal

import anyio
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from pilothouse._caller import Caller
from pilothouse.catalog._enums import ProcessStatus, TimelineKind, ToolCallStatus
from pilothouse.errors import InvalidStateError
from pilothouse.runtime._actionrecovery import RECOVERED
from pilothouse.runtime._events import ReturnedCall, TurnResult
from pilothouse.runtime._runner import Runner
from pilothouse.runtime._shared import Runtime
from pilothouse.runtime._toolset import CatalogToolSource
from pilothouse.runtime._turn import ToolReply
from pilothouse.store import (
    Conversation,
    ConversationQueries,
    Database,
    EventOutbox,
    EventProcessed,
    NewEvent,
    NewProcessed,
)
from pilothouse.store._base import utcnow

Outcome = Literal["applied", "duplicate", "unknown", "stale", "busy", "refused"]


@dataclass(frozen=True, slots=True)
class OutboxCommand:
    """An outbox row the relay publishes.

    Attributes:
        id: the row's id (to mark it sent).
        correlation_id: the key to publish under.
        topic: the command topic.
        payload: the ``SkillInvocationEvent``.
    """

    id: int
    correlation_id: str
    topic: str
    payload: dict[str, Any]


@dataclass(frozen=True, slots=True)
class CompletionApplied:
    """What became of one completion.

    Attributes:
        outcome: ``applied``; ``duplicate`` (already processed: counted and
            ignored); ``unknown`` (no such call); ``stale`` (the call or
            its conversation no longer waits: recorded and ignored);
            ``busy`` (the conversation runs a turn: try again later);
            ``refused`` (the call is of a tenant the caller does not serve:
            nothing is recorded, so that tenant's own process may apply it).
        conversation_uuid: the conversation, when known.
        result: the resumed turn's result, when applied.
    """

    outcome: Outcome
    conversation_uuid: str | None = None
    result: TurnResult | None = None


class EventCalls:
    """The outbox and completions of event tools, for every tenant of a process.

    Args:
        database: the store.
        runner: the runner of a tenant (resumes its conversations, with the
            process's authorizer).
    """

    def __init__(self, database: Database, runner: Callable[[str], Runner]) -> None:
        self._db = database
        self._runner = runner

    async def unpublished(
        self, limit: int = 100, tenants: Collection[str] | None = None, after: int = 0
    ) -> list[OutboxCommand]:
        """Commands not yet published, oldest first (of ``tenants``, or every tenant).

        ``after`` pages on: only rows with a greater id (the last id of the
        previous page), so a relay reaches every row even when the oldest
        ones cannot be published.
        """
        statement = select(EventOutbox).where(
            EventOutbox.published_at.is_(None), EventOutbox.id > after
        )
        if tenants is not None:
            statement = statement.where(EventOutbox.tenant.in_(list(tenants)))
        async with self._db.sessions() as session:
            rows = await session.scalars(statement.order_by(EventOutbox.id).limit(limit))
            return [OutboxCommand(r.id, r.correlation_id, r.topic, r.payload) for r in rows]

    async def conversation_of(self, correlation_id: str) -> str | None:
        """The conversation of an event call, or None when no command has that id."""
        async with self._db.sessions() as session:
            return await session.scalar(
                select(EventOutbox.conversation_uuid).where(
                    EventOutbox.correlation_id == correlation_id
                )
            )

    async def mark_published(self, ids: list[int]) -> None:
        """Note commands as published (the relay calls this after the bus took them)."""
        if not ids:
            return
        async with self._db.sessions.begin() as session:
            await session.execute(
                update(EventOutbox)
                .where(EventOutbox.id.in_(ids))
                .values(published_at=utcnow(), attempts=EventOutbox.attempts + 1)
            )

    async def counts(self) -> dict[str, int]:
        """Outbox and processed counts, for metrics and tests."""
        async with self._db.sessions() as session:
            unsent = await session.scalar(
                select(func.count()).where(EventOutbox.published_at.is_(None))
            )
            total = await session.scalar(select(func.count()).select_from(EventOutbox))
            # A run_action's run-again mark is no completion.
            processed = await session.scalar(
                select(func.count())
                .select_from(EventProcessed)
                .where(EventProcessed.outcome != RECOVERED)
            )
            duplicates = await session.scalar(
                select(func.coalesce(func.sum(EventProcessed.duplicates), 0))
            )
            waiting = await session.scalar(
                select(func.count())
                .select_from(EventOutbox)
                .where(~EventOutbox.correlation_id.in_(select(EventProcessed.correlation_id)))
            )
        return {
            "commands": int(total or 0),
            "unsent": int(unsent or 0),
            "processed": int(processed or 0),
            "duplicates": int(duplicates or 0),
            "waiting": int(waiting or 0),
        }

    async def complete(
        self,
        correlation_id: str,
        *,
        result: Any = None,
        error: str | None = None,
        outcome: str | None = None,
        tenants: Collection[str] | None = None,
        caller: Caller | None = None,
    ) -> CompletionApplied:
        """Apply a worker's completion: resume the conversation with the result.

        Args:
            correlation_id: the command's correlation id.
            result: the tool's result (any JSON value; a string is sent as is).
            error: the worker's error, instead of a result.
            outcome: recorded in ``event_processed`` (default ``result`` or
                ``error``; the deadline sweep passes ``timeout``).
            tenants: apply only calls of these tenants (None: every tenant);
                another tenant's call is ``refused`` and nothing is recorded.
            caller: who gave the result instead of a worker (face and API
                key), named on its event; the turn it resumes is charged to
                its key's budgets.
        """
        kind = outcome or ("error" if error is not None else "result")
        async with self._db.sessions() as session:
            command = await session.scalar(
                select(EventOutbox).where(EventOutbox.correlation_id == correlation_id)
            )
            if command is not None and tenants is not None and command.tenant not in tenants:
                # Checked before anything is written: recording it (even as a
                # duplicate) would be this process acting for that tenant.
                return CompletionApplied("refused")
            done = await session.get(EventProcessed, correlation_id)
            if done is not None:
                await self._duplicate(correlation_id, f"{kind} after {done.outcome}")
                return CompletionApplied("duplicate", done.conversation_uuid)
        if command is None:
            await self._record(correlation_id, None, None, "unknown", "no command with this id")
            return CompletionApplied("unknown")
        uuid, tenant = command.conversation_uuid, command.tenant
        queries = ConversationQueries(self._db, tenant)
        conversation = await queries.get(uuid)
        calls = await queries.tool_calls(uuid)
        call = next((c for c in calls if c.call_id == command.call_id), None)
        if conversation.status is ProcessStatus.RUNNING:
            return CompletionApplied("busy", uuid)
        if (
            call is None
            or call.status is not ToolCallStatus.RETURNED
            or conversation.status is not ProcessStatus.WAITING
        ):
            await self._record(
                correlation_id, tenant, uuid, "stale", _why_stale(conversation, call is None)
            )
            return CompletionApplied("stale", uuid)
        on_bus = await self._on_bus(uuid)
        pending = [
            ReturnedCall(c.call_id, c.name, c.arguments, on_bus.get(c.call_id))
            for c in calls
            if c.status is ToolCallStatus.RETURNED and c.call_id != command.call_id
        ]
        if error is not None:
            content = error if error.startswith("tool.exec.") else f"tool.exec.error: {error}"
            status = ToolCallStatus.FAILED
        else:
            content = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
            status = ToolCallStatus.SUCCEEDED
        event = NewEvent(
            TimelineKind.TOOL_EXECUTION,
            {
                "call_id": command.call_id,
                "tool": call.name,
                "status": f"completion: {kind}",
                "correlation_id": correlation_id,
                **({"caller": caller.as_data()} if caller is not None else {}),
            },
        )
        runner = self._runner(tenant)
        try:
            turn = await runner.resume(
                uuid,
                [ToolReply(command.call_id, call.name, content, status)],
                allowed=frozenset({ProcessStatus.WAITING}),
                event=event,
                still_pending=pending,
                waiting=any(p.correlation_id for p in pending),
                processed=[NewProcessed(correlation_id, kind)],
                caller=caller,
            )
        except InvalidStateError:
            # Another process took the conversation between the read and the
            # take (its status check is atomic): let the bus deliver again.
            return CompletionApplied("busy", uuid)
        return CompletionApplied("applied", uuid, turn)

    async def submit(
        self, tenant: str, uuid: str, call_id: str, result: Any, caller: Caller | None = None
    ) -> TurnResult | None:
        """Answer an event call with a caller's result (``submit_tool_result``).

        The result is applied as the worker's completion would be, with an
        ``event_processed`` row (outcome ``submitted``) in the same
        transaction: the bus completion that comes later is a duplicate,
        counted and ignored. A call the bus (or the deadline) answered first
        is refused, and the refused submission is counted on that row.
        ``caller`` (who submits) is named on the result's event, and the
        turn it resumes is charged to its API key's budgets.

        Returns:
            The resumed turn, or None when ``call_id`` is no event call (the
            caller answers it as a custom-schema call).

        Raises:
            InvalidStateError: the call was answered already, or its
                conversation is running a turn or no longer waits.
        """
        async with self._db.sessions() as session:
            command = await session.scalar(
                select(EventOutbox).where(
                    EventOutbox.tenant == tenant,
                    EventOutbox.conversation_uuid == uuid,
                    EventOutbox.call_id == call_id,
                )
            )
            if command is None:
                return None
            done = await session.get(EventProcessed, command.correlation_id)
        correlation_id = command.correlation_id
        if done is None:
            applied = await self.complete(
                correlation_id, result=result, outcome="submitted", caller=caller
            )
            if applied.outcome == "applied" and applied.result is not None:
                return applied.result
            if applied.outcome == "busy":
                raise InvalidStateError(
                    f"conversation '{uuid}' is running a turn; submit the result of "
                    f"'{call_id}' again when it waits"
                )
            if applied.outcome != "duplicate":
                raise InvalidStateError(
                    f"tool call '{call_id}' of conversation '{uuid}' no longer waits for a result"
                )
            # Answered by the bus between the read and the apply: refused below.
        else:
            await self._duplicate(correlation_id, "submit_tool_result after " + done.outcome)
        async with self._db.sessions() as session:
            done = await session.get(EventProcessed, correlation_id)
        answered = done.outcome if done is not None else "a completion"
        raise InvalidStateError(
            f"tool call '{call_id}' is not waiting for a result: its event call "
            f"'{correlation_id}' was answered already ({answered})"
        )

    async def expire(
        self, now: datetime | None = None, tenants: Collection[str] | None = None
    ) -> int:
        """End every call past its deadline with a timeout result the model sees.

        Args:
            now: the moment to compare deadlines with (default: now).
            tenants: only calls of these tenants (None: every tenant).

        Returns:
            How many calls were ended.
        """
        moment = now or utcnow()
        statement = select(
            EventOutbox.correlation_id,
            EventOutbox.skill_name,
            EventOutbox.created_at,
            EventOutbox.deadline,
        ).where(
            EventOutbox.deadline < moment,
            ~EventOutbox.correlation_id.in_(select(EventProcessed.correlation_id)),
        )
        if tenants is not None:
            statement = statement.where(EventOutbox.tenant.in_(list(tenants)))
        async with self._db.sessions() as session:
            rows = (await session.execute(statement.order_by(EventOutbox.deadline))).all()
        ended = 0
        for correlation_id, skill, created, deadline in rows:
            seconds = round((deadline - created).total_seconds(), 3)
            applied = await self.complete(
                correlation_id,
                error=f"tool.exec.timeout: no completion for '{skill}' within {seconds:g} s",
                outcome="timeout",
                tenants=tenants,
            )
            ended += applied.outcome == "applied"
        return ended

    async def recover(self, older_than: float, tenants: Collection[str] | None = None) -> int:
        """Go on with conversations a dead process left running after applying a completion.

        A process killed between the transaction that applied a completion
        (the result is recorded, the conversation ``RU``) and the end of the
        model call it then made leaves the conversation ``RU``; the completion
        is processed, so no redelivery resumes it. A conversation ``RU`` with
        an applied completion and no write for ``older_than`` seconds is taken
        over and continued from its stored history (the turn is driven again:
        one more model call, recorded as such).

        Args:
            older_than: seconds without a write.
            tenants: only conversations of these tenants (None: every tenant).

        Returns:
            How many conversations were continued.
        """
        cutoff = utcnow() - timedelta(seconds=older_than)
        statement = select(Conversation.tenant, Conversation.uuid).where(
            Conversation.status == ProcessStatus.RUNNING,
            Conversation.updated_at < cutoff,
            Conversation.uuid.in_(
                select(EventProcessed.conversation_uuid).where(
                    EventProcessed.outcome.in_(["result", "error", "timeout", "submitted"])
                )
            ),
        )
        if tenants is not None:
            statement = statement.where(Conversation.tenant.in_(list(tenants)))
        async with self._db.sessions() as session:
            rows = (await session.execute(statement.order_by(Conversation.updated_at))).all()
        continued = 0
        for tenant, uuid in rows:
            calls = await ConversationQueries(self._db, tenant).tool_calls(uuid)
            on_bus = await self._on_bus(uuid)
            pending = [
                ReturnedCall(c.call_id, c.name, c.arguments, on_bus.get(c.call_id))
                for c in calls
                if c.status is ToolCallStatus.RETURNED
            ]
            event = NewEvent(
                TimelineKind.TOOL_EXECUTION,
                {"status": "continued after the process applying a completion stopped"},
            )
            try:
                await self._runner(tenant).resume(
                    uuid,
                    [],
                    allowed=frozenset({ProcessStatus.RUNNING}),
                    event=event,
                    still_pending=pending,
                    waiting=any(p.correlation_id for p in pending),
                )
            except InvalidStateError:
                continue  # another process took it meanwhile
            continued += 1
        return continued

    async def _on_bus(self, uuid: str) -> dict[str, str]:
        async with self._db.sessions() as session:
            rows = await session.execute(
                select(EventOutbox.call_id, EventOutbox.correlation_id).where(
                    EventOutbox.conversation_uuid == uuid,
                    ~EventOutbox.correlation_id.in_(select(EventProcessed.correlation_id)),
                )
            )
            return {call_id: cid for call_id, cid in rows.all()}

    async def _record(
        self, correlation_id: str, tenant: str | None, uuid: str | None, outcome: str, detail: str
    ) -> None:
        try:
            async with self._db.sessions.begin() as session:
                session.add(
                    EventProcessed(
                        correlation_id=correlation_id,
                        tenant=tenant,
                        conversation_uuid=uuid,
                        outcome=outcome,
                        duplicates=0,
                        detail=detail,
                    )
                )
        except IntegrityError:
            # Recorded meanwhile by another consumer: this one is a duplicate.
            await self._duplicate(correlation_id, detail)

    async def _duplicate(self, correlation_id: str, detail: str) -> None:
        async with self._db.sessions.begin() as session:
            await session.execute(
                update(EventProcessed)
                .where(EventProcessed.correlation_id == correlation_id)
                .values(
                    duplicates=EventProcessed.duplicates + 1,
                    last_duplicate_at=utcnow(),
                    detail=func.coalesce(EventProcessed.detail, detail),
                )
            )


def _why_stale(conversation: Conversation, missing: bool) -> str:
    if missing:
        return "the conversation has no such tool call"
    status = conversation.status
    return f"the call no longer waits (conversation {status.name} {status.value})"


@dataclass(frozen=True, slots=True)
class ToolRun:
    """What a worker's run of one tool gave.

    Attributes:
        result: the structured result when the tool has one, else its text.
        error: why it failed (``tool.exec.*: ...``), or None.
    """

    result: Any
    error: str | None


async def run_tool(
    runtime: Runtime,
    database: Database,
    tenant: str,
    name: str,
    arguments: dict[str, Any],
    *,
    conversation_uuid: str = "",
    call_id: str = "",
    timeout: float = 30.0,
) -> ToolRun:
    """Run a registered Python tool, or a catalog tool of ``tenant``, as a worker does.

    Raises:
        NotFoundError: no registered tool and no active runnable catalog
            tool has that name.
    """
    with runtime.tenant_egress(tenant):
        return await _run_tool(
            runtime,
            database,
            tenant,
            name,
            arguments,
            conversation_uuid=conversation_uuid,
            call_id=call_id,
            timeout=timeout,
        )


async def _run_tool(
    runtime: Runtime,
    database: Database,
    tenant: str,
    name: str,
    arguments: dict[str, Any],
    *,
    conversation_uuid: str = "",
    call_id: str = "",
    timeout: float = 30.0,
) -> ToolRun:
    from pilothouse.catalog._enums import ToolKind
    from pilothouse.catalog._models import Tool
    from pilothouse.errors import NotFoundError
    from pilothouse.tools._base import ToolContext

    source = runtime.tool_source
    registry = source.registry if isinstance(source, CatalogToolSource) else None
    if registry is not None and name in registry:
        tool = registry.get(name)
    else:
        async with database.sessions() as session:
            row = await session.scalar(
                select(Tool).where(
                    Tool.tenant == tenant,
                    Tool.name == name,
                    Tool.active.is_(True),
                    Tool.kind.in_([ToolKind.PYTHON, ToolKind.REST, ToolKind.SCRIPT]),
                )
            )
        if row is None:
            raise NotFoundError(
                f"no registered tool and no python, rest or script tool named '{name}' "
                f"in tenant '{tenant}'"
            )
        tool = await source.tool(row)
    context = ToolContext(tenant, conversation_uuid, call_id, timeout)
    try:
        with anyio.fail_after(timeout):
            outcome = await tool.execute(arguments, context)
    except TimeoutError:
        return ToolRun(None, f"tool.exec.timeout: '{name}' took longer than {timeout:g} s")
    if outcome.is_error:
        return ToolRun(None, f"{outcome.error_code or 'tool.exec.error'}: {outcome.content}")
    return ToolRun(outcome.data if outcome.data is not None else outcome.content, None)
