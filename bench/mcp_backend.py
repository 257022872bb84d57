"""The backend MCP server of ``bench/mcp_gateways.py``: one tool, ``add``, over streamable HTTP.

Built on the official ``mcp`` SDK's ``MCPServer`` (not on a gateway being
measured), so every gateway proxies the same server. Run:
``python bench/mcp_backend.py PORT``.
"""

from __future__ import annotations

import sys

import uvicorn
from mcp.server.mcpserver import MCPServer

server = MCPServer("backend")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


if __name__ == "__main__":
    app = server.streamable_http_app()
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
