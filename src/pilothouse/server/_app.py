"""The FastAPI application: routers, middlewares, error mapping and lifespan.

:func:`create_app` builds the whole service from the routers listed in
:func:`routers`. Every error leaves it as ``application/problem+json`` (see
:mod:`pilothouse.server._problems`): a pilothouse error by its category
(:data:`~pilothouse.server._problems.HTTP_STATUS`), everything else here:

==========================================  ======
error                                       status
==========================================  ======
malformed JSON body                         400
bad input (``ErrorCategory.INVALID_INPUT``)  422
request validation, catalog validation      422
missing/unknown/revoked API key             401
key without admin scope                     403
not found, unknown route                    404
wrong method                                405
invalid state, conflict                     409
body over the size limit                    413
rate limit                                  429 (``Retry-After``)
a model provider failed outside a turn      502
anything unexpected                         500 (generic detail, logged here)
==========================================  ======

The OpenAI-compatible routes answer errors in OpenAI's shape and JSON-RPC
inside its envelope, each by a map of its own; ``/v1/invoke`` answers bad
input 400, as its connector contract says.
"""

from __future__ import annotations

__all__ = ["create_app", "routers"]

import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import anyio
from fastapi import Depends, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.cors import CORSMiddleware

from pilothouse.api import TraceExport
from pilothouse.errors import ErrorCategory, PilothouseError
from pilothouse.server._jsonbody import JsonBodyMiddleware
from pilothouse.server._limits import UPLOAD_ROUTE, BodySizeLimitMiddleware
from pilothouse.server._metrics import MetricsMiddleware
from pilothouse.server._problems import (
    PROBLEM_MEDIA_TYPE,
    ProblemError,
    error_problem,
    field_path,
    problem,
    problem_bytes,
)
from pilothouse.server._query import refuse_undeclared_query
from pilothouse.server._requestlog import RequestContextMiddleware
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings

if TYPE_CHECKING:
    from fastapi import APIRouter
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

    from pilothouse.server._mcp import McpHttp

logger = logging.getLogger(__name__)


def routers() -> list[APIRouter]:
    """Every router of the service, in the order they are mounted.

    Listed here, one import each: a module that fails to import fails the
    app, rather than a route silently going missing.
    """
    from pilothouse.server._audit_routes import router as audit
    from pilothouse.server._budget_routes import router as budgets
    from pilothouse.server._budget_routes import usage_router as usage
    from pilothouse.server._catalog_routes import router as catalog
    from pilothouse.server._conversation_routes import router as conversations
    from pilothouse.server._evaluation_routes import router as evaluation
    from pilothouse.server._health import router as health
    from pilothouse.server._invoke import router as invoke
    from pilothouse.server._jsonrpc import router as jsonrpc
    from pilothouse.server._knowledge_routes import router as knowledge
    from pilothouse.server._memory_routes import router as memory
    from pilothouse.server._openai import router as openai
    from pilothouse.server._ui import routers as ui

    return [
        health,
        catalog,
        conversations,
        audit,
        budgets,
        usage,
        evaluation,
        openai,
        invoke,
        jsonrpc,
        knowledge,
        memory,
        *ui(),
    ]


def _for_browser(request: Request, response: JSONResponse) -> Response:
    # The browser UI's pages and fragments show an error as HTML (server/_ui/_errors.py).
    from pilothouse.server._ui._errors import for_browser

    return for_browser(request, response)


async def _pilothouse_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, PilothouseError)
    if exc.category is ErrorCategory.UPSTREAM:
        # Only the kind of failure leaves the process (public_message).
        logger.warning("model provider failed outside a turn: %s", type(exc).__name__)
    return _for_browser(request, error_problem(exc).response())


def _field(loc: Sequence[Any], request: Request) -> str:
    # ("body", "attachments", 0, "url") -> "attachments[0].url"; the
    # location kind (body/query/path/header) is kept for non-body fields.
    parts = list(loc)
    if parts and parts[0] == "body":
        return field_path(parts[1:], _body_type(request))
    if parts:
        return f"{parts[0]}:" + field_path(parts[1:])
    return "body"


def _body_type(request: Request) -> Any:
    # The body's model, walked by field_path to tell its fields from a dict's keys.
    route = request.scope.get("route")
    body = route.body_field if isinstance(route, APIRoute) else None
    return None if body is None else body.field_info.annotation


async def _validation_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, RequestValidationError)
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        where = next(e for e in errors if e.get("type") == "json_invalid")
        reason = where.get("ctx", {}).get("error", "invalid JSON")
        return _for_browser(
            request,
            problem(400, "Malformed JSON", f"the request body is not valid JSON: {reason}"),
        )
    # The offending input is deliberately left out: it may hold a secret.
    entries: list[dict[str, Any]] = [
        {
            "loc": list(e.get("loc", ())),
            "field": _field(e.get("loc", ()), request),
            "msg": str(e.get("msg", "")),
            "rule": str(e.get("msg", "")),
            "type": str(e.get("type", "")),
        }
        for e in errors
    ]
    names = ", ".join(sorted({str(e["field"]) for e in entries}))
    return _for_browser(
        request,
        problem(422, "Request validation failed", f"invalid field(s): {names}", errors=entries),
    )


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    detail = exc.detail
    if exc.status_code == 404 and detail == "Not Found":
        detail = "no such route"
    elif exc.status_code == 405:
        detail = "this route does not accept the method"
    return _for_browser(request, problem(exc.status_code, None, detail, headers=exc.headers))


