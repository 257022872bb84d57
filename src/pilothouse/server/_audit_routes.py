"""Audit rows beyond conversations, under ``/v1/audit``: the OpenAPI gateway's calls.

A conversation's own record (messages, tool calls, timeline) is read at
``/v1/conversations/{uuid}``; what the gateway proxied for MCP clients has no
conversation, so its rows are listed here, to any key of the tenant (as its
conversations are, whose direct tool calls name keys' prefixes too; the
prefix identifies a key, it is no secret). The key's tenant bounds them.
"""

from __future__ import annotations

__all__ = ["router"]

from typing import Annotated

from fastapi import APIRouter, Query

from pilothouse.server._deps import CheckedJsonRoute, Facade
from pilothouse.server._problems import PROBLEM_RESPONSES
from pilothouse.types import GatewayCallRecord

router = APIRouter(
    prefix="/v1/audit", tags=["audit"], responses=PROBLEM_RESPONSES, route_class=CheckedJsonRoute
)


@router.get("/gateway-calls", summary="List the OpenAPI gateway's proxied calls, newest first")
async def list_gateway_calls(
    ph: Facade,
    gateway: Annotated[
        str | None, Query(max_length=64, description="A gateway row's code.")
    ] = None,
    conversation: Annotated[
        str | None, Query(max_length=64, description="Only the calls a turn of it made.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> list[GatewayCallRecord]:
    """Return the rows: who, which operation, status, latency; never an argument or a header."""
    return await ph.query.list_gateway_calls(
        gateway=gateway, conversation_uuid=conversation, limit=limit
    )
