"""An in-process MCP server with tools for every path of the pool (imported by the tests)."""

from __future__ import annotations

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError as ServerToolError
from mcp_types import ImageContent, TextContent

from pilothouse.catalog._enums import McpTransport
from pilothouse.mcp import McpClientConfig

TINY_PNG = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAC"
    "hwGA60e6kgAAAABJRU5ErkJggg=="
)


def build_server(name: str = "demo") -> MCPServer:
    server = MCPServer(name)

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    @server.tool()
    def echo(message: str) -> str:
        """Say it back."""
        return f"Echo: {message}"

    @server.tool()
    def fail(reason: str) -> str:
        """Always fails."""
        raise ServerToolError(f"refused: {reason}")

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep, then answer."""
        await anyio.sleep(seconds)
        return "done"

    @server.tool()
    def picture() -> list[TextContent | ImageContent]:
        """A caption and an image."""
        return [
            TextContent(type="text", text="a dot"),
            ImageContent(type="image", data=TINY_PNG, mime_type="image/png"),
        ]

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add a tool named 'extra' and announce the change."""
        server.add_tool(lambda: "extra!", name="extra", description="Added later.")
        # Both eras: a listen stream (2026-07-28) and the plain notification.
        await ctx.notify_tools_changed()
        await ctx.request_context.session.send_tool_list_changed()
        return "grown"

    return server


def config(name: str = "demo") -> McpClientConfig:
    # The URL is never dialed: the in-memory factory connects by name.
    return McpClientConfig(name=name, transport=McpTransport.STREAMABLE_HTTP, url="memory://")
