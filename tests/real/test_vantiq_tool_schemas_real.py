"""Vantiq's tools given as schemas for one call (seed 004), against a real server on loopback.

The guide's "Tool Custom Invocation": ``submitPrompt(..., tools: [schema])``
with the ``getCurrentWeather`` FunctionDescriptor verbatim; the model's tool
call comes back to the caller, which runs the tool itself (the temperature
18) and gives the result back; the model then answers. Here the schema goes
in the runtime config's ``tools`` and the result through
``submit_tool_result``. The model server is a real HTTP server on loopback.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_upstream import Reply, Upstream, completion, running_upstream

from pilothouse.api import Pilothouse
from pilothouse.catalog import FinishReason, ProcessStatus
from pilothouse.errors import PilothouseError
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder

pytestmark = pytest.mark.anyio

# The guide's schema, verbatim (VAIL object syntax written as JSON).
SCHEMA = {
    "name": "getCurrentWeather",
    "description": "Return the temperature of the specified location in Celsius",
    "parameters": {
        "type": "object",
        "properties": {
            "location": {
                "type": "string",
                "description": "The location to get the temperature for",
            }
        },
        "required": ["location"],
    },
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        yield up


async def _catalog(ph: Pilothouse, upstream: Upstream) -> None:
    await (
        CatalogBuilder()
        .provider("OAI", kind="openai-compatible", base_url=upstream.base_url)
        .model("GPT", provider="OAI", model_name="gpt-4o", capabilities=["FC"])
        .action("ASK", prompt="Answer.", model="GPT", ask_user=False)
        .import_into(ph)
    )


def _settings(tmp_path: Path) -> Settings:
    return Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 't.db'}", secrets_file=None)


async def test_a_schema_given_for_one_call_returns_the_call_and_takes_its_result(
    tmp_path: Path, upstream: Upstream
) -> None:
    call = {
        "id": "call_w1",
        "type": "function",
        "function": {"name": "getCurrentWeather", "arguments": '{"location": "Paris"}'},
    }
    upstream.script(
        Reply(completion(tool_calls=[call])),
        Reply(completion("The temperature in Paris is 18 degrees Celsius.")),
    )
    async with Pilothouse(_settings(tmp_path)) as ph:
        await _catalog(ph, upstream)
        first = await ph.command.start_and_send(
            "What is the temperature in Paris?", action="ASK", runtime_config={"tools": [SCHEMA]}
        )
        # The call is the caller's to run: nothing invoked it on the server.
        assert first.finish_reason is FinishReason.TOOL_CALLS
        (returned,) = first.tool_calls
        assert (returned.name, returned.arguments) == ("getCurrentWeather", {"location": "Paris"})
        final = await ph.command.submit_tool_result(first.conversation_uuid, returned.id, 18)
    assert final.status is ProcessStatus.COMPLETED
    assert final.output == "The temperature in Paris is 18 degrees Celsius."
    (offered,) = [
        t["function"]
        for t in upstream.requests[0]["tools"]
        if t["function"]["name"] == "getCurrentWeather"
    ]
    assert offered["description"] == SCHEMA["description"]
    assert offered["parameters"]["properties"] == SCHEMA["parameters"]["properties"]
    assert offered["parameters"]["required"] == ["location"]
    tool_messages = [m for m in upstream.requests[1]["messages"] if m["role"] == "tool"]
    assert [(m["tool_call_id"], json.loads(m["content"])) for m in tool_messages] == [
        ("call_w1", 18)
    ]


async def test_both_spellings_of_the_switch_are_refused(tmp_path: Path, upstream: Upstream) -> None:
    upstream.script(Reply(completion("unused")))
    async with Pilothouse(_settings(tmp_path)) as ph:
        await _catalog(ph, upstream)
        with pytest.raises(PilothouseError, match="'client_tools' and another spelling"):
            await ph.command.start_and_send(
                "Hi", action="ASK", runtime_config={"tools": [SCHEMA], "client_tools": [SCHEMA]}
            )
    assert upstream.requests == []
