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

from pilothouse.cli._context import CliState, fail, run
from pilothouse.errors import CatalogValidationError

if TYPE_CHECKING:
    from pilothouse.catalog import ImportSummary

# The catalog tooling (YAML, validation, import/export) is imported by the
# commands that use it, so other commands (run, chat, serve) start without it.

app = typer.Typer(help="Validate, import and export the catalog as YAML.", no_args_is_help=True)

Paths = Annotated[
    list[Path],
    typer.Argument(help="Catalog files or folders (every *.yaml/*.yml below, sorted)."),
]


def _plural(count: int, kind: str) -> str:
    from pilothouse.catalog import catalog_kind

    name = kind.replace("_", " ")
    return f"{count} {name if count != 1 else catalog_kind(kind).entity_name}"


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
    from pilothouse.catalog import ExistingCatalog, load_existing, validate_paths

    state: CliState = ctx.obj

    async def body() -> str:
        existing = ExistingCatalog()
        if use_database:
            database = state.database()
            try:
                await database.ensure_schema()
                async with database.sessions() as session:
                    existing = await load_existing(session, state.effective_tenant)
            finally:
                await database.dispose()
        parsed, issues = validate_paths(paths, existing)
        if issues:
            raise CatalogValidationError(issues)
        counts = parsed.counts()
        detail = ", ".join(_plural(n, kind) for kind, n in counts.items())
        files = len(parsed.files)
        return f"ok: {files} file{'s' if files != 1 else ''}, {len(parsed)} entities" + (
            f" ({detail})" if detail else ""
        )

    typer.echo(run(body))


def _summary_table(summary: ImportSummary) -> Table:
    table = Table("kind", "created", "updated", "unchanged", title="catalog import")
    for kind, counts in summary.counts.items():
        table.add_row(kind, str(counts.created), str(counts.updated), str(counts.unchanged))
    return table


@app.command("import")
def import_(ctx: typer.Context, paths: Paths) -> None:
    """Validate, then upsert catalog files into the tenant's catalog, all or nothing."""
    from pilothouse.catalog import import_catalog

    state: CliState = ctx.obj

    async def body() -> ImportSummary:
        database = state.database()
        try:
            return await import_catalog(
                database, state.effective_tenant, paths, user=state.settings.user
            )
        finally:
            await database.dispose()

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
    from pilothouse.catalog import KINDS, catalog_kind, export_catalog

    state: CliState = ctx.obj
    for name in kind or []:
        if name not in KINDS:
            try:
                catalog_kind(name)
            except KeyError as exc:
                fail(str(exc.args[0]))

    async def body() -> str:
        database = state.database()
        try:
            await database.ensure_schema()
            async with database.sessions() as session:
                return await export_catalog(session, state.effective_tenant, kind)
        finally:
            await database.dispose()

    typer.echo(run(body), nl=False)
