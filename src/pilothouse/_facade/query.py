"""The read half of the facade: the catalog and recorded conversations of one tenant."""

from __future__ import annotations

__all__ = ["QueryApi"]

from collections.abc import Callable, Sequence
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, TypeVar

from sqlalchemy import select

from pilothouse._facade.facet import Facet
from pilothouse.catalog._enums import ProcessStatus
from pilothouse.errors import NotFoundError
from pilothouse.store import (
    Conversation,
    ConversationQueries,
    ConversationView,
    Message,
    Page,
)

if TYPE_CHECKING:
    from pilothouse._coordination import Coordination

    # The catalog's ORM models load on the first catalog read: reading
    # conversations (the CLI's `conversations` commands) needs none of them.
    from pilothouse.catalog._models import Action, Agent, CatalogEntity, McpClient, Tool
    from pilothouse.store import Database
    from pilothouse.types import (
        BudgetStatus,
        GatewayCallRecord,
        Target,
        TargetInfo,
        UsageRow,
    )

E = TypeVar("E", bound="CatalogEntity")


class QueryApi(Facet):
    """Reads the catalog and the recorded conversations of one tenant.

    ``find_*`` returns None when nothing matches; ``get_*`` raises
    :class:`~pilothouse.errors.NotFoundError`. Catalog rows come back with
    their ``active`` flag, inactive ones included, so a caller can tell
    "disabled" from "missing". Returned rows are detached from the database
    session and safe to keep.

    Args:
        database: the store, when it is first needed.
        tenant: whose catalog and conversations.
        coordination: the deployment's Redis, where budgets are held when it
            is configured (None: in the database).
    """

    def __init__(
        self,
        database: Callable[[], Database],
        tenant: str,
        coordination: Callable[[], Coordination | None] = lambda: None,
    ) -> None:
        super().__init__(database, tenant)
        self._coordination = coordination

    async def _find(self, entity: type[E], key: str) -> E | None:
        """Return the tenant's catalog row with this business key, active or not."""
        db = await self._ready()
        column = getattr(entity, entity.key_field)
        async with db.sessions() as session:
            result = await session.scalars(
                select(entity).where(entity.tenant == self.tenant, column == key)
            )
            return result.unique().one_or_none()

    async def budget_status(self) -> list[BudgetStatus]:
        """Return where each of the tenant's active budgets stands in its current period.

        One entry per budget and subject (the tenant, or each API key, agent,
        action or user that spent under it this period); a budget nothing was
        spent under yet has one entry with zeros.
        """
        from pilothouse.runtime._budget_status import budget_status, statuses_of
        from pilothouse.runtime._budgetledger import load_rules, period_of
        from pilothouse.runtime._budgetredis import RedisLedger

        db = await self._ready()
        now = datetime.now(UTC)
        coordination = self._coordination()
        if coordination is None:
            return await db.transaction(budget_status, self.tenant, now)
        # Held in Redis: the rules from the catalog, the counters from Redis.
        ledger = RedisLedger(coordination.client, coordination.prefix)
        statuses: list[BudgetStatus] = []
        for rule in await db.transaction(load_rules, self.tenant):
            period, resets = period_of(rule.period, rule.timezone, now)
            rows = await ledger.rows(self.tenant, rule.code, period)
            statuses += statuses_of(rule, period, resets, rows)
        return statuses

    async def usage(
        self,
        *,
        group_by: Sequence[str] = ("action",),
        since: date | None = None,
        until: date | None = None,
    ) -> list[UsageRow]:
        """Return the tenant's spend and tokens, grouped, most costly first.

        Args:
            group_by: any of ``tenant``, ``key`` (the API key's prefix),
                ``agent``, ``action``, ``user`` (the memory id), ``model``
                (the model that answered) and ``day`` (UTC).
            since: the first day counted (UTC), or None for the beginning.
            until: the last day counted (UTC, included), or None for today.

        Raises:
            InvalidFieldError: an unknown grouping, or ``until`` before ``since``.
        """
        from pilothouse.runtime._usage import check_usage_query, usage_report

        check_usage_query(group_by, since, until)
        db = await self._ready()
        return await db.transaction(usage_report, self.tenant, list(group_by), since, until)

    def _conversations(self) -> ConversationQueries:
        return ConversationQueries(self._database, self.tenant)

    async def get_all_actions(self, *, include_inactive: bool = False) -> list[Action]:
        """Return the tenant's actions ordered by code.

        Args:
            include_inactive: also return deactivated actions.
        """
        from pilothouse.catalog._models import Action

        db = await self._ready()
        statement = select(Action).where(Action.tenant == self.tenant).order_by(Action.code)
        if not include_inactive:
            statement = statement.where(Action.active.is_(True))
        async with db.sessions() as session:
            return list((await session.scalars(statement)).unique())

    async def find_action_by_code(self, code: str) -> Action | None:
        """Return the action with this code, or None."""
        from pilothouse.catalog._models import Action

        return await self._find(Action, code)

    async def find_agent_by_code(self, code: str) -> Agent | None:
        """Return the agent with this code, or None."""
        from pilothouse.catalog._models import Agent

        return await self._find(Agent, code)

    async def find_tool_by_code(self, code: str) -> Tool | None:
        """Return the tool with this code, or None."""
        from pilothouse.catalog._models import Tool

        return await self._find(Tool, code)

    async def find_mcp_client_by_name(self, name: str) -> McpClient | None:
        """Return the MCP client with this name, or None."""
        from pilothouse.catalog._models import McpClient

        return await self._find(McpClient, name)

    async def list_gateway_calls(
        self,
        *,
        gateway: str | None = None,
        conversation_uuid: str | None = None,
        limit: int = 100,
    ) -> list[GatewayCallRecord]:
        """Return the audit rows of the tenant's OpenAPI gateway calls, newest first.

        Args:
            gateway: only this gateway's (its tool code).
            conversation_uuid: only those a turn of this conversation made.
            limit: at most this many (1 to 1000).
        """
        from pilothouse.store import list_gateway_calls
        from pilothouse.types import GatewayCallRecord

        rows = await list_gateway_calls(
            await self._ready(),
            self.tenant,
            gateway=gateway,
            conversation_uuid=conversation_uuid,
            limit=limit,
        )
        return [
            GatewayCallRecord(
                gateway=row.gateway,
                tool=row.tool,
                operation=row.operation,
                via=row.via,
                key_prefix=row.key_prefix,
                conversation_uuid=row.conversation_uuid,
                call_id=row.call_id,
                status_code=row.status_code,
                outcome=row.outcome,
                latency_ms=row.latency_ms,
                created_at=row.created_at,
                face=row.face,
                key_name=row.key_name,
            )
            for row in rows
        ]

    async def find_conversation(self, uuid: str) -> Conversation | None:
        """Return the conversation with this uuid, or None."""
        await self._ready()
        try:
            return await self._conversations().get(uuid)
        except NotFoundError:
            return None

    async def get_conversation(self, uuid: str) -> Conversation:
        """Return the conversation with this uuid.

        Raises:
            NotFoundError: no such conversation for this tenant.
        """
        await self._ready()
        return await self._conversations().get(uuid)

    async def get_conversation_messages(self, uuid: str) -> list[Message]:
        """Return the conversation's messages in sequence order.

        Raises:
            NotFoundError: no such conversation for this tenant.
        """
        await self._ready()
        return await self._conversations().messages(uuid)

    async def get_pending_questions(self, uuid: str) -> list[Message]:
        """Return the ``QU`` messages still waiting for answers (empty unless ``WA``).

        Raises:
            NotFoundError: no such conversation for this tenant.
        """
        await self._ready()
        return await self._conversations().pending_questions(uuid)

    async def list_conversations(
        self,
        *,
        agent: str | None = None,
        action: str | None = None,
        status: ProcessStatus | None = None,
        created_from: datetime | None = None,
        created_to: datetime | None = None,
        limit: int = 50,
        offset: int = 0,
    ) -> Page[Conversation]:
        """Return one page of conversations, newest first, with the total count.

        Args:
            agent: only this agent's conversations.
            action: only this action's conversations.
            status: only conversations in this status.
            created_from: created at or after this aware time.
            created_to: created before this aware time.
            limit: page size (at least 1).
            offset: matching conversations to skip.
        """
        await self._readable()  # also on a database refused for too-long keys
        return await self._conversations().list(
            agent=agent,
            action=action,
            status=status,
            created_from=created_from,
            created_to=created_to,
            limit=limit,
            offset=offset,
        )

    async def get_transcript(self, uuid: str) -> ConversationView:
        """Return the whole conversation: fields, messages, tool calls, timeline.

        Raises:
            NotFoundError: no such conversation for this tenant.
        """
        await self._ready()
        return await self._conversations().transcript(uuid)

    async def get_memory_messages(
        self, memory_id: str, *, limit: int | None = None
    ) -> list[Message]:
        """Return the messages of every conversation sharing a memory id, oldest first.

        Args:
            memory_id: the shared chat memory.
            limit: only the most recent ``limit`` messages; all when None.
        """
        await self._ready()
        return await self._conversations().memory_messages(memory_id, limit=limit)

    async def find_target(self, target_id: str) -> Target | None:
        """Return the active action (and agent) a target id names, or None.

        ``action:<CODE>`` and the plain ``<CODE>`` name an active action;
        ``agent:<CODE>`` names an active agent whose goal action is active.
        Anything else (unknown, inactive, another prefix) is None. One short
        read of the columns it needs: it is on every chat completion's path.
        """
        from pilothouse._facade.targets import resolve_target

        return await resolve_target(await self._ready(), self.tenant, target_id)

    async def list_targets(self) -> list[TargetInfo]:
        """Return every target: active actions, then active agents with an active goal.

        Each group is sorted by code; plain ``<CODE>`` aliases are not listed.
        """
        from pilothouse._facade.targets import list_targets

        return await list_targets(await self._ready(), self.tenant)
