"""What the local model tests share: an OpenAI client for a server, and the weather tool."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI
from openai.types.chat import ChatCompletionToolParam

WEATHER_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string", "description": "The city name"}},
    "required": ["city"],
}
WEATHER_TOOL: ChatCompletionToolParam = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather for a city",
        "parameters": WEATHER_PARAMETERS,
    },
}
PARIS = "What is the weather in Paris?"


def client_for(base_url: str) -> AsyncOpenAI:
    """An OpenAI client for a local server: any key, no retries, a generous timeout.

    No retries, so that a broken server fails the test at once instead of
    after backoff.
    """
    return AsyncOpenAI(base_url=base_url, api_key="local", max_retries=0, timeout=120)
