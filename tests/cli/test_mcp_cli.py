"""``pilothouse mcp serve``: what it refuses before serving (serving itself: tests/real)."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from pilothouse.cli import app

runner = CliRunner()


def test_without_stdio_it_names_the_http_endpoints(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    result = runner.invoke(app, ["--database-url", url, "mcp", "serve"])
    assert result.exit_code == 2
    assert "pilothouse serve" in result.output and "/mcp" in result.output


def test_a_tool_pattern_with_spaces_is_refused(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    result = runner.invoke(
        app, ["--database-url", url, "mcp", "serve", "--stdio", "--mcp-tool", "action *"]
    )
    assert result.exit_code == 2
    assert "--mcp-tool: 'action *' is not a tool name or glob" in result.output


def test_keys_create_refuses_a_bad_mcp_tool_pattern(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    result = runner.invoke(app, ["--database-url", url, "keys", "create", "--mcp-tool", " "])
    assert result.exit_code == 2
    assert "mcp_tools" in result.output
