"""Vantiq's service tools (seed 004) against a real OpenAI-compatible server on loopback.

"If a service contains multiple procedures, and each public procedure is a
tool, you can specify a service reference. This will include all public
procedures as tools": one catalog tool of kind python with
``settings.service: true`` whose implementation names a class offers every
public method of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_upstream import Reply, Upstream, completion, running_upstream

from pilothouse.api import Pilothouse
from pilothouse.catalog import ProcessStatus, TimelineKind
from pilothouse.errors import CatalogValidationError
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder

pytestmark = pytest.mark.anyio

SERVICE = "weather_tool_classes:ToolService"


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        yield up


def _settings(tmp_path: Path) -> Settings:
    return Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 's.db'}", secrets_file=None)


def _catalog(upstream: Upstream) -> CatalogBuilder:
    return (
        CatalogBuilder()
        .provider("OAI", kind="openai-compatible", base_url=upstream.base_url)
        .model("GPT", provider="OAI", model_name="gpt-4o", capabilities=["FC"])
        .tool(
            "TOOLSVC",
            name="ToolService",
            kind="python",
            implementation=SERVICE,
            settings={"service": True},
            release="1.1.0",
        )
        .action("ASK", prompt="Answer.", model="GPT", tools=["TOOLSVC"], ask_user=False)
    )


async def test_every_public_method_of_the_service_is_a_tool(
    tmp_path: Path, upstream: Upstream
) -> None:
    calls = [
        {
            "id": "c1",
            "type": "function",
            "function": {"name": "getCurrentTemperature", "arguments": '{"location": "Paris"}'},
        },
        {
            "id": "c2",
            "type": "function",
            "function": {"name": "getHumidity", "arguments": '{"location": "Paris"}'},
        },
    ]
    upstream.script(Reply(completion(tool_calls=calls)), Reply(completion("18 C, 60%.")))
    async with Pilothouse(_settings(tmp_path)) as ph:
        await _catalog(upstream).import_into(ph)
        result = await ph.command.start_and_send("Weather in Paris?", action="ASK")
        timeline = (await ph.query.get_transcript(result.conversation_uuid)).timeline
    assert result.status is ProcessStatus.COMPLETED, result.error
    offered = sorted(t["function"]["name"] for t in upstream.requests[0]["tools"])
    assert offered == ["getCurrentTemperature", "getHumidity"]
    results = {
        m["tool_call_id"]: m["content"]
        for m in upstream.requests[1]["messages"]
        if m["role"] == "tool"
    }
    assert results == {"c1": "18", "c2": "Paris: 60%"}
    executions = [e.data for e in timeline if e.kind is TimelineKind.TOOL_EXECUTION]
    assert {(e["tool"], e["release"]) for e in executions} == {
        ("getCurrentTemperature", "1.1.0"),
        ("getHumidity", "1.1.0"),
    }


async def test_a_service_row_must_name_a_class_and_no_schema(tmp_path: Path) -> None:
    async with Pilothouse(_settings(tmp_path)) as ph:
        with pytest.raises(CatalogValidationError, match="leave it out"):
            await ph.catalog.create(
                "tools",
                {
                    "code": "SVC",
                    "name": "svc",
                    "kind": "python",
                    "implementation": SERVICE,
                    "settings": {"service": True},
                    "input_schema": {"type": "object", "properties": {}},
                },
            )
        with pytest.raises(CatalogValidationError, match="python tools only"):
            await ph.catalog.create(
                "tools",
                {"code": "SVC", "name": "svc", "kind": "script", "settings": {"service": True}},
            )
