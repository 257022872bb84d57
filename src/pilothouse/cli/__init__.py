"""The ``pilothouse`` command line.

Each command group lives in its own module and is mounted here.
"""

from __future__ import annotations

__all__ = ["app", "main"]

from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from pilothouse.cli._budgets import app as budgets_app
from pilothouse.cli._budgets import usage
from pilothouse.cli._catalog import app as catalog_app
from pilothouse.cli._context import CliState, fail, settings_problem
from pilothouse.cli._conversations import app as conversations_app
from pilothouse.cli._db import app as db_app
from pilothouse.cli._evaluation import app as datasets_app
from pilothouse.cli._evaluation import eval_run, replay
from pilothouse.cli._events import events, worker
from pilothouse.cli._keys import app as keys_app
from pilothouse.cli._knowledge import app as knowledge_app
from pilothouse.cli._mcp import app as mcp_app
from pilothouse.cli._memory import app as memory_app
from pilothouse.cli._run import chat, run_action
from pilothouse.cli._serve import serve
from pilothouse.settings import Settings

app = typer.Typer(
    name="pilothouse",
    help="Governed access from business applications to large language models.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(catalog_app, name="catalog")
app.add_typer(conversations_app, name="conversations")
app.add_typer(db_app, name="db")
app.add_typer(keys_app, name="keys")
app.add_typer(budgets_app, name="budgets")
app.add_typer(mcp_app, name="mcp")
app.add_typer(knowledge_app, name="knowledge")
app.add_typer(memory_app, name="memory")
app.command(name="run")(run_action)
app.command(name="chat")(chat)
app.command(name="serve")(serve)
app.command(name="worker")(worker)
app.command(name="events")(events)
app.command(name="usage")(usage)
app.add_typer(datasets_app, name="datasets")
app.command(name="replay")(replay)
app.command(name="eval")(eval_run)


@app.callback()
def _root(
    ctx: typer.Context,
    database_url: Annotated[
        str | None,
        typer.Option(
            "--database-url",
            help="SQLAlchemy async URL; defaults to $PILOTHOUSE_DATABASE_URL or ./.pilothouse/",
        ),
    ] = None,
    tenant: Annotated[
        str | None, typer.Option("--tenant", help="Tenant to act for (default: 'default').")
    ] = None,
    secrets_file: Annotated[
        Path | None, typer.Option("--secrets-file", help="NAME=value file for @secrets(NAME).")
    ] = None,
) -> None:
    overrides: dict[str, Any] = {}
    if database_url is not None:
        overrides["database_url"] = database_url
    if secrets_file is not None:
        overrides["secrets_file"] = secrets_file
    # Command-line options win over the environment, which Settings() reads;
    # given to the constructor, they are validated as the environment is
    # (a model_copy(update=...) took them unchecked).
    try:
        settings = Settings(**overrides)
    except ValidationError as exc:
        fail(settings_problem(exc))
    ctx.obj = CliState(settings=settings, tenant=tenant)


def main() -> None:
    """Entry point of the ``pilothouse`` console script."""
    app()
