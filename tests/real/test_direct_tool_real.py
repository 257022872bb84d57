"""``ph.command.call_tool`` on a catalog tool of kind ``mcp``: a real MCP server (PyPI).

``mcp-server-time`` is started over stdio by pilothouse's own MCP client
pool, as in a turn; the call is recorded as a ``TOOLCALL`` conversation.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder

pytestmark = [pytest.mark.real, pytest.mark.anyio]


async def test_a_catalog_mcp_tool_runs_on_its_own_and_is_recorded(tmp_path: Path) -> None:
    if importlib.util.find_spec("mcp_server_time") is None:
        print("skipping: mcp-server-time is not installed (pip install mcp-server-time)")
        pytest.skip("mcp-server-time is not installed")
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'x.db'}", secrets_file=None)
    async with Pilothouse(settings) as ph:
        await (
            CatalogBuilder()
            .mcp_client(
                "time",
                transport="stdio",
                command="python",
                args=["-m", "mcp_server_time", "--local-timezone", "UTC"],
            )
            .tool("NOW", name="now", kind="mcp", implementation="time:get_current_time")
            .import_into(ph)
        )
        offered = {tool.name: tool for tool in await ph.command.callable_tools()}
        outcome = await ph.command.call_tool("now", {"timezone": "UTC"})
        bad = await ph.command.call_tool("now", {"timezone": "Nowhere/Atlantis"})
        transcript = await ph.query.get_transcript(outcome.conversation_uuid)
    assert "timezone" in offered["now"].input_schema["properties"]
    assert outcome.status == "succeeded", outcome
    assert '"timezone": "UTC"' in outcome.content
    assert (transcript.action_code, transcript.status) == ("TOOLCALL", "CO")
    [call] = transcript.tool_calls
    # Recorded under the name a turn offers it by: the server's.
    assert (call.name, call.arguments) == ("get_current_time", {"timezone": "UTC"})
    # The server's own error is a failed call, recorded, not an exception.
    assert (bad.status, bad.error_code) == ("failed", "tool.exec.error")
