"""A tenant's virtual MCP server as the patterns its callers' tools must match.

A ``virtual_servers`` catalog entry names actions, agents, tools, single
gateway operations and built-in tools; the MCP server serves it at
``/mcp/<code>`` by giving each request's :class:`~pilothouse.types.McpCaller`
a ``bundle``: the names those members have over MCP. The disclosure tools
(``pilothouse_find_actions``, ``pilothouse_run_action``) are always in it:
they find and run only what the rest of the bundle allows.
"""

from __future__ import annotations

__all__ = ["bundle_of"]

from typing import TYPE_CHECKING, Any, cast

from pilothouse._facade.mcptools import FIND, RUN, tool_name
from pilothouse.errors import NotFoundError

if TYPE_CHECKING:
    from pilothouse._facade.mcpgateway import Gateways
    from pilothouse.api import Pilothouse


async def bundle_of(ph: Pilothouse, code: str, gateways: Gateways | None) -> tuple[str, ...]:
    """The tool name patterns the virtual server ``code`` of ``ph``'s tenant serves.

    Args:
        ph: the tenant's facade.
        code: the virtual server's code.
        gateways: the process's gateways (single operations are found among
            their tools); None where no gateway is served.

    Returns:
        Exact tool names, and ``<prefix>__*`` for each whole gateway.

    Raises:
        NotFoundError: no active virtual server ``code`` in the tenant.
    """
    from pilothouse.catalog._gateway_rules import NAMESPACE_SEPARATOR, gateway_prefix
    from pilothouse.catalog._virtual import VirtualServerSpec, split_operation
    from pilothouse.tools._gateway import gateway_tool_name

    unknown = NotFoundError(
        f"no virtual MCP server '{code}' in this tenant's catalog; the whole server is at /mcp"
    )
    try:
        entry = await ph.catalog.get("virtual_servers", code)
    except NotFoundError:
        raise unknown from None
    if not entry.active:
        raise unknown
    spec = VirtualServerSpec.model_validate(entry.document)
    names: list[str] = [FIND, RUN, *spec.builtins]
    names += [tool_name("action", c) for c in spec.actions]
    names += [tool_name("agent", c) for c in spec.agents]
    prefixes: dict[str, str] = {}
    for tool_code in {*spec.tools, *(split_operation(m)[0] for m in spec.operations)}:
        tool = await ph.catalog.get("tools", tool_code)
        settings = cast("dict[str, Any]", tool.document.get("settings") or {})
        block = settings.get("gateway")
        name = str(tool.document.get("name", tool_code))
        if isinstance(block, dict):
            prefixes[tool_code] = gateway_prefix(name, cast("dict[str, Any]", block))
            if tool_code in spec.tools:
                names.append(f"{prefixes[tool_code]}{NAMESPACE_SEPARATOR}*")
        elif tool_code in spec.tools:
            names.append(tool_name("tool", name))
    if spec.operations and gateways is not None:
        offered = await gateways.tools(ph)
        for member in spec.operations:
            gateway, selector = split_operation(member)
            by_id = f"{prefixes.get(gateway, '')}{NAMESPACE_SEPARATOR}" + gateway_tool_name(
                "", "", selector
            )
            names += [
                t.tool.name
                for t in offered
                if t.gateway == gateway
                and (t.operation.template == selector or t.tool.name == by_id)
            ]
    return tuple(dict.fromkeys(names))
