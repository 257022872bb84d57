"""A catalog of one plain action and the models the ``run_action`` real tests run it with.

``tally_model`` counts the calls in flight (all, and per ``memoryId``, which
the test writes into the text as ``memory#index``); ``echo_model`` answers
at once, or never (``hang``: the process is killed mid-call).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

import anyio
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

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
actions:
  - code: ECHO
    model: TESTM
    configuration: DFLT
    prompt: Echo the user.
    ask_user: false
"""


def last_user_text(messages: list[ModelMessage]) -> str:
    """The text of the newest user prompt (the chat memory's older ones come before it)."""
    for message in reversed(messages):
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                    return part.content
    return ""


@dataclass
class Tally:
    """What the model saw: calls in flight, at most, and per memory in order."""

    in_flight: int = 0
    most: int = 0
    calls: int = 0
    per_memory: Counter[str] = field(default_factory=Counter[str])
    most_per_memory: int = 0
    order: defaultdict[str, list[int]] = field(default_factory=lambda: defaultdict(list))


def tally_model(tally: Tally, company: float = 10.0) -> FunctionModel:
    """Answers ``done <text>``; counts what is in flight while it answers.

    The first two calls wait (up to ``company`` seconds, not an assertion) for
    another call to be in flight, so calls that can overlap do: one at a
    time, they only take longer.
    """

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del info
        text = last_user_text(messages)
        memory, _, index = text.partition("#")
        tally.calls += 1
        tally.in_flight += 1
        tally.most = max(tally.most, tally.in_flight)
        tally.per_memory[memory] += 1
        tally.most_per_memory = max(tally.most_per_memory, tally.per_memory[memory])
        tally.order[memory].append(int(index or 0))
        try:
            if tally.calls <= 2:
                with anyio.move_on_after(company):
                    while tally.most < 2:
                        await anyio.sleep(0.01)
            await anyio.sleep(0.05)
        finally:
            tally.in_flight -= 1
            tally.per_memory[memory] -= 1
        return ModelResponse(parts=[TextPart(f"done {text}")])

    return FunctionModel(answer, model_name="tally-model")


def echo_model(*, hang: bool) -> FunctionModel:
    """Answers ``echo <text>``; with ``hang``, never answers (the test kills the process)."""

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        del info
        if hang:
            await anyio.sleep_forever()
        return ModelResponse(parts=[TextPart(f"echo {last_user_text(messages)}")])

    return FunctionModel(answer, model_name="echo-model")
