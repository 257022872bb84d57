"""Python tools: schema from hints and docstrings, validation, calls, services, references."""

from __future__ import annotations

import threading
from typing import Any

import pytest
import tool_samples
import tool_samples_marked
from tool_samples import Calculator, Forecast, Unit

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.providers._secrets import SecretResolver
from pilothouse.tools import ExecutableTool, ToolContext, ToolError, ToolRegistry, python_tool, tool

pytestmark = pytest.mark.anyio

CONTEXT = ToolContext(tenant="default", conversation_uuid="conv-1", call_id="call-1")


def registry() -> ToolRegistry:
    return ToolRegistry(SecretResolver({}))


def test_schema_from_hints_and_google_docstring() -> None:
    definition = python_tool(tool_samples.get_weather).definition
    assert definition.name == "get_weather"
    assert definition.description == (
        "Get the weather forecast for a city.\n\nOnly a few cities are known."
    )
    assert definition.parameters == {
        "$defs": {"Unit": {"enum": ["celsius", "fahrenheit"], "title": "Unit", "type": "string"}},
        "properties": {
            "city": {"description": "the city's name, in English.", "type": "string"},
            "days": {"default": 1, "description": "how many days ahead.", "type": "integer"},
            "unit": {
                "$ref": "#/$defs/Unit",
                "default": "celsius",
                "description": "the temperature unit.",
            },
        },
        "required": ["city"],
        "type": "object",
    }
    assert definition.output_schema == {
        "$defs": {"Unit": {"enum": ["celsius", "fahrenheit"], "title": "Unit", "type": "string"}},
        "properties": {
            "city": {"type": "string"},
            "degrees": {"type": "number"},
            "unit": {"$ref": "#/$defs/Unit"},
        },
        "required": ["city", "degrees", "unit"],
        "title": "Forecast",
        "type": "object",
    }


def test_schema_without_docstring_args_and_without_return_annotation() -> None:
    def untyped(a, b: str = "x"):
        return a

    definition = python_tool(untyped).definition
    assert definition.description == ""
    assert definition.parameters == {
        "properties": {"a": {}, "b": {"default": "x", "type": "string"}},
        "required": ["a"],
        "type": "object",
    }
    assert definition.output_schema is None


def test_context_parameter_is_injected_and_not_in_schema() -> None:
    definition = python_tool(tool_samples.who_calls).definition
    assert definition.parameters == {
        "properties": {"note": {"description": "anything.", "type": "string"}},
        "required": ["note"],
        "type": "object",
    }


async def test_context_parameter_receives_the_call_context() -> None:
    result = await python_tool(tool_samples.who_calls).execute({"note": "hi"}, CONTEXT)
    assert result.data == {"conversation": "conv-1", "call": "call-1", "note": "hi"}


def test_decorator_options_and_explicit_arguments_precedence() -> None:
    marked = python_tool(tool_samples_marked.remember).definition
    assert (marked.name, marked.description) == ("remember_it", "Store a value.")
    assert python_tool(tool_samples_marked.remember).policy is ExecutionPolicy.AUTHORIZED
    explicit = python_tool(tool_samples_marked.remember, name="keep", policy="allow")
    assert explicit.definition.name == "keep"
    assert explicit.policy is ExecutionPolicy.ALLOW


def test_bare_decorator_returns_the_function_unchanged() -> None:
    @tool
    def double(x: int) -> int:
        return 2 * x

    assert double(4) == 8


async def test_arguments_are_coerced_before_the_call() -> None:
    result = await python_tool(tool_samples.get_weather).execute(
        {"city": "Oslo", "days": "2", "unit": "fahrenheit"}, CONTEXT
    )
    assert not result.is_error
    assert result.data == Forecast(city="Oslo", degrees=23.5, unit=Unit.FAHRENHEIT)
    assert result.content == '{"city": "Oslo", "degrees": 23.5, "unit": "fahrenheit"}'


async def test_invalid_arguments_are_an_error_result_naming_the_argument() -> None:
    result = await python_tool(tool_samples.get_weather).execute(
        {"days": "many", "unit": "kelvin"}, CONTEXT
    )
    assert result.is_error
    assert result.error_code == "tool.args.invalid"
    assert result.content.startswith("invalid arguments for get_weather: ")
    assert "city: Field required" in result.content
    assert "days: Input should be a valid integer" in result.content
    assert "unit: Input should be 'celsius' or 'fahrenheit'" in result.content


