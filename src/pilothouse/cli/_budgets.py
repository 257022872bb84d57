"""`pilothouse budgets status` and `pilothouse usage`: budgets and what was spent.

Budgets are catalog entities (``budgets:`` in catalog YAML); this command
reads their ledger for the current period: limits, spent, held by calls in
flight, remaining, and when the period resets.
"""

from __future__ import annotations

__all__ = ["app", "usage"]

import json
from dataclasses import asdict
from datetime import date
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

from pilothouse.cli._context import CliState, open_facade, run

if TYPE_CHECKING:
    from pilothouse.types import BudgetStatus, UsageRow

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


def usage(
    ctx: typer.Context,
    group_by: Annotated[
        str,
        typer.Option("--by", help="tenant, api_key, agent, action, user, model or day (UTC)."),
    ] = "action",
    since: Annotated[
        str | None, typer.Option(help="First day (UTC, YYYY-MM-DD) of conversations counted.")
    ] = None,
    until: Annotated[
        str | None, typer.Option(help="Last day (UTC, YYYY-MM-DD) of conversations counted.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON array.")] = False,
) -> None:
    """Show spend and tokens grouped by tenant, key, agent, action, user, model or day."""
    state: CliState = ctx.obj
    try:
        first = None if since is None else date.fromisoformat(since)
        last = None if until is None else date.fromisoformat(until)
    except ValueError as exc:
        raise typer.BadParameter(f"write days as YYYY-MM-DD: {exc}") from None

    async def body() -> list[UsageRow]:
        async with open_facade(state) as ph:
            return await ph.query.usage(group_by, first, last)

    rows = run(body)
    if as_json:
        typer.echo(json.dumps([asdict(r) for r in rows], indent=2))
        return
    table = Table(group_by, "conversations", "input tokens", "output tokens", "cost")
    for row in rows:
        table.add_row(
            row.key or "-",
            str(row.conversations),
            str(row.input_tokens),
            str(row.output_tokens),
            row.cost,
        )
    Console(soft_wrap=True).print(table)
