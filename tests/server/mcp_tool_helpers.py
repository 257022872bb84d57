"""Python functions the MCP catalog-tool tests declare as catalog tools."""

from __future__ import annotations

from typing import Any


def add(a: int, b: int) -> dict[str, Any]:
    """Add two numbers."""
    return {"sum": a + b}
