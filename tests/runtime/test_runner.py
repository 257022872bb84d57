from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import anyio
import pytest
from pydantic_ai.messages import ModelRequest, SystemPromptPart, UserPromptPart
from sqlalchemy import select

from pilothouse.catalog._enums import (
    FinishReason,
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
)
from pilothouse.errors import (
    InvalidStateError,
    NotFoundError,
    ProviderConnectionError,
    ProviderServerError,
    RateLimitError,
)
from pilothouse.runtime import (
    DEFAULT_INSTRUCTION,
    Runner,
    RuntimeConfigError,
    StatusChanged,
    TemplateError,
    TextDelta,
    TurnEvent,
    TurnFinished,
    TurnRetry,
)
from pilothouse.store import Conversation, Database, Message, SqlTurnStore, TimelineEvent
from pilothouse.store._records import ToolCall as ToolCallRow
from pilothouse.testing import Fail, Json, Reply, ScriptedModel, ToolCall

RunnerFactory = Callable[..., Runner]

pytestmark = pytest.mark.anyio


async def start(
    db: Database, action: str, agent: str | None = "ANALYST", memory_id: str | None = None
) -> str:
    conversation = await SqlTurnStore(db).create(
        "default", action_code=action, agent_code=agent, memory_id=memory_id
    )
    return conversation.uuid


def system_text(model: ScriptedModel, call: int = 0) -> str:
    first = model.requests[call].messages[0]
    assert isinstance(first, ModelRequest)
    part = first.parts[0]
    assert isinstance(part, SystemPromptPart)
    return part.content


async def rows(db: Database, uuid: str) -> tuple[Conversation, list[Message], list[TimelineEvent]]:
    async with db.sessions() as session:
        conversation = await session.scalar(select(Conversation).where(Conversation.uuid == uuid))
        assert conversation is not None
        messages = list(
            await session.scalars(
                select(Message)
                .where(Message.conversation_id == conversation.id)
                .order_by(Message.sequence)
            )
        )
        events = list(
            await session.scalars(
                select(TimelineEvent)
                .where(TimelineEvent.conversation_id == conversation.id)
                .order_by(TimelineEvent.sequence)
            )
        )
        return conversation, messages, events


