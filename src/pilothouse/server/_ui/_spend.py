"""The spend page: where the budgets stand, and what was spent per day and per month.

Everything comes from the same reads as ``pilothouse budgets status`` and
``pilothouse usage`` (``ph.query.budget_status()``, ``ph.query.usage()``);
the charts are drawn here as inline SVG, so the page needs no script.
"""

from __future__ import annotations

__all__ = ["router"]

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from pilothouse.server._ui._base import UiFacade, render

router = APIRouter(include_in_schema=False)

_DAYS = 31
"""The days the daily chart shows, today included."""
_MONTHS = 12
"""The months the monthly chart shows, this one included."""


@dataclass(frozen=True)
class Bar:
    """One bar of a chart: its label, the amount and its height in percent of the tallest."""

    label: str
    cost: Decimal
    percent: float


def _bars(totals: dict[str, Decimal], labels: list[str]) -> list[Bar]:
    tallest = max(totals.values(), default=Decimal(0))
    return [
        Bar(
            label,
            totals.get(label, Decimal(0)),
            0.0 if not tallest else float(totals.get(label, Decimal(0)) / tallest * 100),
        )
        for label in labels
    ]


def _months_back(today: date, count: int) -> list[str]:
    year, month = today.year, today.month
    labels: list[str] = []
    for _ in range(count):
        labels.append(f"{year:04d}-{month:02d}")
        year, month = (year, month - 1) if month > 1 else (year - 1, 12)
    return labels[::-1]


@router.get("/spend")
async def spend(request: Request, user: UiFacade) -> HTMLResponse:
    """Budgets of the current periods, and spend per day and per month."""
    today = datetime.now(UTC).date()
    first_month = date.fromisoformat(_months_back(today, _MONTHS)[0] + "-01")
    rows = await user.ph.query.usage(group_by=["day"], since=first_month, until=today)
    per_day = {str(row.group["day"]): Decimal(row.cost) for row in rows}
    per_month: dict[str, Decimal] = {}
    for day, cost in per_day.items():
        per_month[day[:7]] = per_month.get(day[:7], Decimal(0)) + cost
    days = [(today - timedelta(days=back)).isoformat() for back in range(_DAYS - 1, -1, -1)]
    return render(
        request,
        "spend.html",
        user=user,
        active="spend",
        budgets=await user.ph.query.budget_status(),
        daily=_bars(per_day, days),
        monthly=_bars(per_month, _months_back(today, _MONTHS)),
    )
