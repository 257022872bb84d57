"""The HTTP service in process, lifespan and all, with an httpx client on it.

Real tests that need the whole service (its background workers, its error
mapping, its lease) but no socket open it here: the app runs its lifespan as
``pilothouse serve`` does, and the client talks ASGI to it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from pilothouse.server._app import create_app
from pilothouse.server._state import ServerState


@asynccontextmanager
async def asgi_client(state: ServerState, timeout: float = 60) -> AsyncIterator[httpx.AsyncClient]:
    """Open ``state``, serve it through its app's lifespan, yield a client; close all after."""
    await state.open()
    try:
        app = create_app(state.settings, state=state)
        async with (
            app.router.lifespan_context(app),
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url="http://testserver",
                timeout=timeout,
            ) as http,
        ):
            yield http
    finally:
        await state.aclose()
