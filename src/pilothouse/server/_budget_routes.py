"""Where the tenant's budgets stand, under ``/v1/budgets``.

Any key of the tenant may read it: a refused call already tells its caller
the budget's code and what is left, and this page is the same figures for
every budget at once. The key's tenant bounds it; budgets are written
through the catalog (``/v1/catalog/budgets``, admin keys).
"""

from __future__ import annotations

__all__ = ["router", "usage_router"]

from datetime import date

from fastapi import APIRouter

from pilothouse.server._deps import CheckedJsonRoute, Facade
from pilothouse.server._problems import PROBLEM_RESPONSES
from pilothouse.types import BudgetStatus, UsageRow

router = APIRouter(
    prefix="/v1/budgets",
    tags=["budgets"],
    responses=PROBLEM_RESPONSES,
    route_class=CheckedJsonRoute,
)


@router.get("/status", summary="Where each budget stands in its current period")
async def budget_status(ph: Facade) -> list[BudgetStatus]:
    """Return one entry per budget and subject: limits, spent, held, remaining, reset time."""
    return await ph.query.budget_status()


usage_router = APIRouter(
    prefix="/v1/usage",
    tags=["budgets"],
    responses=PROBLEM_RESPONSES,
    route_class=CheckedJsonRoute,
)


@usage_router.get("", summary="Spend and tokens, grouped, for conversations started in a range")
async def usage(
    ph: Facade, group_by: str = "action", since: date | None = None, until: date | None = None
) -> list[UsageRow]:
    """Return one row per group: conversations, input and output tokens, estimated cost."""
    return await ph.query.usage(group_by, since, until)
