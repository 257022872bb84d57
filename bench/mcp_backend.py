"""The backend MCP server of ``bench/mcp_gateways.py``: one tool, ``add``, over streamable HTTP.

Built on the official ``mcp`` SDK's ``MCPServer`` (not on a gateway being
measured), so every gateway proxies the same server. It counts the HTTP
requests it is sent (``GET /requests``), so the bench can tell how many a
gateway makes per call it forwards. Run: ``python bench/mcp_backend.py PORT``.
"""

from __future__ import annotations

import sys
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from starlette.responses import JSONResponse

server = MCPServer("backend")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


class Counted:
    """The MCP app, counting the requests sent to ``/mcp``."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.requests = 0

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/requests":
            await JSONResponse({"requests": self.requests})(scope, receive, send)
            return
        if scope["type"] == "http":
            self.requests += 1
        await self.app(scope, receive, send)


if __name__ == "__main__":
    app = Counted(server.streamable_http_app())
    uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
