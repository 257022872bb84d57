"""How a turn asks the model: request parameters, output modes, retry feedback.

Structured output takes the best route the model offers: native JSON mode,
then a function-calling output tool, then a prompt; a model whose profile
asks for it (the embedded llama.cpp model) gets a grammar instead, which it
honours and the others refuse.
"""

from __future__ import annotations

__all__ = [
    "delta_text",
    "feedback",
    "forced_choice",
    "grammar_output",
    "request_parameters",
]

from collections.abc import Sequence
from typing import Any, Literal

from pydantic_ai.messages import (
    ModelRequest,
    PartDeltaEvent,
    PartStartEvent,
    RetryFeedbackPart,
    RetryInfo,
    TextPart,
    TextPartDelta,
    ThinkingPart,
    ThinkingPartDelta,
    ToolReturnPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.output import OutputObjectDefinition
from pydantic_ai.tools import ToolDefinition

from pilothouse.catalog._enums import ModelCapability
from pilothouse.runtime._compile import CompiledAction
from pilothouse.runtime._convert import OUTPUT_TOOL, ParsedResponse
from pilothouse.tools._base import ToolDefinition as OfferedTool


def delta_text(event: Any) -> tuple[str, str]:
    if isinstance(event, PartStartEvent):
        if isinstance(event.part, TextPart):
            return event.part.content, ""
        if isinstance(event.part, ThinkingPart):
            return "", event.part.content
    elif isinstance(event, PartDeltaEvent):
        if isinstance(event.delta, TextPartDelta):
            return event.delta.content_delta, ""
        if isinstance(event.delta, ThinkingPartDelta):
            return "", event.delta.content_delta or ""
    return "", ""


def feedback(errors: list[str], parsed: ParsedResponse, attempt: int) -> ModelRequest:
    text = (
        "Your answer does not match the required output data structure:\n- "
        + "\n- ".join(errors)
        + "\nAnswer again with JSON that matches the structure exactly."
    )
    if parsed.output_call is not None:
        # The retry answers the output-tool call itself, so the model sees its
        # call resolved rather than left dangling.
        return ModelRequest(
            parts=[
                ToolReturnPart(
                    tool_name=OUTPUT_TOOL,
                    content=text,
                    tool_call_id=parsed.output_call.tool_call_id,
                    outcome="retried",
                )
            ]
        )
    return ModelRequest(
        parts=[RetryFeedbackPart(content=text, retry=RetryInfo("model_retry", attempt=attempt))]
    )


def grammar_output(settings: Any, compiled: CompiledAction) -> Any:
    # llama.cpp refuses OpenAI's json_schema response format and tool_choice
    # "required", but turns a json_object format with a schema into a grammar:
    # the local model can then only produce JSON that matches the schema.
    extra = dict(settings.get("extra_body") or {})
    extra["response_format"] = {"type": "json_object", "schema": compiled.output_object_schema}
    return {**settings, "extra_body": extra}


def forced_choice(
    choice: Sequence[str], offered: Sequence[OfferedTool], model: Model
) -> Literal["required"] | list[str]:
    """The pydantic-ai ``tool_choice`` setting for a turn's forced choice.

    Returns:
        ``"required"``, or the list of the one named tool.

    Raises:
        ValueError: why the choice cannot be sent (the turn fails with it
            rather than let the model answer unforced).
    """
    from pilothouse.runtime._config import REQUIRED

    if not model.profile.get("supports_forced_tool_choice", True):
        raise ValueError(
            f"model {model.model_name} cannot be forced to call a tool; send tool_choice "
            "'auto' (or leave it out)"
        )
    if tuple(choice) == (REQUIRED,):
        return "required"
    names = {d.name for d in offered}
    missing = [name for name in choice if name not in names]
    if missing:
        raise ValueError(
            f"tool_choice names '{missing[0]}', which is not among the tools offered: "
            f"{', '.join(sorted(names))}"
        )
    return list(choice)


def request_parameters(
    compiled: CompiledAction, definitions: Sequence[OfferedTool] = ()
) -> tuple[ModelRequestParameters, bool]:
    tools = [
        ToolDefinition(
            name=d.name,
            description=d.description,
            parameters_json_schema=dict(d.parameters) or {"type": "object", "properties": {}},
        )
        for d in definitions
    ]
    object_schema = compiled.output_object_schema
    if object_schema is None:
        return ModelRequestParameters(function_tools=tools, allow_text_output=True), False
    capabilities = compiled.model.capabilities
    is_list = compiled.is_list_output
    if compiled.model.profile.grammar_output:
        # The grammar in the settings shapes the answer (see grammar_output).
        return ModelRequestParameters(function_tools=tools, allow_text_output=True), is_list
    if ModelCapability.JSON_MODE in capabilities:
        return (
            ModelRequestParameters(
                function_tools=tools,
                output_mode="native",
                output_object=OutputObjectDefinition(json_schema=object_schema, name="output"),
                allow_text_output=False,
            ),
            is_list,
        )
    if ModelCapability.FUNCTION_CALLING in capabilities:
        return (
            ModelRequestParameters(
                function_tools=tools,
                output_mode="tool",
                output_tools=[
                    ToolDefinition(
                        name=OUTPUT_TOOL,
                        description="Give the final answer in the required structure.",
                        parameters_json_schema=object_schema,
                    )
                ],
                allow_text_output=False,
            ),
            is_list,
        )
    return ModelRequestParameters(function_tools=tools, allow_text_output=True), False
