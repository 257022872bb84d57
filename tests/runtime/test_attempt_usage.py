"""What a model call stopped part-way used is counted, and said where it is recorded.

A provider that opened its stream had read the prompt and wrote the text
streamed before the connection broke; a paid provider bills it. The turn,
the conversation's totals and the budget ledger must hold it, whether the
turn then retries or fails. A cancelled call's text carries the tokens it
was counted, as a finished answer does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from decimal import Decimal

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, FunctionModel
from test_runner import rows, start

from pilothouse.catalog._enums import ProcessStatus, TimelineKind
from pilothouse.errors import ProviderConnectionError, ProviderServerError
from pilothouse.runtime import Runner, TextDelta, TurnEvent
from pilothouse.store import Database
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio

RunnerFactory = Callable[..., Runner]


def _cut_then_whole(cuts: int) -> FunctionModel:
    """A model whose first ``cuts`` streams break after two pieces of text."""
    calls = [0]

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        calls[0] += 1
        if calls[0] <= cuts:
            yield "half "
            yield "an answer "
            raise ProviderConnectionError("connection reset by peer")
        yield "the whole answer"

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("this model only streams")

    return FunctionModel(answer, stream_function=stream, model_name="scripted")


def _price(input_tokens: int, output_tokens: int) -> Decimal:
    # The runtime catalog's SCRP: 1.0 per million input tokens, 2.0 per million output.
    return (Decimal(input_tokens) * 1 + Decimal(output_tokens) * 2) / 1_000_000


async def test_a_stream_cut_then_retried_counts_both_attempts(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    uuid = await start(catalog, "SUMBRAND")
    events: list[TurnEvent] = []
    result = await make_runner(_cut_then_whole(1)).send_message(uuid, "x", on_event=events.append)
    assert result.status is ProcessStatus.COMPLETED
    conversation, _, timeline = await rows(catalog, uuid)
    (error,) = [e.data for e in timeline if e.kind is TimelineKind.ERROR]
    (response,) = [e.data for e in timeline if e.kind is TimelineKind.RESPONSE]
    # The cut attempt's prompt was read and its two pieces written.
    assert error["input_tokens"] > 0 and error["output_tokens"] > 0
    input_tokens = error["input_tokens"] + response["input_tokens"]
    output_tokens = error["output_tokens"] + response["output_tokens"]
    assert (result.input_tokens, result.output_tokens) == (input_tokens, output_tokens)
    assert (conversation.input_tokens, conversation.output_tokens) == (input_tokens, output_tokens)
    assert result.cost == conversation.estimated_cost == _price(input_tokens, output_tokens)


async def test_a_stream_cut_on_every_attempt_fails_with_what_they_used(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    uuid = await start(catalog, "SUMBRAND")
    # retry_count 2: three attempts, each cut.
    result = await make_runner(_cut_then_whole(3)).send_message(uuid, "x", on_event=lambda _: None)
    assert result.status is ProcessStatus.FAILED
    conversation, _, timeline = await rows(catalog, uuid)
    attempts = [e.data for e in timeline if e.kind is TimelineKind.ERROR and "attempt" in e.data]
    assert len(attempts) == 3
    input_tokens = sum(a["input_tokens"] for a in attempts)
    output_tokens = sum(a["output_tokens"] for a in attempts)
    assert input_tokens > 0 and output_tokens > 0
    assert (conversation.input_tokens, conversation.output_tokens) == (input_tokens, output_tokens)
    assert conversation.estimated_cost == _price(input_tokens, output_tokens)
    assert (result.input_tokens, result.output_tokens) == (input_tokens, output_tokens)


async def test_a_call_refused_before_its_stream_opened_counts_nothing(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    # A 502 before any byte of an answer: the provider generated nothing.
    attempts = [0]

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
        attempts[0] += 1
        if attempts[0] == 1:
            raise ProviderServerError("502 bad gateway")
        yield "fine"

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        raise AssertionError("this model only streams")

    model = FunctionModel(answer, stream_function=stream, model_name="scripted")
    uuid = await start(catalog, "SUMBRAND")
    result = await make_runner(model).send_message(uuid, "x", on_event=lambda _: None)
    assert result.status is ProcessStatus.COMPLETED
    conversation, _, timeline = await rows(catalog, uuid)
    (error,) = [e.data for e in timeline if e.kind is TimelineKind.ERROR]
    assert "input_tokens" not in error
    (response,) = [e.data for e in timeline if e.kind is TimelineKind.RESPONSE]
    assert (conversation.input_tokens, conversation.output_tokens) == (
        response["input_tokens"],
        response["output_tokens"],
    )


async def test_an_interrupted_answer_carries_the_tokens_its_call_was_counted(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    # As a finished answer's token_count is its call's output tokens, so is
    # the text a cancel stopped: the message and the usage say the same.
    model = ScriptedModel([Reply("word " * 50, chunk_delay=0.02)])
    uuid = await start(catalog, "SUMBRAND")
    runner = make_runner(model)
    seen: list[str] = []

    async def on_event(event: TurnEvent) -> None:
        if isinstance(event, TextDelta):
            seen.append(event.text)
            if len(seen) == 3:
                await runner.cancel(uuid)

    result = await runner.send_message(uuid, "x", on_event=on_event)
    assert result.status is ProcessStatus.TERMINATED
    conversation, messages, timeline = await rows(catalog, uuid)
    (response,) = [e.data for e in timeline if e.kind is TimelineKind.RESPONSE]
    interrupted = messages[-1]
    assert interrupted.data is not None and interrupted.data["interrupted"] is True
    assert interrupted.token_count == response["output_tokens"] == conversation.output_tokens