async def _problem_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, ProblemError)
    return _for_browser(request, exc.response())


class _UnexpectedErrorMiddleware:
    """Answer an unexpected exception with a generic 500 problem; log it here.

    Starlette's own 500 handling re-raises after answering (so the server
    logs it twice and test clients see an exception); this middleware ends
    the request cleanly, and the only stack trace goes to this module's log.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception:
            logger.exception("unexpected error answering %s %s", scope["method"], scope["path"])
            if started:
                # The response is under way (a stream); it can only be cut short.
                return
            body = problem_bytes(500, None, "an unexpected error occurred; it has been logged")
            await send(
                {
                    "type": "http.response.start",
                    "status": 500,
                    "headers": [
                        (b"content-type", PROBLEM_MEDIA_TYPE.encode()),
                        (b"content-length", str(len(body)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})


@asynccontextmanager
async def _served(served: ServerState, mcp: McpHttp) -> AsyncGenerator[None]:
    """Run the service's state: schema, lease, MCP sessions and background workers."""
    await served.open()
    try:
        # The lease marks ST what a crashed process left RU, and lets
        # cancels recorded by other workers reach this one's turns.
        async with (
            served.pilothouse.lease(
                heartbeat_seconds=served.server.heartbeat_seconds,
                poll_seconds=served.server.cancel_poll_seconds,
            ),
            mcp.running(),
            anyio.create_task_group() as group,
        ):
            group.start_soon(served.drain_on_signal)
            if served.server.question_sweep_seconds > 0:
                # Questions expire on the service's own clock (seed 000).
                group.start_soon(served.expire_questions_forever)
            # The memory worker (extraction jobs, session expiry) runs beside
            # the requests.
            if served.server.memory_worker_seconds > 0:
                from pilothouse.server._memory_worker import memory_worker

                group.start_soon(
                    memory_worker,
                    served.pilothouse,
                    served.server.memory_worker_seconds,
                    served.server.memory_expiry_seconds,
                )
            try:
                yield
            finally:
                # Turns still running get the grace period, then are
                # stopped and recorded TE, before the lease is given up
                # and the database closes under them.
                await served.drain()
                group.cancel_scope.cancel()
    finally:
        await served.aclose()


def create_app(
    settings: Settings | None = None,
    *,
    state: ServerState | None = None,
    server: ServerSettings | None = None,
    tracing: TraceExport | None = None,
) -> FastAPI:
    """Build the HTTP service.

    Args:
        settings: deployment settings; read from the environment when omitted.
        state: shared state to serve; the app creates its own when omitted.
            Either way the lifespan opens it, and on shutdown drains its
            running turns and closes it (closing twice is harmless).
        server: HTTP service settings for a state the app creates.
        tracing: span export to install while the app runs (``pilothouse
            serve`` reads it from the ``OTEL_*`` variables); the process's
            global tracer provider, so one app per process.

    Returns:
        The ASGI application.
    """
    if state is None:
        state = ServerState(settings if settings is not None else Settings(), server=server)
    served = state
    from pilothouse.server._mcp import McpHttp

    mcp = McpHttp(state)

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncGenerator[None]:
        provider = tracing.install() if tracing is not None else None
        if tracing is not None:
            logger.info(tracing.describe())
        try:
            async with _served(served, mcp):
                yield
        finally:
            if provider is not None:
                # Spans still queued leave before the process does.
                await anyio.to_thread.run_sync(TraceExport.shutdown, provider)

    app = FastAPI(
        # A query parameter a route does not read is refused, not dropped.
        dependencies=[Depends(refuse_undeclared_query)],
        title="pilothouse",
        summary="Governed access from business applications to large language models.",
        version=_version(),
        lifespan=lifespan,
        # /docs and /redoc are served from vendored assets (server/_ui), not a CDN.
        docs_url=None,
        redoc_url=None,
    )
    app.state.pilothouse = state
    app.add_exception_handler(ProblemError, _problem_error)
    app.add_exception_handler(PilothouseError, _pilothouse_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)

    for router in routers():
        app.include_router(router)
    from pilothouse.server._ui import mount_static

    mount_static(app)
    # The MCP server's transports are the SDK's ASGI apps, not FastAPI routes.
    app.router.routes.extend(mcp.routes())

    # Added innermost first: a request meets metrics, then the 500 guard,
    # then CORS, then the body limit (so a 413 still carries CORS headers).
    # Innermost of all: it reads a body the size limit has already counted.
    app.add_middleware(JsonBodyMiddleware)
    app.add_middleware(
        BodySizeLimitMiddleware,
        max_bytes=state.server.max_body_bytes,
        answered_by_route=("/mcp", "/messages/"),
        routes=[("POST", UPLOAD_ROUTE, state.server.max_upload_bytes)],
    )
    if state.server.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=state.server.cors_origins,
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=["Retry-After"],
        )
    app.add_middleware(_UnexpectedErrorMiddleware)
    app.add_middleware(MetricsMiddleware, metrics=state.metrics)
    # Outermost: every log line of the request, the access line too, names it.
    app.add_middleware(RequestContextMiddleware)
    return app


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pilothouse")
    except PackageNotFoundError:
        return "0.0.0"
