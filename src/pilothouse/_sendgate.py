"""The gate a turn's first request waits at while the turn's start record is written.

On PostgreSQL the statement that records a new conversation and its first
message takes a round trip and a flush of the write-ahead log. For a turn
that does nothing but call the model, pilothouse sends that statement first
and builds the model request while the database works; the request's bytes
leave only once the statement has committed. So no prompt ever reaches a
provider before its record is durable, and the build costs no wall time.

The gate is a context variable: the run loop opens it for such a turn, and
every model client waits at it just before sending (pilothouse's Chat
Completions client right before the HTTP request, any other model before
the request is made). Outside such a turn it is None and costs one lookup.
"""

from __future__ import annotations

__all__ = ["SEND_GATE", "SendGate", "before_send"]

from contextvars import ContextVar
from typing import Protocol


class SendGate(Protocol):
    """What a model client waits for before its request leaves."""

    async def passed(self) -> None:
        """Return once the turn's start is durable; raise if it was not written."""
        ...


SEND_GATE: ContextVar[SendGate | None] = ContextVar("pilothouse_send_gate", default=None)
"""The gate of the turn running in this context, if its start is still in flight."""


async def before_send() -> None:
    """Wait until the running turn's start record is durable (at once when there is none).

    Raises:
        Exception: the error that kept the start from being written; the
            turn then never sends anything.
    """
    gate = SEND_GATE.get()
    if gate is not None:
        await gate.passed()
