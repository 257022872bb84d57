"""What a tenant spent, grouped: ``ph.query.usage()`` (``pilothouse usage``, ``GET /v1/usage``).

Reads the conversations' running totals (tokens and estimated cost) and adds
them up per tenant, API key, agent, action, user (memory id), model (the one
that answered) or day (UTC). A conversation counts on the day it started.
"""

from __future__ import annotations

__all__ = ["USAGE_GROUPS", "UsageRow", "usage_report"]

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, select

from pilothouse.store._tables import conversation_table

USAGE_GROUPS = ("tenant", "api_key", "agent", "action", "user", "model", "day")
"""What a usage report can group by."""


@dataclass(frozen=True, slots=True)
class UsageRow:
    """The spend of one group.

    Attributes:
        group: what the report grouped by (``action``, ``day``...).
        key: the group's value (an action code, ``2026-12-06``...); None when
            the conversations had none (no API key, no agent).
        conversations: how many conversations.
        input_tokens: their input tokens.
        output_tokens: their output tokens.
        cost: their estimated cost, as a decimal string.
    """

    group: str
    key: str | None
    conversations: int
    input_tokens: int
    output_tokens: int
    cost: str


def _key(row: Any, group: str) -> str | None:
    match group:
        case "tenant":
            return row.tenant
        case "api_key":
            return row.caller_key_prefix
        case "agent":
            return row.agent_code
        case "action":
            return row.action_code
        case "user":
            return row.memory_id
        case "model":
            return row.response_model
        case _:
            created: datetime = row.created_at
            return created.astimezone(UTC).date().isoformat()


def usage_report(
    connection: Connection,
    tenant: str,
    group: str,
    since: date | None,
    until: date | None,
) -> list[UsageRow]:
    """Add up the tenant's spend per ``group``, for conversations started in [since, until].

    Raises:
        ValueError: ``group`` is not one of :data:`USAGE_GROUPS`, or
            ``until`` is before ``since``.
    """
    if group not in USAGE_GROUPS:
        raise ValueError(f"unknown group {group!r}: group by one of {', '.join(USAGE_GROUPS)}")
    if since is not None and until is not None and until < since:
        raise ValueError(f"until ({until}) is before since ({since})")
    c = conversation_table.c
    query = select(
        c.tenant,
        c.caller_key_prefix,
        c.agent_code,
        c.action_code,
        c.memory_id,
        c.response_model,
        c.created_at,
        c.input_tokens,
        c.output_tokens,
        c.estimated_cost,
    ).where(c.tenant == tenant)
    if since is not None:
        query = query.where(c.created_at >= datetime.combine(since, time(0), tzinfo=UTC))
    if until is not None:
        end = datetime.combine(until + timedelta(days=1), time(0), tzinfo=UTC)
        query = query.where(c.created_at < end)
    totals: dict[str | None, list[Any]] = {}
    for row in connection.execute(query):
        entry = totals.setdefault(_key(row, group), [0, 0, 0, Decimal(0)])
        entry[0] += 1
        entry[1] += int(row.input_tokens)
        entry[2] += int(row.output_tokens)
        entry[3] += Decimal(row.estimated_cost)
    return [
        UsageRow(group, key, n, inputs, outputs, str(cost))
        for key, (n, inputs, outputs, cost) in sorted(
            totals.items(), key=lambda item: (item[0] is None, item[0] or "")
        )
    ]
