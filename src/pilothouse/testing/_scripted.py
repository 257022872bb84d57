"""The scripted model: a pydantic-ai model that answers from a script.

:class:`ScriptedModel` lets the whole run loop (prompt assembly, memory,
retries, structured output, streaming, audit) be tested without a provider.
It records what it was asked, so a test can assert on the exact messages and
settings sent.
"""

from __future__ import annotations

__all__ = [
    "Calls",
    "Fail",
    "Json",
    "Reply",
    "ScriptedModel",
    "ScriptedRequest",
    "Step",
    "ToolCall",
]

import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import anyio
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.usage import RequestUsage


@dataclass(frozen=True)
class Reply:
    """A plain text answer, streamed in ``chunks`` pieces of ``chunk_delay`` seconds."""

    text: str
    input_tokens: int = 10
    output_tokens: int | None = None
    chunk_delay: float = 0.0
    finish_reason: str = "stop"


@dataclass(frozen=True)
class ToolCall:
    """An answer that calls a tool.

    ``arguments`` may be a JSON string or None, as malformed models send them.
    ``call_id`` is made unique (``call_`` and 24 hex digits) when not given,
    as a provider's are: two calls of one conversation never share an id.
    An empty ``call_id`` is sent empty, as by a model that gives none.
    """

    name: str
    arguments: dict[str, Any] | str | None
    call_id: str | None = None
    text: str = ""


@dataclass(frozen=True)
class Calls:
    """An answer that calls several tools at once."""

    calls: tuple[ToolCall, ...]


@dataclass(frozen=True)
class Json:
    """A structured answer.

    Given as the output tool's arguments when the request offers an output
    tool, else as JSON text.
    """

    value: Any


@dataclass(frozen=True)
class Fail:
    """Raise ``error`` instead of answering."""

    error: BaseException


Step = Reply | ToolCall | Calls | Json | Fail | str


@dataclass
class ScriptedRequest:
    """What the model was asked once."""

    messages: list[ModelMessage]
    info: AgentInfo


@dataclass
class _Script:
    steps: list[Step]
    requests: list[ScriptedRequest] = field(default_factory=lambda: [])

    def next(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> Reply | ToolCall | Calls | Json:
        """Record the request and return the next answer; raise a :class:`Fail`'s error."""
        self.requests.append(ScriptedRequest(list(messages), info))
        if not self.steps:
            raise AssertionError("the scripted model was called more often than scripted")
        step = self.steps.pop(0)
        if isinstance(step, Fail):
            raise step.error
        return Reply(step) if isinstance(step, str) else step


def _with_ids(step: ToolCall | Calls) -> list[tuple[ToolCall, str]]:
    """The step's calls, each with its id: the given one, or a new unique one."""
    calls = step.calls if isinstance(step, Calls) else (step,)
    # An empty id stays empty: that is how a test plays a model that sends none.
    return [
        (call, call.call_id if call.call_id is not None else f"call_{uuid.uuid4().hex[:24]}")
        for call in calls
    ]


def _usage(step: Reply | ToolCall | Json, text: str) -> RequestUsage:
    if isinstance(step, Reply):
        output = step.output_tokens if step.output_tokens is not None else len(text.split())
        return RequestUsage(input_tokens=step.input_tokens, output_tokens=output)
    return RequestUsage(input_tokens=10, output_tokens=max(1, len(text) // 4))


def _output_args(value: Any, wraps_items: bool) -> dict[str, Any]:
    # A list answer travels as {"items": [...]} when the output tool wraps it.
    if isinstance(value, list) and wraps_items:
        return {"items": value}
    return cast("dict[str, Any]", value)


def _structured(step: Json, info: AgentInfo) -> ModelResponse:
    import json

    if info.output_tools:
        tool = info.output_tools[0]
        properties = tool.parameters_json_schema.get("properties", {})
        args = _output_args(step.value, "items" in properties)
        return ModelResponse(
            parts=[ToolCallPart(tool.name, args, tool_call_id="out-1")],
            usage=_usage(step, json.dumps(args)),
            model_name="scripted",
            finish_reason="tool_call",
        )
    text = json.dumps(step.value)
    return ModelResponse(
        parts=[TextPart(text)],
        usage=_usage(step, text),
        model_name="scripted",
        finish_reason="stop",
    )


class ScriptedModel(FunctionModel):
    """A model that plays back a script of answers, streamed or not.

    Args:
        steps: one entry per model call: a string or :class:`Reply` (text),
            :class:`ToolCall`, :class:`Json`, or :class:`Fail` (raise).
    """

    def __init__(self, steps: Sequence[Step]) -> None:
        self.script = _Script(list(steps))
        super().__init__(self._answer, stream_function=self._stream, model_name="scripted")

    @property
    def requests(self) -> list[ScriptedRequest]:
        """Every request made so far."""
        return self.script.requests

    @property
    def remaining(self) -> int:
        """How many scripted answers are left."""
        return len(self.script.steps)

    async def _answer(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        # A coroutine: pydantic-ai runs a plain function on a worker thread,
        # one thread hop (and GIL handoff) per call. The checkpoint keeps the
        # call a point where the turn can be cancelled, as a real one is.
        await anyio.lowlevel.checkpoint()
        step = self.script.next(messages, info)
        if isinstance(step, Json):
            return _structured(step, info)
        if isinstance(step, ToolCall | Calls):
            calls = _with_ids(step)
            parts: list[Any] = [TextPart(c.text) for c, _ in calls if c.text]
            parts.extend(ToolCallPart(c.name, c.arguments, tool_call_id=i) for c, i in calls)
            return ModelResponse(
                parts=parts,
                usage=_usage(calls[0][0], str([c.arguments for c, _ in calls])),
                model_name="scripted",
                finish_reason="tool_call",
            )
        return ModelResponse(
            parts=[TextPart(step.text)],
            usage=_usage(step, step.text),
            model_name="scripted",
            provider_response_id="scripted-response",
            finish_reason=step.finish_reason,  # type: ignore[arg-type]
        )

    async def _stream(
        self, messages: list[ModelMessage], info: AgentInfo
    ) -> AsyncIterator[str | dict[int, DeltaToolCall]]:
        step = self.script.next(messages, info)
        if isinstance(step, Json):
            import json

            if info.output_tools:
                tool = info.output_tools[0]
                properties = tool.parameters_json_schema.get("properties", {})
                args = _output_args(step.value, "items" in properties)
                yield {
                    0: DeltaToolCall(
                        name=tool.name, json_args=json.dumps(args), tool_call_id="out-1"
                    )
                }
                return
            yield json.dumps(step.value)
            return
        if isinstance(step, ToolCall | Calls):
            import json

            yield {
                index: DeltaToolCall(
                    name=c.name,
                    json_args=c.arguments
                    if isinstance(c.arguments, str)
                    else json.dumps(c.arguments),
                    tool_call_id=call_id,
                )
                for index, (c, call_id) in enumerate(_with_ids(step))
            }
            return
        words = step.text.split(" ")
        for index, word in enumerate(words):
            if step.chunk_delay:
                await anyio.sleep(step.chunk_delay)
            yield word if index == len(words) - 1 else word + " "
