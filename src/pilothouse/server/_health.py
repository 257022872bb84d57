"""Health, readiness and metrics: the routes an orchestrator and a scraper call.

``/healthz`` says the process answers (no database call: a liveness probe
must not restart a healthy process because the database blinked).
``/readyz`` says the service can serve: the database answers and its schema
is at the newest migration; otherwise 503, so a load balancer routes around
it. Neither needs a key. ``/metrics`` is the operator's: its series name
every tenant and its usage, so it is open on a loopback bind only (or as
``PILOTHOUSE_SERVER_METRICS_ANONYMOUS`` says) and answers the operator's
scraper token (``PILOTHOUSE_SERVER_METRICS_TOKEN``) otherwise, never a
tenant's API key.
"""

from __future__ import annotations

__all__ = ["router"]

import hmac
import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from pilothouse.errors import TooManyRequestsError, UnauthorizedError
from pilothouse.server._deps import State
from pilothouse.server._problems import problem_responses
from pilothouse.server._state import ServerState

logger = logging.getLogger(__name__)

router = APIRouter(tags=["health"], responses=problem_responses(401, 405, 429, 500))


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    """Return ``{"status": "ok"}``."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    summary="Readiness: the database answers and migrations are current",
    responses={503: {"description": "Not ready; the body says why."}},
)
async def readyz(state: State) -> JSONResponse:
    """Return 200 when ready, 503 with the failing check otherwise."""
    checks: dict[str, Any] = {}
    ready = True
    try:
        current = (await state.pilothouse.schema_revision()).is_current
        checks["database"] = "ok"
        checks["migrations"] = "current" if current else "pending"
        ready = current
    except Exception as exc:
        # The driver's message may carry the database URL (and its password).
        logger.warning("readiness: database unreachable (%s)", type(exc).__name__)
        checks["database"] = "unreachable"
        ready = False
    return JSONResponse(
        {"status": "ready" if ready else "not ready", "checks": checks},
        status_code=200 if ready else 503,
    )


@router.get(
    "/metrics",
    summary="Prometheus metrics (text exposition format)",
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
)
async def metrics(request: Request, state: State) -> Response:
    """Return every metric in the Prometheus text format."""
    if not state.server.anonymous_metrics:
        await _check_scraper(request, state)
    return Response(state.metrics.render(), media_type=state.metrics.content_type)


async def _check_scraper(request: Request, state: ServerState) -> None:
    """Let the operator's scraper through: its token, never a tenant's API key.

    Raises:
        UnauthorizedError: no token configured, or another one presented.
        TooManyRequestsError: the address has failed too often this minute.
    """
    expected = state.server.metrics_token
    if expected is None:
        raise UnauthorizedError(
            "/metrics shows every tenant's usage and is the operator's: bind the service to "
            "loopback, or set PILOTHOUSE_SERVER_METRICS_TOKEN and scrape with "
            "'Authorization: Bearer <token>' (API keys are not accepted here)"
        )
    scheme, _, given = request.headers.get("authorization", "").partition(" ")
    # Constant-time, so timing says nothing about the token.
    if scheme.lower() == "bearer" and hmac.compare_digest(
        given.strip().encode(), expected.get_secret_value().encode()
    ):
        return
    address = request.client.host if request.client is not None else "unknown"
    wait = await state.auth_failures.acquire(f"address:{address}")
    if wait is not None:
        raise TooManyRequestsError(
            "too many requests without a valid token from this address; retry later",
            retry_after=wait,
        )
    raise UnauthorizedError(
        "/metrics answers the operator's scraper token (PILOTHOUSE_SERVER_METRICS_TOKEN) "
        "as 'Authorization: Bearer <token>'; API keys are not accepted here"
    )
