"""What a tenant spent: tokens and cost of its conversations, grouped as asked.

Read by ``ph.query.usage()`` (``pilothouse usage``, ``GET /v1/usage``,
JSON-RPC ``query/usage``). The figures are the conversations' own recorded
totals (the audit record), so a report always adds up to what the
conversation list shows; a budget's ledger (``budgets status``) counts the
same calls from the gate's side.
"""

from __future__ import annotations

__all__ = ["USAGE_GROUPS", "UsageRow", "usage_report"]

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, String, cast, func, select

from pilothouse.errors import InvalidFieldError
from pilothouse.store._tables import conversation_table as _CONVERSATION

USAGE_GROUPS = ("tenant", "key", "agent", "action", "user", "model", "day")
"""What a report can be grouped by, in the order columns are shown."""


@dataclass(frozen=True, slots=True)
class UsageRow:
    """Spend and tokens of one group of conversations.

    Attributes:
        group: the group's values, by the names asked for (``action``,
            ``model``, ``day``...); None where the conversations have none
            (no API key on a CLI run, no agent on a bare-model call).
        conversations: how many conversations the group holds.
        input_tokens: input (prompt) tokens, summed.
        output_tokens: output (completion) tokens, summed.
        cost: estimated cost in the tenant's currency, as a decimal string.
    """

    group: dict[str, str | None]
    conversations: int
    input_tokens: int
    output_tokens: int
    cost: str


def check_usage_query(group_by: Sequence[str], since: date | None, until: date | None) -> None:
    """Refuse an unknown grouping or an empty date range, naming what to write instead."""
    unknown = [name for name in group_by if name not in USAGE_GROUPS]
    if unknown:
        raise InvalidFieldError(
            "by",
            f"usage cannot be grouped by {', '.join(map(repr, unknown))}; "
            f"write one or more of {', '.join(USAGE_GROUPS)}",
        )
    if len(set(group_by)) != len(group_by):
        raise InvalidFieldError("by", "name each grouping once")
    if since is not None and until is not None and until < since:
        raise InvalidFieldError("until", f"{until} is before since ({since})")


def usage_report(
    connection: Connection,
    tenant: str,
    group_by: Sequence[str],
    since: date | None,
    until: date | None,
) -> list[UsageRow]:
    """The tenant's spend and tokens per group, most costly first.

    ``since`` and ``until`` are days in UTC, both included; a conversation
    counts on the day it was created. The caller checks the query first
    (:func:`check_usage_query`), before a connection is taken.
    """
    c = _CONVERSATION.c
    columns: dict[str, Any] = {
        "tenant": c.tenant,
        "key": c.caller_key_prefix,
        "agent": c.agent_code,
        "action": c.action_code,
        "user": c.memory_id,
        "model": c.response_model,
        "day": _day(connection, c.created_at),
    }
    keys = [columns[name].label(f"g_{name}") for name in group_by]
    cost = func.coalesce(func.sum(c.estimated_cost), 0)
    query = (
        select(
            *keys,
            func.count().label("conversations"),
            func.coalesce(func.sum(c.input_tokens), 0).label("input_tokens"),
            func.coalesce(func.sum(c.output_tokens), 0).label("output_tokens"),
            cost.label("cost"),
        )
        .where(c.tenant == tenant)
        .group_by(*keys)
        .order_by(cost.desc(), *keys)
    )
    if since is not None:
        query = query.where(c.created_at >= datetime.combine(since, time(0), UTC))
    if until is not None and until < date.max:
        # The last day is included: count up to the next midnight. date.max
        # has none (adding a day overflows); nothing is recorded after it.
        after = datetime.combine(until + timedelta(days=1), time(0), UTC)
        query = query.where(c.created_at < after)
    return [
        UsageRow(
            group={
                name: None if row[f"g_{name}"] is None else str(row[f"g_{name}"])
                for name in group_by
            },
            conversations=int(row["conversations"]),
            input_tokens=int(row["input_tokens"]),
            output_tokens=int(row["output_tokens"]),
            cost=str(Decimal(row["cost"]).quantize(Decimal("0.00000001"))),
        )
        for row in connection.execute(query).mappings()
    ]


def _day(connection: Connection, created_at: Any) -> Any:
    """The UTC day of a timestamp, as ``YYYY-MM-DD`` text on every database."""
    if connection.dialect.name == "postgresql":
        # A timestamptz's date follows the session's time zone; the report's days are UTC.
        return func.to_char(func.timezone("UTC", created_at), "YYYY-MM-DD")
    # SQLite keeps the UTC text; its first ten characters are the day.
    return func.substr(cast(created_at, String), 1, 10)
