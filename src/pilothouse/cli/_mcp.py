"""`pilothouse mcp serve --stdio`: pilothouse as an MCP server on standard input/output.

For a desktop client or an IDE that starts its MCP servers as child
processes (Claude Desktop, VS Code, Cursor). The server acts for the
command's tenant (``--tenant``) on the command's database, with the tools
``--mcp-tool`` allows (all when none is given); every tool call is a
governed, audited conversation, as over HTTP. Standard output carries the
protocol only: diagnostics go to standard error.
"""

from __future__ import annotations

__all__ = ["app"]

from typing import Annotated

import typer

from pilothouse.cli._context import CliState, fail, open_facade, run
from pilothouse.types import MCP_TOOL_SCOPE, McpCaller

app = typer.Typer(help="pilothouse as an MCP server.", no_args_is_help=True)


@app.command()
def serve(
    ctx: typer.Context,
    stdio: Annotated[
        bool, typer.Option("--stdio", help="Speak MCP on standard input and output.")
    ] = False,
    mcp_tool: Annotated[
        list[str] | None,
        typer.Option("--mcp-tool", help="A tool (name or glob) to offer; repeat it. Default: all."),
    ] = None,
    max_tools: Annotated[
        int,
        typer.Option(
            "--max-tools", min=1, help="List each action as a tool up to this many; then disclose."
        ),
    ] = 30,
    list_changed_seconds: Annotated[
        float,
        typer.Option(
            "--list-changed-seconds", min=0.05, help="How often to look for catalog changes."
        ),
    ] = 2.0,
) -> None:
    """Serve the tenant's actions, agents and skills over MCP (stdio)."""
    if not stdio:
        fail(
            "--stdio is the only transport of this command; for streamable HTTP and SSE "
            "run 'pilothouse serve' (endpoints /mcp and /sse)"
        )
    state: CliState = ctx.obj
    patterns = mcp_tool or []
    for pattern in patterns:
        if not pattern or any(c.isspace() for c in pattern):
            fail(f"--mcp-tool: {pattern!r} is not a tool name or glob")
    caller = McpCaller.from_scopes(
        state.effective_tenant, None, [MCP_TOOL_SCOPE + p for p in patterns]
    )

    async def body() -> None:
        from mcp.server.stdio import stdio_server

        async with open_facade(state) as ph:
            service = ph.mcp_service(
                lambda _: caller, max_tools=max_tools, list_changed_seconds=list_changed_seconds
            )
            async with stdio_server() as (read, write), service.running():
                await service.server.run(read, write, service.initialization_options())

    run(body)


@app.command("gateway-calls")
def gateway_calls(
    ctx: typer.Context,
    gateway: Annotated[
        str | None, typer.Option("--gateway", help="Only this gateway's calls (its tool code).")
    ] = None,
    conversation: Annotated[
        str | None,
        typer.Option("--conversation", help="Only the calls this conversation's turns made."),
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, max=1000, help="At most this many, newest first.")
    ] = 50,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list.")] = False,
) -> None:
    """List the OpenAPI gateway's audit rows of the tenant (never arguments or headers)."""
    import json
    from dataclasses import asdict

    state: CliState = ctx.obj

    async def body() -> None:
        async with open_facade(state) as ph:
            rows = await ph.query.list_gateway_calls(
                gateway=gateway, conversation_uuid=conversation, limit=limit
            )
        if as_json:
            typer.echo(json.dumps([asdict(row) for row in rows], default=str, indent=2))
            return
        for row in rows:
            who = row.key_prefix or (
                f"conversation {row.conversation_uuid}" if row.via == "turn" else "-"
            )
            typer.echo(
                f"{row.created_at:%Y-%m-%d %H:%M:%S}  {row.gateway}  {row.operation}  "
                f"{row.status_code if row.status_code is not None else '-'}  {row.outcome}  "
                f"{row.latency_ms:.0f} ms  {row.via}  {who}"
            )

    run(body)
