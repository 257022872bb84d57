"""Where the tenant's budgets stand, under ``/v1/budgets``.

Any key of the tenant may read it: a refused call already tells its caller
the budget's code and what is left, and this page is the same figures for
every budget at once. The key's tenant bounds it; budgets are written
through the catalog (``/v1/catalog/budgets``, admin keys).
"""

from __future__ import annotations

__all__ = ["router"]

from fastapi import APIRouter

from pilothouse.server._deps import CheckedJsonRoute, Facade
from pilothouse.server._problems import PROBLEM_RESPONSES
from pilothouse.types import BudgetStatus

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
