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


def test_gateway_calls_lists_the_audit_rows(tmp_path: Path) -> None:
    import anyio

    from pilothouse.store import Database, NewGatewayCall, record_gateway_call

    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"

    async def seed() -> None:
        database = Database(url)
        await database.ensure_schema()
        for status, outcome in ((200, "ok"), (None, "gateway.path_refused")):
            await record_gateway_call(
                database,
                NewGatewayCall(
                    tenant="default",
                    gateway="CRM",
                    tool="get_customers_by_id",
                    operation="GET /customers/{id}",
                    via="mcp",
                    key_prefix="0a1b2c3d",
                    conversation_uuid=None,
                    call_id=None,
                    status_code=status,
                    outcome=outcome,
                    latency_ms=3.0,
                ),
            )
        await database.dispose()

    anyio.run(seed)
    listed = runner.invoke(app, ["--database-url", url, "mcp", "gateway-calls"])
    assert listed.exit_code == 0, listed.output
    lines = listed.output.splitlines()
    assert len(lines) == 2
    assert "GET /customers/{id}  -  gateway.path_refused" in lines[0]
    assert "GET /customers/{id}  200  ok" in lines[1] and "0a1b2c3d" in lines[1]
    as_json = runner.invoke(
        app, ["--database-url", url, "mcp", "gateway-calls", "--json", "--gateway", "ERP"]
    )
    assert as_json.exit_code == 0 and as_json.output.strip() == "[]"
