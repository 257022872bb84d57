"""`pilothouse db` commands: migrate the database and report its revision."""

from __future__ import annotations

__all__ = ["app"]

import typer

from pilothouse.cli._context import CliState, open_facade, run

app = typer.Typer(help="Migrate the database and report its schema revision.", no_args_is_help=True)


@app.command("upgrade")
def upgrade(ctx: typer.Context) -> None:
    """Run every pending migration and print the revision before and after."""
    state: CliState = ctx.obj

    async def body() -> tuple[str | None, str]:
        async with open_facade(state, migrate=False) as ph:
            return await ph.upgrade_schema()

    before, after = run(body)
    typer.echo(f"database at {after} (was: {before or 'empty'})")


@app.command("current")
def current(ctx: typer.Context) -> None:
    """Print the database's revision and whether it is the newest; changes nothing."""
    state: CliState = ctx.obj

    async def body() -> tuple[str | None, str]:
        # Deliberately not migrated: reporting must not change the database.
        async with open_facade(state, migrate=False) as ph:
            revision = await ph.schema_revision()
            return revision.current, revision.head

    revision, head = run(body)
    if revision == head:
        typer.echo(f"database at {head} (current)")
    else:
        typer.echo(
            f"database at {revision or 'empty'} (not current: newest is {head}; "
            "run `pilothouse db upgrade`)"
        )
