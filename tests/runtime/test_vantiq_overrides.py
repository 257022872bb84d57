"""Vantiq's ``toolParameterOverride`` (seed 004), with the guide's examples verbatim."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from pilothouse.api import Pilothouse
from pilothouse.catalog import MessageRole
from pilothouse.errors import PilothouseError
from pilothouse.providers import SecretResolver
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, ScriptedModel, ToolCall
from pilothouse.tools import ToolRegistry

pytestmark = pytest.mark.anyio


def getMedicalRecord(name: str, ssn: str | None = None) -> dict[str, Any]:
    """Get the medical record for the specified patient."""
    return {"name": name, "ssn": ssn}


async def _called_with(
    database_url: str, arguments: dict[str, Any], config: dict[str, Any]
) -> dict[str, Any]:
    registry = ToolRegistry(SecretResolver({}))
    registry.register(getMedicalRecord)
    model = ScriptedModel([ToolCall("getMedicalRecord", arguments), "Done."])
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model, tools=registry) as ph:
        await (
            CatalogBuilder()
            .tool(
                "MEDREC", name="getMedicalRecord", kind="python", implementation="getMedicalRecord"
            )
            .action("RECORDS", prompt="Look records up.", tools=["MEDREC"], ask_user=False)
            .import_into(ph)
        )
        result = await ph.command.start_and_send(
            "Get the medical record for Alice.", action="RECORDS", runtime_config=config
        )
        messages = await ph.query.get_conversation_messages(result.conversation_uuid)
    (tool_message,) = [m for m in messages if m.role is MessageRole.TOOL]
    return json.loads(tool_message.content)


async def test_override_parameter_by_name(database_url: str) -> None:
    config = {
        "toolParameterOverride": {
            "tool": "getMedicalRecord",
            "name": "ssn",
            "override": "987-65-4321",
        }
    }
    called = await _called_with(database_url, {"name": "Alice", "ssn": "123-45-6789"}, config)
    assert called == {"name": "Alice", "ssn": "987-65-4321"}
    # "to provide a value for an optional parameter the LLM did not set"
    assert await _called_with(database_url, {"name": "Alice"}, config) == {
        "name": "Alice",
        "ssn": "987-65-4321",
    }


async def test_override_parameter_by_value(database_url: str) -> None:
    config = {
        "toolParameterOverride": {
            "tool": "getMedicalRecord",
            "value": "SSN_VALUE",
            "override": "987-65-4321",
        }
    }
    called = await _called_with(database_url, {"name": "Alice", "ssn": "SSN_VALUE_Alice"}, config)
    assert called == {"name": "Alice", "ssn": "987-65-4321"}


async def test_a_list_of_overrides_scoped_per_tool(database_url: str) -> None:
    config = {
        "toolParameterOverride": [
            {"tool": "otherTool", "name": "name", "override": "Mallory"},
            {"tool": "getMedicalRecord", "name": "ssn", "value": "SSN", "override": "987-65-4321"},
        ]
    }
    called = await _called_with(database_url, {"name": "Alice", "ssn": "SSN_VALUE"}, config)
    assert called == {"name": "Alice", "ssn": "987-65-4321"}


async def test_a_vantiq_rule_with_an_unknown_key_is_refused(database_url: str) -> None:
    config = {"toolParameterOverride": {"tool": "getMedicalRecord", "nme": "ssn", "override": "x"}}
    with pytest.raises(PilothouseError, match="unknown key 'nme'"):
        await _called_with(database_url, {"name": "Alice"}, config)


def submitOrder(item: str, price: float) -> str:
    """Submit an order."""
    return f"ordered {item}"


@pytest.mark.parametrize("fail_on_denied", [True, False])
async def test_a_denied_authorized_tool_fails_the_call_when_asked(
    database_url: str, fail_on_denied: bool
) -> None:
    registry = ToolRegistry(SecretResolver({}))
    registry.register(submitOrder)
    # The guide's example: aiExecute = authorized, the authorizer says no.
    model = ScriptedModel(
        [ToolCall("submitOrder", {"item": "large pizza", "price": 20}), "Not ordered."]
    )
    settings = Settings(database_url=database_url, secrets_file=None)
    asked: list[tuple[str, dict[str, Any]]] = []

    def confirm_execution(name: str, arguments: Mapping[str, Any]) -> bool:
        asked.append((name, dict(arguments)))
        return False

    async with Pilothouse(
        settings, model=model, tools=registry, authorizer=confirm_execution
    ) as ph:
        await (
            CatalogBuilder()
            .tool(
                "ORDER",
                name="submitOrder",
                kind="python",
                implementation="submitOrder",
                policy="authorized",
            )
            .action("PIZZA", prompt="Order food.", tools=["ORDER"], ask_user=False)
            .import_into(ph)
        )
        result = await ph.command.start_and_send(
            "A large pizza, please.",
            action="PIZZA",
            runtime_config={"failOnDenied": fail_on_denied},
        )
    assert asked == [("submitOrder", {"item": "large pizza", "price": 20})]
    if fail_on_denied:
        assert result.status.value == "FA"
        assert result.error is not None and result.error.startswith("tool.exec.denied")
    else:
        assert (result.status.value, result.output) == ("CO", "Not ordered.")


def test_the_guides_tool_schema_is_offered_for_one_call_as_tools() -> None:
    # Seed 004's getCurrentWeather FunctionDescriptor, verbatim.
    from pilothouse.runtime._config import RuntimeConfig, RuntimeConfigError

    schema = {
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
    parsed = RuntimeConfig.parse({"tools": [schema]})
    assert parsed.client_tools == (
        ("getCurrentWeather", schema["description"], schema["parameters"]),
    )
    with pytest.raises(RuntimeConfigError, match="keep one"):
        RuntimeConfig.parse({"tools": [schema], "client_tools": []})
    with pytest.raises(RuntimeConfigError, match="unknown key 'returns'"):
        RuntimeConfig.parse({"tools": [{**schema, "returns": "Integer"}]})