async def test_turn_records_answer_usage_cost_and_timeline(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel([Reply("A short summary.", input_tokens=100, output_tokens=20)])
    uuid = await start(catalog, "SUMBRAND")
    result = await make_runner(model).send_message(uuid, "Acme makes rockets.")

    assert result.status is ProcessStatus.COMPLETED
    assert result.finish_reason is FinishReason.STOP
    assert result.output == "A short summary."
    # 100 input tokens at 1.0 and 20 output tokens at 2.0 per million.
    assert result.cost == Decimal("0.00014")
    assert result.ai_meta is not None
    assert result.ai_meta["aiGenerated"] is True
    assert result.ai_meta["provider"] == "TEST"
    conversation, messages, events = await rows(catalog, uuid)
    assert (conversation.status, conversation.finish_reason) == (
        ProcessStatus.COMPLETED,
        FinishReason.STOP,
    )
    assert (conversation.input_tokens, conversation.output_tokens) == (100, 20)
    assert conversation.response_model == "scripted"
    assert [m.role for m in messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
    ]
    assert (
        messages[2].data is not None and messages[2].data["ai"]["runId"] == result.ai_meta["runId"]
    )
    assert [e.kind for e in events] == [
        TimelineKind.STATUS_CHANGE,
        TimelineKind.REQUEST,
        TimelineKind.RESPONSE,
        TimelineKind.STATUS_CHANGE,
    ]
    assert events[-1].data == {"from": "RU", "to": "CO"}


async def test_system_prompt_follows_the_design_order(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel(["ok"])
    uuid = await start(catalog, "SUMBRAND")
    await make_runner(model).send_message(uuid, "text")
    prompt = system_text(model)
    order = [
        DEFAULT_INSTRUCTION,
        "You work for Brand intelligence.",
        "You analyse brands.",
        "You are a concise editor.",
        "Your skill: Keep the brand's voice.",
        "Answer in at most two sentences.",
        "Summarize the brand document the user sends.",
    ]
    positions = [prompt.index(part) for part in order]
    assert positions == sorted(positions)


@pytest.mark.parametrize(
    ("mode", "expected_start", "keeps_default"),
    [
        ("replace", "Be terse.", False),
        ("append", DEFAULT_INSTRUCTION, True),
        ("prepend", "Be terse.", True),
    ],
)
async def test_instruction_modes(
    catalog: Database,
    make_runner: RunnerFactory,
    mode: str,
    expected_start: str,
    keeps_default: bool,
) -> None:
    model = ScriptedModel(["ok"])
    uuid = await start(catalog, "SUMBRAND")
    await make_runner(model).send_message(
        uuid, "text", runtime_config={"instruction": "Be terse.", "instructionMode": mode}
    )
    prompt = system_text(model)
    assert prompt.startswith(expected_start)
    assert (DEFAULT_INSTRUCTION in prompt) is keeps_default
    assert "Be terse." in prompt


async def test_template_placeholders_are_filled_from_input_data(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel(["ok"])
    uuid = await start(catalog, "TEMPLATED", agent=None)
    await make_runner(model).send_message(
        uuid, "go", input_data={"topic": "rockets", "audience": "kids"}
    )
    assert "Write about rockets for kids." in system_text(model)


async def test_missing_template_data_is_refused_before_anything_is_recorded(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    uuid = await start(catalog, "TEMPLATED", agent=None)
    with pytest.raises(TemplateError, match="'audience', 'topic'"):
        await make_runner(ScriptedModel([])).send_message(uuid, "go")
    conversation, messages, _ = await rows(catalog, uuid)
    assert conversation.status is ProcessStatus.NOT_STARTED
    assert messages == []


async def test_runtime_config_overrides_stored_options(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel(["ok"])
    uuid = await start(catalog, "SUMBRAND")
    await make_runner(model).send_message(uuid, "x", runtime_config={"temperature": 0.9})
    settings = model.requests[0].info.model_settings or {}
    assert settings.get("temperature") == 0.9
    assert settings.get("max_tokens") == 128


@pytest.mark.parametrize(
    ("config", "message"),
    [
        ({"temprature": 0.5}, "unknown key 'temprature'"),
        ({"temperature": "hot"}, "temperature"),
        ({"instructionMode": "sideways"}, "instruction mode 'sideways'"),
        ({"audit": "yes"}, "'audit' must be true or false"),
        ({"tool_choice": "sometimes"}, "tool_choice must be 'auto', 'required' or"),
        ({"tool_choice": "none"}, "offer no client_tools"),
        (
            {"tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice names 'nope', which is not among the turn's tools",
        ),
        ({"parallel_tool_calls": "no"}, "'parallel_tool_calls' must be true or false"),
    ],
)
async def test_invalid_runtime_config_is_a_clear_error(
    catalog: Database, make_runner: RunnerFactory, config: dict[str, object], message: str
) -> None:
    uuid = await start(catalog, "SUMBRAND")
    with pytest.raises(RuntimeConfigError, match=message):
        await make_runner(ScriptedModel([])).send_message(uuid, "x", runtime_config=config)
    conversation, messages, _ = await rows(catalog, uuid)
    assert conversation.status is ProcessStatus.NOT_STARTED and messages == []


async def test_unknown_conversation_is_not_found(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    with pytest.raises(NotFoundError, match="conversation 'nope' not found"):
        await make_runner(ScriptedModel([])).send_message("nope", "x")


async def test_unknown_action_is_not_found(catalog: Database, make_runner: RunnerFactory) -> None:
    uuid = await start(catalog, "GHOST", agent=None)
    with pytest.raises(NotFoundError, match="action 'GHOST' not found"):
        await make_runner(ScriptedModel([])).send_message(uuid, "x")


async def test_finished_conversation_refuses_messages(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    uuid = await start(catalog, "SUMBRAND")
    runner = make_runner(ScriptedModel([Fail(ProviderConnectionError("refused"))] * 3))
    result = await runner.send_message(uuid, "x")
    assert result.status is ProcessStatus.FAILED
    with pytest.raises(InvalidStateError, match="has failed and is finished"):
        await runner.send_message(uuid, "again")


async def test_retries_then_succeeds_with_each_attempt_audited(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    delays: list[float] = []

    async def record_sleep(delay: float) -> None:
        delays.append(delay)

    model = ScriptedModel(
        [Fail(ProviderServerError("502")), Fail(RateLimitError("slow down", retry_after=3)), "ok"]
    )
    uuid = await start(catalog, "SUMBRAND")
    events: list[TurnEvent] = []
    result = await make_runner(model, sleep=record_sleep).send_message(
        uuid, "x", on_event=events.append
    )
    assert result.status is ProcessStatus.COMPLETED
    assert len(delays) == 2
    assert 0.005 <= delays[0] <= 0.01  # base 0.01 with jitter between half and whole
    assert delays[1] >= 3  # Retry-After is a floor
    assert [e.attempt for e in events if isinstance(e, TurnRetry)] == [2, 3]
    _, _, timeline = await rows(catalog, uuid)
    kinds = [e.kind for e in timeline]
    assert kinds.count(TimelineKind.REQUEST) == 3
    assert kinds.count(TimelineKind.RETRY) == 2
    assert kinds.count(TimelineKind.ERROR) == 2


async def test_provider_down_ends_failed_and_keeps_the_user_message(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel([Fail(ProviderConnectionError("connection refused"))] * 3)
    uuid = await start(catalog, "SUMBRAND")
    result = await make_runner(model).send_message(uuid, "please summarize")
    assert result.status is ProcessStatus.FAILED
    assert result.error is not None and "connection refused" in result.error
    conversation, messages, timeline = await rows(catalog, uuid)
    assert conversation.status is ProcessStatus.FAILED
    assert conversation.error_detail == result.error
    assert [(m.role, m.content) for m in messages][1:] == [(MessageRole.USER, "please summarize")]
    assert messages[0].role is MessageRole.SYSTEM
    assert timeline[-1].data == {"from": "RU", "to": "FA"}


async def test_structured_output_is_validated_and_errors_fed_back(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    good = [{"name": "Globex", "website": "globex.example", "reason": "same market"}]
    model = ScriptedModel([Json([{"website": "no name"}]), Json(good)])
    uuid = await start(catalog, "COMPETITORS", agent=None)
    result = await make_runner(model).send_message(uuid, "Acme competes with Globex.")
    assert result.status is ProcessStatus.COMPLETED
    assert result.output == good
    # The answer came through the output tool (the function-calling route):
    # a finished answer is ST, not TC (seed 000).
    assert model.requests[0].info.output_tools
    assert result.finish_reason is FinishReason.STOP
    retry_request = model.requests[1].messages[-1]
    assert isinstance(retry_request, ModelRequest)
    assert "'name' is a required property" in str(retry_request.parts[0])
    _, messages, _ = await rows(catalog, uuid)
    assert [m.role for m in messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
        MessageRole.ASSISTANT,
    ]
    assert messages[2].data is not None and messages[2].data["invalid_output"] is True


async def test_structured_output_that_never_conforms_fails_with_the_error(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel([Json({"not": "a list"})] * 3)
    uuid = await start(catalog, "COMPETITORS", agent=None)
    result = await make_runner(model).send_message(uuid, "x")
    assert result.status is ProcessStatus.FAILED
    assert result.error is not None and result.error.startswith("output does not match the schema")
    assert model.remaining == 0


async def test_streaming_emits_deltas_and_records_the_whole_message(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel([Reply("one two three", output_tokens=3)])
    uuid = await start(catalog, "SUMBRAND")
    events: list[TurnEvent] = []
    result = await make_runner(model).send_message(uuid, "x", on_event=events.append)
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 3 and "".join(deltas) == "one two three"
    assert isinstance(events[0], StatusChanged)
    assert isinstance(events[-1], TurnFinished)
    assert result.output_tokens > 0
    _, messages, _ = await rows(catalog, uuid)
    assert messages[-1].content == "one two three"


async def test_cancel_aborts_the_call_records_partial_answer_and_terminates(
    catalog: Database, make_runner: RunnerFactory
) -> None:
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
    assert conversation.status is ProcessStatus.TERMINATED
    assert messages[-1].role is MessageRole.ASSISTANT
    assert messages[-1].data is not None and messages[-1].data["interrupted"] is True
    assert messages[-1].content == "".join(seen)
    assert TimelineKind.CANCEL in [e.kind for e in timeline]
    # What the stopped call used is counted: the prompt and the words streamed.
    assert result.input_tokens > 0 and result.output_tokens > 0
    assert (conversation.input_tokens, conversation.output_tokens) == (
        result.input_tokens,
        result.output_tokens,
    )
    (response,) = [e.data for e in timeline if e.kind is TimelineKind.RESPONSE]
    assert response["interrupted"] is True
    assert response["usage_estimated"] is result.usage_estimated


async def test_cancel_of_idle_conversation_terminates_it(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    uuid = await start(catalog, "SUMBRAND")
    assert await make_runner(ScriptedModel([])).cancel(uuid) is False
    conversation, _, _ = await rows(catalog, uuid)
    assert conversation.status is ProcessStatus.TERMINATED


async def test_window_memory_keeps_the_last_messages_across_turns(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel(["first answer", "second answer", "third answer"])
    runner = make_runner(model)
    uuid = await start(catalog, "SUMBRAND")
    for text in ("one", "two", "three"):
        result = await runner.send_message(uuid, text)
        assert result.status is ProcessStatus.COMPLETED
    # WINDOW(3): the third call sees the previous exchange and the new message.
    third = model.requests[2].messages
    user_texts = [
        part.content
        for message in third
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]
    assert user_texts == ["two", "three"]
    conversation, messages, _ = await rows(catalog, uuid)
    # The system prompt (once: it did not change) and three exchanges.
    assert len(messages) == 7
    assert conversation.input_tokens == 30


async def test_memory_id_shares_history_across_conversations(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel(["noted", "you said hello"])
    runner = make_runner(model)
    first = await start(catalog, "SUMBRAND", memory_id="shared")
    second = await start(catalog, "SUMBRAND", memory_id="shared")
    await runner.send_message(first, "hello")
    await runner.send_message(second, "what did I say?")
    texts = [
        part.content
        for message in model.requests[1].messages
        if isinstance(message, ModelRequest)
        for part in message.parts
        if isinstance(part, UserPromptPart)
    ]
    assert texts == ["hello", "what did I say?"]


async def test_unknown_tool_goes_back_to_the_model_with_the_closest_name(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel([ToolCall("AskUserQuestio", {"question": "?"}, call_id="c-9"), "ok"])
    uuid = await start(catalog, "SUMBRAND")
    result = await make_runner(model).send_message(uuid, "x")
    assert result.status is ProcessStatus.COMPLETED
    feedback = str(getattr(model.requests[1].messages[-1].parts[0], "content", ""))
    assert "unknown tool 'AskUserQuestio'; did you mean 'AskUserQuestion'?" in feedback
    async with catalog.sessions() as session:
        call = await session.scalar(select(ToolCallRow))
        assert call is not None and call.status is ToolCallStatus.FAILED


async def test_audit_off_per_call_records_no_timeline(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    uuid = await start(catalog, "SUMBRAND")
    await make_runner(ScriptedModel(["ok"])).send_message(
        uuid, "x", runtime_config={"audit": False}
    )
    _, messages, timeline = await rows(catalog, uuid)
    assert len(messages) == 3
    assert timeline == [
        e for e in timeline if e.kind is TimelineKind.STATUS_CHANGE and e.data["to"] == "RU"
    ]


async def test_concurrent_turns_on_one_conversation_are_refused(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel([Reply("slow answer here", chunk_delay=0.05)])
    runner = make_runner(model)
    uuid = await start(catalog, "SUMBRAND")
    errors: list[Exception] = []
    results: list[ProcessStatus] = []

    async def turn(text: str) -> None:
        try:
            result = await runner.send_message(uuid, text, runtime_config={"stream": True})
            results.append(result.status)
        except InvalidStateError as exc:
            errors.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(turn, "first")
        tg.start_soon(turn, "second")
    assert results == [ProcessStatus.COMPLETED]
    assert len(errors) == 1 and "is running a turn" in str(errors[0])


async def _edit_action(db: Database, **changes: object) -> None:
    """Change the SUMBRAND action the way the catalog API does: with a new revision."""
    from pilothouse.catalog import Action
    from pilothouse.catalog._repository import bump_revision

    async with db.sessions.begin() as session:
        action = await session.scalar(select(Action).where(Action.code == "SUMBRAND"))
        assert action is not None
        for name, value in changes.items():
            setattr(action, name, value)
        await bump_revision(session, "default")


async def test_a_catalog_change_between_turns_reaches_the_next_turn(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    # The second turn takes the compiled action from the runner's cache and
    # checks it against the revision read when the turn starts.
    model = ScriptedModel(["first", "second"])
    runner = make_runner(model)
    uuid = await start(catalog, "SUMBRAND")
    await runner.send_message(uuid, "one")
    assert "Summarize the brand document" in system_text(model, 0)
    await _edit_action(catalog, prompt="Translate the brand document into French.")

    result = await runner.send_message(uuid, "two")

    assert result.status is ProcessStatus.COMPLETED
    assert "Translate the brand document into French." in system_text(model, 1)
    assert "Summarize the brand document" not in system_text(model, 1)


async def test_an_action_deactivated_between_turns_fails_the_turn_with_the_reason(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    model = ScriptedModel(["first", "never"])
    runner = make_runner(model)
    uuid = await start(catalog, "SUMBRAND")
    await runner.send_message(uuid, "one")
    await _edit_action(catalog, active=False)

    result = await runner.send_message(uuid, "two")

    assert result.status is ProcessStatus.FAILED
    assert result.error is not None and "the catalog changed" in result.error
    assert "inactive" in result.error
    assert len(model.requests) == 1
    conversation, messages, _ = await rows(catalog, uuid)
    assert conversation.status is ProcessStatus.FAILED
    # The user's message is kept: nothing the user sent is lost.
    assert [m.content for m in messages if m.role is MessageRole.USER] == ["one", "two"]


async def test_a_listener_for_all_turns_without_deltas_does_not_make_calls_stream(
    catalog: Database, make_runner: RunnerFactory
) -> None:
    # The service's metrics and turn tracker listen to every turn; they need
    # no deltas, so a plain call must stay a plain (unstreamed) request.
    model = ScriptedModel([Reply("one two three"), Reply("four five six")])
    runner = make_runner(model)
    quiet: list[TurnEvent] = []
    runner.hub.subscribe(quiet.append, deltas=False)
    uuid = await start(catalog, "SUMBRAND")

    await runner.send_message(uuid, "x")

    assert not any(isinstance(e, TextDelta) for e in quiet)
    assert isinstance(quiet[0], StatusChanged) and isinstance(quiet[-1], TurnFinished)
    _, _, events = await rows(catalog, uuid)
    requests = [e.data for e in events if e.kind is TimelineKind.REQUEST]
    assert [r["stream"] for r in requests] == [False]

    # A listener that wants deltas (an SSE client, say) turns streaming on,
    # and the quiet one still gets none of them.
    loud: list[TurnEvent] = []
    runner.hub.subscribe(loud.append, uuid)
    await runner.send_message(uuid, "y")
    assert "".join(e.text for e in loud if isinstance(e, TextDelta)) == "four five six"
    assert not any(isinstance(e, TextDelta) for e in quiet)
    _, _, events = await rows(catalog, uuid)
    requests = [e.data for e in events if e.kind is TimelineKind.REQUEST]
    assert [r["stream"] for r in requests] == [False, True]
