"""Tool classes for the ``toolClasses`` tests (seed 003's ``com.example.WeatherTools``).

Imported by pilothouse itself, by dotted name, when a deployment allows this
module; the tests never import it.
"""

from __future__ import annotations

from pilothouse.tools import tool


class WeatherTools:
    """Seed 003's example class, in Python: a no-arg constructor and marked methods."""

    def __init__(self) -> None:
        self.unit = "celsius"

    @tool
    def current_temperature(self, city: str) -> str:
        """Return the temperature of a city.

        Args:
            city: the city's name.
        """
        return f"{city}: 18 degrees {self.unit}"

    def helper(self) -> str:
        """Not marked: never offered to the model."""
        return "private"


class CalendarTools:
    """Seed 003's second example class."""

    @tool(name="next_meeting")
    def upcoming(self, person: str) -> str:
        """Return someone's next meeting.

        Args:
            person: whose calendar.
        """
        return f"{person} meets the board at 10:00"


class Unmarked:
    """A class without @tool methods: refused, nothing offered."""

    def shout(self, text: str) -> str:
        """Shout."""
        return text.upper()


class NeedsArguments:
    """Not constructible without arguments: refused as the connector does."""

    def __init__(self, token: str) -> None:
        self.token = token

    @tool
    def use(self) -> str:
        """Use the token."""
        return self.token


class ToolService:
    """Vantiq's ``tool.example.ToolService``: every public method is a tool."""

    def getCurrentTemperature(self, location: str) -> int:
        """Return the temperature of the specified location in Celsius.

        Args:
            location: The location to get the temperature for.
        """
        return 18 if location == "Paris" else 21

    def getHumidity(self, location: str) -> str:
        """Return the relative humidity of a location.

        Args:
            location: the location.
        """
        return f"{location}: 60%"

    def _private(self) -> str:
        return "not offered"
