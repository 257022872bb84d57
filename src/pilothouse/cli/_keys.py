"""`pilothouse keys` commands: create, list and revoke API keys of the HTTP service.

A key is printed once, when it is created; only its SHA-256 digest is
stored, so a lost key cannot be shown again: revoke it and create another.
"""

from __future__ import annotations

__all__ = ["app"]

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from pilothouse.cli._context import CliState, open_facade, run

if TYPE_CHECKING:
    from pilothouse.types import KeyInfo

app = typer.Typer(
    help="Create, list and revoke API keys of the HTTP service.", no_args_is_help=True
)


def _when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment is not None else "never"


@app.command()
def create(
    ctx: typer.Context,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="The key's tenant (default: the global one).")
    ] = None,
    name: Annotated[str, typer.Option("--name", help="A label shown in listings.")] = "",
    admin: Annotated[
        bool, typer.Option("--admin", help="Allow catalog writes (the admin scope).")
    ] = False,
    mcp_tool: Annotated[
        list[str] | None,
        typer.Option(
            "--mcp-tool",
            help="An MCP server tool (name or glob) the key may use; repeat it. "
            "Without it the key may use every tool of its tenant.",
        ),
    ] = None,
) -> None:
    """Create a key and print it once (only its digest is stored)."""
    state: CliState = ctx.obj
    owner = tenant or state.effective_tenant

    async def body() -> tuple[str, KeyInfo]:
        async with open_facade(state) as ph:
            return await ph.keys.create(
                tenant=owner, name=name, admin=admin, mcp_tools=mcp_tool or ()
            )

    key, info = run(body)
    # The key alone on stdout, so scripts can capture it; the rest on stderr.
    typer.echo(key)
    scopes = ",".join(info.scopes) or "-"
    typer.echo(
        f"created key {info.prefix} for tenant '{info.tenant}' (scopes: {scopes}); "
        "store it now, it is not shown again",
        err=True,
    )


@app.command("list")
def list_(
    ctx: typer.Context,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only this tenant's keys.")] = None,
) -> None:
    """List keys: prefix, name, tenant, scopes, created, last used (never the key)."""
    state: CliState = ctx.obj

    async def body() -> list[KeyInfo]:
        async with open_facade(state) as ph:
            return await ph.keys.list_keys(tenant=tenant or state.tenant)

    keys = run(body)
    table = Table("prefix", "name", "tenant", "scopes", "active", "created", "last used")
    for info in keys:
        table.add_row(
            info.prefix,
            info.name,
            info.tenant,
            ",".join(info.scopes) or "-",
            "yes" if info.active else "revoked",
            _when(info.created_at),
            _when(info.last_used_at),
        )
    Console(soft_wrap=True).print(table)


@app.command()
def revoke(
    ctx: typer.Context,
    prefix: Annotated[str, typer.Argument(help="The key's prefix, as 'keys list' shows it.")],
) -> None:
    """Revoke a key: requests with it are refused (401).

    A running server trusts a key it has verified for a few seconds
    (PILOTHOUSE_SERVER_KEY_CACHE_SECONDS, default 5), so it refuses the key
    within that time.
    """
    state: CliState = ctx.obj

    async def body() -> KeyInfo:
        async with open_facade(state) as ph:
            return await ph.keys.revoke(prefix)

    info = run(body)
    typer.echo(f"revoked key {info.prefix} of tenant '{info.tenant}'")
