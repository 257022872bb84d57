"""The catalog and the model the event tests share (unit and real)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pilothouse.store import Database
from pilothouse.types import ProcessStatus

CATALOG = """
providers:
  - code: TEST
    kind: test
models:
  - code: TESTM
    provider: TEST
    model_name: test
configurations:
  - code: DFLT
    max_tokens: 256
tools:
  - code: LOOKUP
    name: lookup_order
    kind: event
    description: Look up an order's status.
    input_schema:
      type: object
      properties:
        order_id: {type: string}
      required: [order_id]
    settings:
      topic: agent-commands
      reply_to: agent-events
      timeout: 120
  - code: ADD
    name: add
    kind: python
    implementation: event_catalog:add
    input_schema:
      type: object
      properties:
        a: {type: integer}
        b: {type: integer}
      required: [a, b]
skills:
  - code: MATH
    name: Arithmetic
    description: Adds numbers on a worker.
    prompt: Use add for sums.
    tools: [ADD]
    execution: event
actions:
  - code: ORDERS
    model: TESTM
    configuration: DFLT
    prompt: Answer questions about orders.
    tools: [LOOKUP]
    ask_user: false
  - code: SUMS
    model: TESTM
    configuration: DFLT
    prompt: Add numbers.
    skills: [MATH]
    ask_user: false
"""


def add(a: int, b: int) -> int:
    """Add two numbers (the catalog's python tool ``add``, run by a worker)."""
    return a + b


def _user_text(messages: list[ModelMessage]) -> str:
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


def order_model() -> FunctionModel:
    """Calls ``lookup_order`` with the user's text; answers with what the tool returned.

    It decides from the request, not from a script, so any number of
    conversations can interleave (the kill test runs 100 at once).
    """

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del info
        last = messages[-1]
        if isinstance(last, ModelRequest):
            returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
            if returns:
                return ModelResponse(parts=[TextPart(f"Status: {returns[0].model_response_str()}")])
        call = ToolCallPart(
            "lookup_order", {"order_id": _user_text(messages)}, tool_call_id=uuid.uuid4().hex
        )
        return ModelResponse(parts=[call])

    return FunctionModel(answer, model_name="order-model")


def sums_model() -> FunctionModel:
    """Activates the MATH skill, calls ``add`` (on a worker), answers with the sum."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del info
        last = messages[-1]
        returns: list[Any] = []
        if isinstance(last, ModelRequest):
            returns = [p for p in last.parts if isinstance(p, ToolReturnPart)]
        if returns and returns[0].tool_name == "add":
            return ModelResponse(parts=[TextPart(f"Sum: {returns[0].model_response_str()}")])
        if returns:
            call = ToolCallPart("add", {"a": 2, "b": 40}, tool_call_id=uuid.uuid4().hex)
        else:
            call = ToolCallPart("use_skill", {"skill": "MATH"}, tool_call_id=uuid.uuid4().hex)
        return ModelResponse(parts=[call])

    return FunctionModel(answer, model_name="sums-model")


async def hold_status(
    database: Database,
    conversation_uuid: str,
    status: ProcessStatus,
    *,
    updated_at: datetime | None = None,
) -> None:
    """Set a conversation's status as another process would (``RU``: its turn holds it).

    ``updated_at`` sets its last write too (an old one: a process that died).
    """
    from sqlalchemy import update

    from pilothouse.store import Conversation

    values: dict[str, Any] = {"status": status}
    if updated_at is not None:
        values["updated_at"] = updated_at
    async with database.sessions.begin() as session:
        await session.execute(
            update(Conversation).where(Conversation.uuid == conversation_uuid).values(**values)
        )
