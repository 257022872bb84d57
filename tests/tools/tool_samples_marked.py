"""A module service where only @tool-marked functions are tools."""

from __future__ import annotations

from pilothouse.tools import tool


@tool
def lookup(key: str) -> str:
    """Look a key up.

    Args:
        key: the key.
    """
    return key.upper()


@tool(name="remember_it", description="Store a value.", policy="authorized")
def remember(key: str, value: str) -> None:
    del key, value


def format_key(key: str) -> str:
    """A helper the model must not see."""
    return key.strip()
