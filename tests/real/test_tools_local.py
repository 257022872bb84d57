"""The governed tool loop against real components.

The local llama.cpp model (SmolLM2) calls a Python tool registered by dotted
path and answers from its result; a question asked in one process is answered
in another, as after a restart.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pilothouse.api import Pilothouse
from pilothouse.catalog import import_catalog
from pilothouse.catalog._enums import MessageRole, ProcessStatus, ToolCallStatus
from pilothouse.providers._local import LocalModelServers
from pilothouse.settings import Settings
from pilothouse.store import Database

pytestmark = [pytest.mark.real, pytest.mark.anyio]

HERE = Path(__file__).resolve().parent

CATALOG = """
providers:
  - code: LOCL
    kind: local
    settings: {model_path: smollm2}
  - code: SCRT
    kind: test
models:
  - code: SMOLLM2
    provider: LOCL
    model_name: SmolLM2-135M-Instruct
    capabilities: [FC, SR]
  - code: SCRP
    provider: SCRT
    model_name: scripted
    capabilities: [FC]
configurations:
  - code: DFLT
    max_tokens: 96
    temperature: 0
tools:
  - code: WEATHER
    name: get_weather
    kind: python
    implementation: "real_tools:get_weather"
    description: Get the current weather in a city.
actions:
  - code: WEATHER
    model: SMOLLM2
    configuration: DFLT
    prompt: Answer weather questions with the get_weather tool.
    tools: [WEATHER]
    ask_user: false
  - code: ASK
    model: SCRP
    configuration: DFLT
    prompt: Take shirt orders; ask for what you need.
  - code: CLOCK
    model: SCRP
    configuration: DFLT
    prompt: Tell the time with your tools.
    mcp_clients: [time]
    ask_user: false
mcp_clients:
  - name: time
    transport: stdio
    command: python
    args: [-m, mcp_server_time, --local-timezone, UTC]
    description: The current time in any timezone.
"""


async def _catalog(tmp_path: Path) -> str:
    (tmp_path / "catalog.yaml").write_text(CATALOG, encoding="utf-8")
    url = f"sqlite+aiosqlite:///{tmp_path / 'tools.db'}"
    database = Database(url)
    await database.ensure_schema()
    await import_catalog(database, "default", [tmp_path / "catalog.yaml"], user="test")
    await database.dispose()
    return url


async def test_local_model_calls_a_python_tool_and_answers_from_its_result(
    tmp_path: Path, local_model_servers: LocalModelServers
) -> None:
    url = await _catalog(tmp_path)
    settings = Settings(database_url=url)
    async with Pilothouse(settings, local_servers=local_model_servers) as ph:
        conversation = await ph.command.start_conversation(action="WEATHER")
        result = await ph.command.send_message(conversation.uuid, "What is the weather in Paris?")
        transcript = await ph.query.get_transcript(conversation.uuid)
    assert result.status is ProcessStatus.COMPLETED, result.error
    calls = transcript.tool_calls
    assert [c.name for c in calls] == ["get_weather"]
    assert calls[0].status == ToolCallStatus.SUCCEEDED.value
    assert calls[0].arguments == {"city": "Paris"}
    tool_messages = [m for m in transcript.messages if m.role == MessageRole.TOOL.value]
    assert tool_messages[0].content == "It is 21 degrees and sunny in Paris."
    # The answer comes from the tool's result, which the model could not know.
    assert "21" in str(result.output)


async def test_question_survives_a_process_restart(tmp_path: Path) -> None:
    url = await _catalog(tmp_path)
    script = str(HERE / "hitl_process.py")
    asked = subprocess.run(
        [sys.executable, script, "ask", url], capture_output=True, text=True, timeout=120
    )
    assert asked.returncode == 0, asked.stderr
    first = json.loads(asked.stdout.strip().splitlines()[-1])
    assert first["status"] == "WA"
    answered = subprocess.run(
        [sys.executable, script, "answer", url, first["uuid"]],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert answered.returncode == 0, answered.stderr
    second = json.loads(answered.stdout.strip().splitlines()[-1])
    assert second["pending"] == 1
    assert (second["status"], second["output"]) == ("CO", "Ordered size M.")


async def test_an_action_calls_a_real_mcp_server_through_the_tool_loop(tmp_path: Path) -> None:
    from pilothouse.testing import ScriptedModel, ToolCall

    url = await _catalog(tmp_path)
    call = ToolCall("get_current_time", {"timezone": "UTC"}, call_id="c1")
    model = ScriptedModel([call, "It is late."])
    async with Pilothouse(Settings(database_url=url), model=model) as ph:
        conversation = await ph.command.start_conversation(action="CLOCK")
        result = await ph.command.send_message(conversation.uuid, "What time is it?")
        transcript = await ph.query.get_transcript(conversation.uuid)
    assert result.status is ProcessStatus.COMPLETED, result.error
    # The MCP server's tools were offered, and its answer went back to the model.
    offered = [t.name for t in model.requests[0].info.function_tools]
    assert "get_current_time" in offered
    calls = transcript.tool_calls
    assert [(c.name, c.status) for c in calls] == [
        ("get_current_time", ToolCallStatus.SUCCEEDED.value)
    ]
    answer = json.loads(calls[0].result or "{}")
    assert answer["timezone"] == "UTC" and "datetime" in answer
