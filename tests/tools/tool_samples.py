"""Functions, a module service and a class service for the tool tests."""

from __future__ import annotations

from enum import StrEnum

import anyio
from pydantic import BaseModel

from pilothouse.tools import ToolContext


class Unit(StrEnum):
    CELSIUS = "celsius"
    FAHRENHEIT = "fahrenheit"


class Forecast(BaseModel):
    city: str
    degrees: float
    unit: Unit


def get_weather(city: str, days: int = 1, unit: Unit = Unit.CELSIUS) -> Forecast:
    """Get the weather forecast for a city.

    Only a few cities are known.

    Args:
        city: the city's name, in English.
        days: how many days ahead.
        unit: the temperature unit.
    """
    return Forecast(city=city, degrees=21.5 + days, unit=unit)


async def slow_echo(text: str, delay: float = 0.0) -> str:
    """Echo text back after a pause.

    Args:
        text: what to echo.
        delay: seconds to wait first.
    """
    await anyio.sleep(delay)
    return text


def divide(a: float, b: float) -> float:
    """Divide a by b."""
    return a / b


def who_calls(context: ToolContext, note: str) -> dict[str, str]:
    """Report the calling conversation.

    Args:
        context: injected by the registry, never in the schema.
        note: anything.
    """
    return {"conversation": context.conversation_uuid, "call": context.call_id, "note": note}


def _private_helper() -> None:
    """Not a tool: private."""


class Calculator:
    """A service of tools; made with no arguments."""

    def __init__(self) -> None:
        self.offset = 100

    def add(self, a: int, b: int) -> int:
        """Add two numbers plus the calculator's offset.

        Args:
            a: the first number.
            b: the second number.
        """
        return a + b + self.offset

    async def negate(self, x: int) -> int:
        """Negate a number."""
        return -x

    def _internal(self) -> int:
        return 0


class NeedsArguments:
    def __init__(self, required: str) -> None:
        self.required = required

    def work(self) -> str:
        """Work."""
        return self.required
