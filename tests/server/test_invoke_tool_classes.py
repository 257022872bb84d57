"""``toolClasses`` on ``POST /v1/invoke`` (seed 003), gated by the operator's allow-list."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic_ai.messages import ToolReturnPart, UserPromptPart

from pilothouse.settings import Settings
from pilothouse.testing import Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio

# The classes live beside the real test (tests/real/weather_tool_classes.py).
CLASSES_DIR = Path(__file__).resolve().parents[1] / "real"
MODULE = "weather_tool_classes"


@pytest.fixture(autouse=True)
def importable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(CLASSES_DIR))


@pytest.fixture
def server_settings(server_settings: Settings) -> Settings:
    # The operator allows one class and nothing else.
    return server_settings.model_copy(
        update={"invoke_tool_classes": [f"{MODULE}.WeatherTools", f"{MODULE}.Unmarked"]}
    )


def _body(**extra: Any) -> dict[str, Any]:
    return {"agentName": "Weather bot", "model": "SMOLLM2", "message": "Weather?", **extra}


async def _invoke(client: httpx.AsyncClient, key: str, **extra: Any) -> httpx.Response:
    return await client.post(
        "/v1/invoke", json=_body(**extra), headers={"Authorization": f"Bearer {key}"}
    )


async def test_an_allowed_classs_marked_methods_are_the_agents_tools(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.extend(
        [
            ToolCall("current_temperature", {"city": "Paris"}),
            Reply("It is 18 degrees in Paris."),
        ]
    )
    response = await _invoke(client, api_key, toolClasses=f" {MODULE}.WeatherTools ")
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["output"] == "It is 18 degrees in Paris."
    offered = {t.name for t in scripted.requests[0].info.function_tools}
    # The marked method only: the unmarked helper is not offered.
    assert "current_temperature" in offered
    assert "helper" not in offered
    # The method ran on an instance its no-arg constructor made; this small
    # local model reads tool results as text (ToolReturnPart elsewhere).
    sent = [
        str(part.content)
        for message in scripted.requests[1].messages
        for part in message.parts
        if isinstance(part, ToolReturnPart | UserPromptPart)
    ]
    assert any("Paris: 18 degrees celsius" in text for text in sent)


async def test_a_class_outside_the_allow_list_is_a_400_naming_the_field_and_setting(
    client: httpx.AsyncClient,
    api_key: str,
    scripted: ScriptedModel,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, MODULE, raising=False)
    response = await _invoke(
        client, api_key, toolClasses=f"{MODULE}.WeatherTools,{MODULE}.CalendarTools"
    )
    assert response.status_code == 400, response.text
    detail = response.json()["detail"]
    assert detail.startswith("toolClasses[1]:")
    assert f"'{MODULE}.CalendarTools' is not allowed" in detail
    assert "PILOTHOUSE_INVOKE_TOOL_CLASSES" in detail
    assert scripted.requests == []
    # Every name is checked before anything is imported, the allowed one too.
    assert MODULE not in sys.modules


@pytest.mark.parametrize(
    ("names", "message"),
    [
        (f"{MODULE}.Unmarked", "has no method marked with @tool"),
        ("os.system", "is not allowed"),
        ("not a class", "is not a class name"),
    ],
)
async def test_unusable_tool_classes_are_refused_by_name(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, names: str, message: str
) -> None:
    response = await _invoke(client, api_key, toolClasses=names)
    assert response.status_code == 400, response.text
    problem = response.json()
    assert problem["errors"][0]["field"] == "toolClasses[0]"
    assert message in problem["detail"]
    assert scripted.requests == []


async def test_by_default_no_class_is_allowed(
    client: httpx.AsyncClient, api_key: str, server_settings: Settings
) -> None:
    del server_settings
    # Settings() reads no allow-list: the default deployment refuses every name.
    assert Settings(database_url="sqlite+aiosqlite://").invoke_tool_classes == []


def test_the_allow_list_is_read_comma_separated_and_checked(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PILOTHOUSE_INVOKE_TOOL_CLASSES", "acme.tools, acme.cal.Calendar")
    assert Settings().invoke_tool_classes == ["acme.tools", "acme.cal.Calendar"]
    monkeypatch.setenv("PILOTHOUSE_INVOKE_TOOL_CLASSES", "acme tools")
    with pytest.raises(ValueError, match="not a dotted module or class name"):
        Settings()
