"""`pilothouse catalog` commands: validate, import and export catalog YAML.

Validation errors end the command with exit code 2 and one line per error
(``file:line: entity 'code': field: rule``), never a stack trace.
"""

from __future__ import annotations

__all__ = ["app"]

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from pilothouse.cli._context import CliState, open_facade, run

if TYPE_CHECKING:
    from pilothouse.types import CatalogCheck, ImportSummary

app = typer.Typer(help="Validate, import and export the catalog as YAML.", no_args_is_help=True)

Paths = Annotated[
    list[Path],
    typer.Argument(help="Catalog files or folders (every *.yaml/*.yml below, sorted)."),
]


def _checked(check: CatalogCheck) -> str:
    detail = ", ".join(
        f"{n} {kind.replace('_', ' ') if n != 1 else check.entity_names[kind]}"
        for kind, n in check.counts.items()
    )
    files = check.files
    return f"ok: {files} file{'s' if files != 1 else ''}, {check.entities} entities" + (
        f" ({detail})" if detail else ""
    )


@app.command()
def validate(
    ctx: typer.Context,
    paths: Paths,
    use_database: Annotated[
        bool,
        typer.Option(
            "--use-database",
            help="Also accept references to the tenant's stored catalog (as import does).",
        ),
    ] = False,
) -> None:
    """Check catalog files; print a summary, or one line per error (exit code 2)."""
    state: CliState = ctx.obj

    async def body() -> CatalogCheck:
        # The database is opened only when it is read (--use-database).
        async with open_facade(state, migrate=False) as ph:
            return await ph.catalog.validate(paths, against_stored=use_database)

    typer.echo(_checked(run(body)))


def _summary_table(summary: ImportSummary) -> Table:
    table = Table("kind", "created", "updated", "unchanged", title="catalog import")
    for kind, counts in summary.counts.items():
        table.add_row(kind, str(counts.created), str(counts.updated), str(counts.unchanged))
    return table


@app.command("import")
def import_(ctx: typer.Context, paths: Paths) -> None:
    """Validate, then upsert catalog files into the tenant's catalog, all or nothing."""
    state: CliState = ctx.obj

    async def body() -> ImportSummary:
        async with open_facade(state) as ph:
            return await ph.catalog.import_files(paths)

    summary = run(body)
    console = Console(soft_wrap=True)
    console.print(_summary_table(summary))
    tenant = state.effective_tenant
    if summary.changed:
        console.print(f"tenant '{tenant}': catalog revision {summary.revision}")
    else:
        console.print(f"tenant '{tenant}': nothing changed (revision {summary.revision})")


@app.command()
def export(
    ctx: typer.Context,
    kind: Annotated[
        list[str] | None,
        typer.Option("--kind", "-k", help="Only this kind (repeatable), e.g. actions."),
    ] = None,
) -> None:
    """Print the tenant's catalog as YAML, in the format `catalog import` reads."""
    state: CliState = ctx.obj

    async def body() -> str:
        # Not migrated first: an unknown kind is refused before the database is touched.
        async with open_facade(state, migrate=False) as ph:
            return await ph.catalog.export(kind)

    typer.echo(run(body), nl=False)
