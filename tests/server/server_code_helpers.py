"""Code a catalog may name, granted to tenants or not by each test (``Settings.catalog_code``).

``CALLS`` records each call, so a test can tell that a refused name never ran.
"""

from __future__ import annotations

from typing import Any

from pilothouse.advisors import AdvisedCall, Next

CALLS: list[str] = []


def add(a: int, b: int) -> int:
    """Add two numbers.

    Args:
        a: the first.
        b: the second.
    """
    CALLS.append("add")
    return a + b


def approve(tool: str, arguments: dict[str, Any]) -> str:
    """Decide a tool call: an authorizer that allows everything.

    Args:
        tool: the tool's name.
        arguments: its arguments.
    """
    CALLS.append("approve")
    return "allow"


def exchange(authorization: str | None, gateway: str, tenant: str) -> str | None:
    """A gateway's token exchange."""
    CALLS.append("exchange")
    return "Bearer exchanged"


class _PassThrough:
    async def around(self, call: AdvisedCall, next: Next) -> Any:
        return await next(call)


def make_advisor(settings: dict[str, Any]) -> _PassThrough:
    """An advisor factory."""
    CALLS.append("advisor")
    return _PassThrough()
