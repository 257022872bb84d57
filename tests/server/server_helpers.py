"""Helpers the HTTP service tests share (fixtures are in conftest.py)."""

from __future__ import annotations

import json
from typing import Any


def auth(key: str) -> dict[str, str]:
    """The request headers carrying an API key."""
    return {"Authorization": f"Bearer {key}"}


def parse_sse(text: str) -> list[tuple[str, dict[str, Any]]]:
    """Split a Server-Sent Events body into (event, data) pairs."""
    events: list[tuple[str, dict[str, Any]]] = []
    for block in text.strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        events.append((lines["event"], json.loads(lines["data"])))
    return events
