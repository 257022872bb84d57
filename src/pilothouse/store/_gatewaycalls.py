"""The audit rows of the OpenAPI → MCP gateway: one per proxied call.

A gateway is a proxy: its calls are recorded like an API gateway's access
log, one row each, whether an MCP client called an operation directly or a
turn of a catalog action did (then the row names the conversation and the
tool call, whose own row holds the arguments and the result). A row says
who (tenant, API key prefix), which operation (gateway, tool, ``METHOD
/path`` template), the outcome (HTTP status, result code) and the latency;
never an argument, a header value or a query string, so no secret can land
in it.
"""

from __future__ import annotations

__all__ = ["GatewayCall", "NewGatewayCall", "list_gateway_calls", "record_gateway_call"]

from dataclasses import asdict, dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from sqlalchemy import Float, Integer, String, select
from sqlalchemy.orm import Mapped, mapped_column

from pilothouse.store._base import Base, utcnow
from pilothouse.store._tables import conversation_table
from pilothouse.store._types import UtcDateTime

if TYPE_CHECKING:
    from pilothouse.store._engine import Database


class GatewayCall(Base):
    """One proxied gateway call.

    Attributes:
        tenant: whose gateway.
        gateway: the gateway's tool code.
        tool: the operation's tool name (``get_customers_by_id``).
        operation: ``METHOD /path`` as the document writes it (the template,
            never the filled-in path).
        via: ``mcp`` (an MCP client) or ``turn`` (a catalog action's turn).
        key_prefix: the caller's API key prefix (a turn's: the key that
            started its conversation; None on stdio and without a key).
        face: the face the call came through (``mcp``, or the face of the
            turn's conversation: ``rest``, ``openai``, ...); None on rows
            older than the column.
        key_name: the caller's API key name.
        conversation_uuid: the turn's conversation, when a turn called it.
        call_id: the turn's tool call id, when a turn called it.
        status_code: the service's HTTP status; None when nothing was sent
            (refused before sending, or no answer).
        outcome: ``ok`` or the result's error code (``tool.exec.http_404``,
            ``gateway.rate_limited``, ``gateway.path_refused``, ...).
        latency_ms: from the call's start to its result, in milliseconds.
    """

    __tablename__ = "gateway_call"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(32), index=True)
    gateway: Mapped[str] = mapped_column(String(64))
    tool: Mapped[str] = mapped_column(String(128))
    operation: Mapped[str] = mapped_column(String(512))
    via: Mapped[str] = mapped_column(String(8))
    key_prefix: Mapped[str | None] = mapped_column(String(32))
    conversation_uuid: Mapped[str | None] = mapped_column(String(36), index=True)
    call_id: Mapped[str | None] = mapped_column(String(128))
    status_code: Mapped[int | None] = mapped_column(Integer)
    outcome: Mapped[str] = mapped_column(String(64))
    latency_ms: Mapped[float] = mapped_column(Float)
    face: Mapped[str | None] = mapped_column(String(16))
    key_name: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow, index=True)


@dataclass(frozen=True, slots=True)
class NewGatewayCall:
    """What one gateway call records (see :class:`GatewayCall` for the fields)."""

    tenant: str
    gateway: str
    tool: str
    operation: str
    via: str
    key_prefix: str | None
    conversation_uuid: str | None
    call_id: str | None
    status_code: int | None
    outcome: str
    latency_ms: float
    face: str | None = None
    key_name: str | None = None


async def record_gateway_call(database: Database, call: NewGatewayCall) -> None:
    """Insert one audit row in a transaction of its own.

    A turn's call says no face of its own: the row takes its conversation's
    (the face and API key that started it), read in the same transaction.
    """
    async with database.sessions() as session:
        values = asdict(call)
        if call.face is None and call.conversation_uuid is not None:
            started = (
                await session.execute(
                    select(
                        conversation_table.c.face,
                        conversation_table.c.caller_key_prefix,
                        conversation_table.c.caller_key_name,
                    ).where(
                        conversation_table.c.tenant == call.tenant,
                        conversation_table.c.uuid == call.conversation_uuid,
                    )
                )
            ).first()
            if started is not None:
                values["face"] = started.face
                values["key_prefix"] = call.key_prefix or started.caller_key_prefix
                values["key_name"] = call.key_name or started.caller_key_name
        # Cut to the columns' sizes: an over-long name must not lose the row.
        for name, size in (
            ("gateway", 64),
            ("tool", 128),
            ("operation", 512),
            ("call_id", 128),
            ("key_name", 128),
        ):
            if isinstance(values[name], str):
                values[name] = values[name][:size]
        session.add(GatewayCall(**values))
        await session.commit()


async def list_gateway_calls(
    database: Database,
    tenant: str,
    *,
    gateway: str | None = None,
    conversation_uuid: str | None = None,
    limit: int = 100,
) -> list[GatewayCall]:
    """The tenant's gateway calls, newest first."""
    statement = select(GatewayCall).where(GatewayCall.tenant == tenant)
    if gateway is not None:
        statement = statement.where(GatewayCall.gateway == gateway)
    if conversation_uuid is not None:
        statement = statement.where(GatewayCall.conversation_uuid == conversation_uuid)
    statement = statement.order_by(GatewayCall.created_at.desc(), GatewayCall.id.desc())
    async with database.sessions() as session:
        return list(await session.scalars(statement.limit(max(1, min(limit, 1000)))))
