"""`pilothouse db` commands: migrate the database and report its revision.

Also home of :func:`open_database`, which every command that reads the
store uses so an unreachable or broken database ends in one line, not a
stack trace.
"""

from __future__ import annotations

__all__ = ["app", "open_database"]

from collections.abc import AsyncGenerator
from contextlib import asynccontextmanager

import typer
from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from pilothouse.cli._context import CliState, fail, run
from pilothouse.store import Database, current_revision, head_revision

app = typer.Typer(help="Migrate the database and report its schema revision.", no_args_is_help=True)


@asynccontextmanager
async def open_database(state: CliState) -> AsyncGenerator[Database]:
    """Open the configured database and close it at the end of the command.

    Connection and SQL failures become exit code 2 with one line naming the
    database (password hidden).
    """
    db = state.database()
    try:
        yield db
    except (OSError, SQLAlchemyError) as exc:
        where = make_url(db.url).render_as_string(hide_password=True)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        fail(f"database {where}: {reason}")
    finally:
        await db.dispose()


@app.command("upgrade")
def upgrade(ctx: typer.Context) -> None:
    """Run every pending migration and print the revision before and after."""
    state: CliState = ctx.obj

    async def body() -> tuple[str | None, str]:
        async with open_database(state) as db:
            return await db.upgrade()

    before, after = run(body)
    typer.echo(f"database at {after} (was: {before or 'empty'})")


@app.command("current")
def current(ctx: typer.Context) -> None:
    """Print the database's revision and whether it is the newest; changes nothing."""
    state: CliState = ctx.obj

    async def body() -> str | None:
        async with open_database(state) as db:
            # Deliberately not ensure_schema(): reporting must not migrate.
            async with db.engine.connect() as connection:
                return await connection.run_sync(current_revision)

    revision = run(body)
    head = head_revision()
    if revision == head:
        typer.echo(f"database at {head} (current)")
    else:
        typer.echo(
            f"database at {revision or 'empty'} (not current: newest is {head}; "
            "run `pilothouse db upgrade`)"
        )
