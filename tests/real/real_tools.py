"""Python tools the real tests register by dotted path (``real_tools:get_weather``)."""


def get_weather(city: str) -> str:
    """Get the current weather in a city.

    Args:
        city: the city name.
    """
    return f"It is 21 degrees and sunny in {city}."


def get_time() -> str:
    """Get the current time (no arguments)."""
    return "It is 12:00 UTC."
