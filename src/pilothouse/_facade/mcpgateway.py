"""The OpenAPI → MCP gateway's MCP side: a tenant's gateway operations as MCP tools.

The proxy itself (documents, operations, identity pass-through, rate limits,
audit rows) is :class:`pilothouse.tools._gateway.GatewayProxy`, shared with
the turns of catalog actions linked to a gateway row; this module lists a
tenant's gateway rows, offers their operations as MCP tools and turns a
call's :class:`~pilothouse.tools.ToolResult` into an MCP result. See
``docs/mcp.md`` for the gateway's settings.
"""

from __future__ import annotations

__all__ = ["GatewayTool", "Gateways", "gateway_tool_name"]

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import httpx
import mcp_types as mt

from pilothouse.catalog._enums import ToolKind
from pilothouse.errors import PilothouseError
from pilothouse.tools._base import ToolError
from pilothouse.tools._gateway import (
    GatewayCaller,
    GatewayOperation,
    GatewayProxy,
    gateway_tool_name,
    is_gateway,
)

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse
    from pilothouse.types import McpCaller

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GatewayTool:
    """One proxied operation as an MCP tool."""

    tool: mt.Tool
    operation: GatewayOperation

    @property
    def gateway(self) -> str:
        """The gateway row's code."""
        return self.operation.gateway


class Gateways:
    """The gateways' MCP tools over the process's proxy.

    Args:
        proxy: the process's gateway proxy (shared with the run loop).
    """

    def __init__(self, proxy: GatewayProxy) -> None:
        self.proxy = proxy

    async def tools(self, ph: Pilothouse) -> list[GatewayTool]:
        """The tools of every active gateway of ``ph``'s tenant (documents cached per version)."""
        found: list[GatewayTool] = []
        owners: dict[str, set[str]] = {}
        for entry in await ph.catalog.list_entries("tools", active=True):
            settings = cast("dict[str, Any]", entry.document.get("settings") or {})
            if entry.document.get("kind") != ToolKind.REST.value or not is_gateway(settings):
                continue
            try:
                operations = await self.proxy.operations(
                    ph.tenant, entry.key, entry.version, entry.document
                )
            except (PilothouseError, ToolError, httpx.HTTPError) as exc:
                # One broken gateway must not hide the others' tools.
                logger.warning("MCP gateway %s: cannot load its document: %s", entry.key, exc)
                continue
            for op in operations:
                tool = mt.Tool(
                    name=op.definition.name,
                    title=op.title,
                    description=op.definition.description,
                    input_schema=dict(op.definition.parameters),
                )
                found.append(GatewayTool(tool, op))
                owners.setdefault(tool.name, set()).add(entry.key)
        # Rows stored before the catalog refused shared prefixes may still
        # share one: a name two gateways answer is offered by neither, never
        # sent to whichever was read first.
        shared = {name for name, codes in owners.items() if len(codes) > 1}
        for name in sorted(shared):
            logger.error(
                "MCP gateways %s all offer tool %s; it is not offered: give each gateway its "
                "own settings.gateway.prefix",
                ", ".join(sorted(owners[name])),
                name,
            )
        return [t for t in found if t.tool.name not in shared]

    async def call(
        self, caller: McpCaller, gateway: GatewayTool, arguments: dict[str, Any]
    ) -> mt.CallToolResult:
        """Proxy one call of an MCP client; every failure is a tool error."""
        result = await self.proxy.call(gateway.operation, arguments, _gateway_caller(caller))
        data: Any = result.data
        structured = cast("dict[str, Any]", data) if isinstance(data, dict) else None
        return mt.CallToolResult(
            content=[mt.TextContent(text=result.content)],
            is_error=result.is_error,
            structured_content=structured,
        )

    async def refuse(
        self, caller: McpCaller, gateway: GatewayTool, problem: str
    ) -> mt.CallToolResult:
        """Refuse a call whose arguments break the operation's schema; it gets its row too."""
        result = await self.proxy.refuse(
            gateway.operation, _gateway_caller(caller), problem, "gateway.schema_refused"
        )
        return mt.CallToolResult(content=[mt.TextContent(text=result.content)], is_error=True)

    async def aclose(self) -> None:
        """Nothing: the proxy belongs to the process's facade, which closes it."""


def _gateway_caller(caller: McpCaller) -> GatewayCaller:
    """An MCP client as the gateway's caller: its key, its headers, the ``mcp`` face."""
    return GatewayCaller(
        tenant=caller.tenant,
        via="mcp",
        key_prefix=caller.key_prefix,
        headers=caller.headers,
        face="mcp",
        key_name=caller.key_name,
    )