async def test_sync_function_runs_in_a_worker_thread() -> None:
    seen: list[bool] = []

    def where() -> str:
        seen.append(threading.current_thread() is threading.main_thread())
        return "ok"

    result = await python_tool(where).execute({}, CONTEXT)
    assert (result.content, result.data, seen) == ("ok", "ok", [False])


async def test_async_function_is_awaited_and_string_result_is_plain_text() -> None:
    result = await python_tool(tool_samples.slow_echo).execute({"text": "hello"}, CONTEXT)
    assert (result.content, result.data, result.is_error) == ("hello", "hello", False)


async def test_exception_becomes_an_error_result() -> None:
    result = await python_tool(tool_samples.divide).execute({"a": 1, "b": 0}, CONTEXT)
    assert result.is_error
    assert result.error_code == "tool.exec.error"
    assert result.content == "ZeroDivisionError: float division by zero"


async def test_unserializable_result_is_an_error_result() -> None:
    def opaque() -> Any:
        return object()

    result = await python_tool(opaque).execute({}, CONTEXT)
    assert result.is_error
    assert result.error_code == "tool.exec.error"
    assert "not serializable" in result.content


def test_var_args_cannot_be_a_tool() -> None:
    def spread(*values: int) -> int:
        return sum(values)

    with pytest.raises(ToolError, match=r"tool '.*spread': parameter 'values' is \*args"):
        python_tool(spread)


async def test_register_a_class_service_instantiated_without_arguments() -> None:
    reg = registry()
    tools = reg.register(Calculator)
    assert [t.definition.name for t in tools] == ["add", "negate"]
    result = await reg.get("add").execute({"a": 1, "b": 2}, CONTEXT)
    assert result.data == 103
    assert (await reg.get("negate").execute({"x": 5}, CONTEXT)).data == -5


async def test_register_a_module_service_by_reference() -> None:
    reg = registry()
    tools = reg.register("tool_samples")
    assert [t.definition.name for t in tools] == ["get_weather", "slow_echo", "divide", "who_calls"]
    assert all(isinstance(t, ExecutableTool) and t.kind is ToolKind.PYTHON for t in tools)


def test_module_service_with_marked_functions_offers_only_those() -> None:
    reg = registry()
    tools = reg.register(tool_samples_marked)
    assert [t.definition.name for t in tools] == ["lookup", "remember_it"]
    assert "format_key" not in reg


def test_register_a_class_by_reference_and_a_function_by_reference() -> None:
    reg = registry()
    reg.register("tool_samples:Calculator")
    (divide,) = reg.register("tool_samples:divide", name="div", policy="authorized")
    assert divide.definition.name == "div"
    assert divide.policy is ExecutionPolicy.AUTHORIZED
    assert sorted(t.definition.name for t in reg) == ["add", "div", "negate"]
    assert len(reg) == 3


def test_register_an_instance_service() -> None:
    calculator = Calculator()
    calculator.offset = 0
    reg = registry()
    reg.register(calculator)
    assert [d.name for d in reg.definitions()] == ["add", "negate"]


@pytest.mark.parametrize(
    ("reference", "message"),
    [
        ("no_such_module_xyz:f", r"reference 'no_such_module_xyz:f': cannot import"),
        ("tool_samples:nothing", r"'tool_samples' has no attribute 'nothing'"),
        ("tool_samples:", r"reference 'tool_samples:' is malformed"),
        (":f", r"reference ':f' is malformed"),
        ("tool_samples:NeedsArguments", r"'NeedsArguments' cannot be instantiated without"),
    ],
)
def test_bad_references_are_clear_tool_errors(reference: str, message: str) -> None:
    with pytest.raises(ToolError, match=message):
        registry().register(reference)


def test_name_for_a_service_is_refused() -> None:
    with pytest.raises(ToolError, match="name and description apply to one function"):
        registry().register(Calculator, name="calc")


def test_duplicate_names_are_refused() -> None:
    reg = registry()
    reg.register(tool_samples.divide)
    with pytest.raises(ToolError, match="already registered: divide"):
        reg.register(tool_samples.divide)


def test_bad_tool_name_is_refused() -> None:
    with pytest.raises(ToolError, match=r"tool 'bad name': name must match"):
        registry().register(tool_samples.divide, name="bad name")


def test_unknown_tool_is_a_tool_error() -> None:
    with pytest.raises(ToolError, match="no tool named 'missing'"):
        registry().get("missing")
