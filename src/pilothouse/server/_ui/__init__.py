"""The browser faces of the service: the playground and the catalog UI (``docs/playground.md``).

Server-rendered Jinja2 pages and fragments, htmx and a little Alpine.js,
all vendored into ``static/`` (no CDN, no JavaScript build). Every route
goes through :mod:`pilothouse.api` with the logged-in key's tenant.
"""

from __future__ import annotations

__all__ = ["mount_static", "routers"]

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from fastapi import APIRouter, FastAPI


def routers() -> list[APIRouter]:
    """The UI's routers: login, playground, chat, compare, memory, knowledge, catalog, more."""
    from pilothouse.server._ui._catalog import router as catalog
    from pilothouse.server._ui._chat import router as chat
    from pilothouse.server._ui._compare import router as compare
    from pilothouse.server._ui._evaluation import router as evaluation
    from pilothouse.server._ui._knowledge import router as knowledge
    from pilothouse.server._ui._login import router as login
    from pilothouse.server._ui._memory import router as memory
    from pilothouse.server._ui._playground import router as playground
    from pilothouse.server._ui._spend import router as spend

    return [login, playground, chat, compare, memory, knowledge, catalog, evaluation, spend]


def mount_static(app: FastAPI) -> None:
    """Serve ``static/`` (the UI's CSS and script, vendored htmx, Alpine, Swagger UI, ReDoc)."""
    from fastapi.staticfiles import StaticFiles

    from pilothouse.server._ui._base import STATIC

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
