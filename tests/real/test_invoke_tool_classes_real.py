"""``toolClasses`` (seed 003) against a real OpenAI-compatible server on loopback.

The model server sees the marked methods of the allowed class as its
``tools``, calls one, and gets the method's result back as a ``tool``
message: the wire format of a real round trip.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_upstream import Reply, Upstream, completion, running_upstream

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError
from pilothouse.settings import Settings
from pilothouse.types import AdHocRun, ModelEndpoint

pytestmark = pytest.mark.anyio

WEATHER = "weather_tool_classes.WeatherTools"
CALENDAR = "weather_tool_classes.CalendarTools"


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        yield up


def _settings(tmp_path: Path, allowed: list[str]) -> Settings:
    return Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'r.db'}",
        secrets_file=None,
        egress_allow=["127.0.0.1"],
        invoke_tool_classes=allowed,
    )


def _run(upstream: Upstream, *classes: str) -> AdHocRun:
    return AdHocRun(
        name="Assistant",
        message="Weather in Paris and Ada's next meeting?",
        model=ModelEndpoint(base_url=upstream.base_url, model_name="gpt-5.4-nano"),
        tool_classes=classes,
    )


async def test_marked_methods_of_allowed_classes_are_called_over_the_wire(
    tmp_path: Path, upstream: Upstream
) -> None:
    calls = [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "current_temperature", "arguments": '{"city": "Paris"}'},
        },
        {
            "id": "call_2",
            "type": "function",
            "function": {"name": "next_meeting", "arguments": '{"person": "Ada"}'},
        },
    ]
    upstream.script(Reply(completion(tool_calls=calls)), Reply(completion("18 degrees; 10:00.")))
    # A module entry allows every class in it (the seed's two example classes).
    async with Pilothouse(_settings(tmp_path, ["weather_tool_classes"])) as ph:
        result = await ph.command.run_adhoc(_run(upstream, WEATHER, CALENDAR))
    assert result.result.output == "18 degrees; 10:00."
    offered = sorted(t["function"]["name"] for t in upstream.requests[0]["tools"])
    assert offered == ["AskUserQuestion", "current_temperature", "next_meeting"]
    tool_messages = {
        m["tool_call_id"]: m["content"]
        for m in upstream.requests[1]["messages"]
        if m["role"] == "tool"
    }
    assert tool_messages == {
        "call_1": "Paris: 18 degrees celsius",
        "call_2": "Ada meets the board at 10:00",
    }
    # The schema the server saw comes from the method's signature and docstring.
    weather = next(
        t["function"]
        for t in upstream.requests[0]["tools"]
        if t["function"]["name"] == "current_temperature"
    )
    assert weather["description"].startswith("Return the temperature of a city.")
    assert json.dumps(weather["parameters"]["properties"]["city"]["type"]) == '"string"'


async def test_a_class_entry_allows_that_class_only(tmp_path: Path, upstream: Upstream) -> None:
    upstream.script(Reply(completion("unused")))
    async with Pilothouse(_settings(tmp_path, [WEATHER])) as ph:
        with pytest.raises(InvalidFieldError) as caught:
            await ph.command.run_adhoc(_run(upstream, WEATHER, CALENDAR))
    assert caught.value.field == "tool_classes[1]"
    assert "PILOTHOUSE_INVOKE_TOOL_CLASSES" in caught.value.rule
    assert upstream.requests == []
