"""The 20 Python tools of the tool scenario, for pilothouse's python tool kind."""

from __future__ import annotations


def _make(i: int):
    def tool(city: str) -> str:
        """Look up a fact about a city.

        Args:
            city: The city.
        """
        return f"tool_{i:02d}: {city} is sunny"

    tool.__name__ = f"tool_{i:02d}"
    tool.__qualname__ = tool.__name__
    return tool


for _i in range(20):
    globals()[f"tool_{_i:02d}"] = _make(_i)
