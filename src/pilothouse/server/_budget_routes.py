"""Where the tenant's budgets stand (``/v1/budgets``) and what it spent (``/v1/usage``).

Any key of the tenant may read it: a refused call already tells its caller
the budget's code and what is left, and this page is the same figures for
every budget at once. The key's tenant bounds it; budgets are written
through the catalog (``/v1/catalog/budgets``, admin keys).
"""

from __future__ import annotations

__all__ = ["router", "usage_router"]

from datetime import date
from typing import Annotated

from fastapi import APIRouter, Query

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


@usage_router.get("", summary="Spend and tokens, grouped")
async def usage(
    ph: Facade,
    by: Annotated[
        list[str],
        Query(
            description="Group by any of tenant, key, agent, action, user, model, day "
            "(repeat the parameter for several).",
            max_length=7,
        ),
    ] = ["action"],  # noqa: B006 - FastAPI copies a query list's default per request
    since: Annotated[date | None, Query(description="First day counted (UTC).")] = None,
    until: Annotated[date | None, Query(description="Last day counted (UTC, included).")] = None,
) -> list[UsageRow]:
    """Return the tenant's conversations' tokens and cost per group, most costly first."""
    return await ph.query.usage(group_by=by, since=since, until=until)
