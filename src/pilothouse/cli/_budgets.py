"""`pilothouse budgets status`: where each of the tenant's budgets stands.

Budgets are catalog entities (``budgets:`` in catalog YAML); this command
reads their ledger for the current period: limits, spent, held by calls in
flight, remaining, and when the period resets.
"""

from __future__ import annotations

__all__ = ["app"]

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from pilothouse.cli._context import CliState, open_facade, run

if TYPE_CHECKING:
    from pilothouse.types import BudgetStatus

app = typer.Typer(help="See where the tenant's budgets stand.", no_args_is_help=True)


def _pairs(values: dict[str, str]) -> str:
    return ", ".join(f"{name} {value}" for name, value in values.items()) or "-"


@app.command()
def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> None:
    """Show each budget per scope: limits, spent, remaining and the reset time."""
    state: CliState = ctx.obj

    async def body() -> list[BudgetStatus]:
        async with open_facade(state) as ph:
            return await ph.query.budget_status()

    statuses = run(body)
    if as_json:
        typer.echo(json.dumps([asdict(s) for s in statuses], indent=2))
        return
    table = Table("budget", "scope", "subject", "period", "limits", "spent", "remaining", "used")
    for entry in statuses:
        table.add_row(
            entry.budget,
            entry.scope,
            entry.subject or "-",
            entry.period,
            _pairs(entry.limits),
            _pairs(entry.spent),
            _pairs(entry.remaining),
            f"{entry.used_percent:g} %",
        )
    Console(soft_wrap=True).print(table)
