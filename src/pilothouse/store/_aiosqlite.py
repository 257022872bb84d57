"""Closing an aiosqlite connection that a cancellation invalidated, to the end.

When a task is cancelled while its ORM session waits on aiosqlite (an event
worker stopped mid-turn, a client that hangs up), SQLAlchemy invalidates the
connection and "terminates" it: it starts a graceful close under
``asyncio.shield`` and, when the wait for it is itself cancelled, stops the
connection's thread at once. anyio cancels a task again at every await while
its scope is cancelled, so that wait is always cancelled: the thread stops
while the shielded close still waits for it, and that close stays pending for
ever. The event loop then never finishes shutting down (``asyncio.run`` waits
for every task), and a process asked to stop hangs.

Here the close is awaited until it ends, whatever cancellations arrive
meanwhile (closing a local SQLite connection takes milliseconds), and the
cancellation is raised afterwards.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sqlalchemy.engine import Dialect
from sqlalchemy.util import await_
from sqlalchemy.util.concurrency import in_greenlet


def close_to_the_end(dialect: Dialect) -> None:
    """Make ``dialect`` (aiosqlite's) wait for a terminated connection's close."""
    setattr(dialect, "do_terminate", _terminate)  # noqa: B010 - an instance's method, on purpose


def _terminate(dbapi_connection: Any) -> None:
    graceful = getattr(dbapi_connection, "_terminate_graceful_close", None)
    if graceful is None or not in_greenlet():
        # Another adapter, or a connection collected as garbage outside the
        # loop: SQLAlchemy's own way.
        dbapi_connection.terminate()
        return
    closing: asyncio.Future[None] = asyncio.ensure_future(graceful())
    cancelled: asyncio.CancelledError | None = None
    while not closing.done():
        try:
            await_(asyncio.shield(closing))
        except asyncio.CancelledError as exc:
            cancelled = exc
        except Exception:
            # The close's own failure: ``closing`` holds it, read below.
            break
    if closing.cancelled() or closing.exception() is not None:
        # A connection already broken: stop its thread without waiting, as
        # SQLAlchemy does when a graceful close fails.
        dbapi_connection._terminate_force_close()
    if cancelled is not None:
        raise cancelled
