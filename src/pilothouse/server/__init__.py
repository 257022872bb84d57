"""The HTTP service: REST, Server-Sent Events, OpenAI-compatible, connector, JSON-RPC.

:func:`create_app` builds the FastAPI application over a
:class:`ServerState` (one :class:`~pilothouse.api.Pilothouse` per process,
a view of it per tenant); ``pilothouse serve`` runs it with uvicorn through
:func:`app_from_environment`. Every route reaches pilothouse through that
facade and :mod:`pilothouse.types`.
"""

from __future__ import annotations

__all__ = [
    "Principal",
    "RpcRouter",
    "ServerSettings",
    "ServerState",
    "app_from_environment",
    "create_app",
]

from typing import TYPE_CHECKING

from pilothouse.server._app import create_app
from pilothouse.server._deps import Principal
from pilothouse.server._rpc_router import RpcRouter
from pilothouse.server._state import ServerSettings, ServerState

if TYPE_CHECKING:
    from fastapi import FastAPI


def app_from_environment() -> FastAPI:
    """Build the app from ``PILOTHOUSE_*`` and ``PILOTHOUSE_SERVER_*`` variables.

    uvicorn calls it (``factory=True``) in every worker process. Span export
    follows the ``OTEL_*`` variables (:class:`~pilothouse.api.TraceExport`).
    """
    import os

    from pilothouse.api import TraceExport
    from pilothouse.settings import Settings

    if os.environ.get("PILOTHOUSE_SERVER_LOG_FORMAT") == "json":
        import logging

        # uvicorn configured this worker's logging as JSON; a library's
        # warning would otherwise be a plain-text line in that stream.
        logging.captureWarnings(True)
    tracing = TraceExport.from_environment(os.environ)
    return create_app(Settings(), server=ServerSettings(), tracing=tracing)
