"""What the model is sent after the user answered its question.

The question message recorded for people must not stand between the model's
call and its result, and the call after the answers does not offer the
question tool again (a small model given it asked the same question again).
"""

from __future__ import annotations

from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

from pilothouse.catalog._enums import MessageRole
from pilothouse.memory import MemoryMessage
from pilothouse.runtime._convert import history_messages
from pilothouse.runtime._toolstep import after_replies, answers_words
from pilothouse.runtime._turn import ToolReply

ASK = {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]}


def _history() -> list[MemoryMessage]:
    call = {"id": "q1", "name": "AskUserQuestion", "arguments": ASK}
    return [
        MemoryMessage(role=MessageRole.USER, content="I want a shirt."),
        MemoryMessage(role=MessageRole.ASSISTANT, content="", data={"tool_calls": [call]}),
        MemoryMessage(
            role=MessageRole.QUESTION,
            content="Which size?",
            tool_call_id="q1",
            data={"question_id": "size", "choices": ["S", "M"]},
        ),
        MemoryMessage(
            role=MessageRole.TOOL,
            content='User has answered your questions: "Which size?"="M".',
            tool_call_id="q1",
            data={"tool_name": "AskUserQuestion"},
        ),
    ]


def test_the_recorded_question_does_not_come_between_the_call_and_its_result() -> None:
    messages = history_messages("Take shirt orders.", _history())
    kinds = [type(p).__name__ for m in messages for p in m.parts]
    assert kinds == ["SystemPromptPart", "UserPromptPart", "ToolCallPart", "ToolReturnPart"]


def test_after_answers_the_question_tool_is_withheld() -> None:
    messages = history_messages("Take shirt orders.", _history())
    reply = ToolReply("q1", "AskUserQuestion", "answered", words="M")
    step = after_replies(messages, [reply], as_text=False)
    assert step.messages == messages
    assert step.withhold == frozenset({"AskUserQuestion"})
    assert not step.force_text


def test_a_text_reading_model_gets_the_exchange_as_a_conversation() -> None:
    messages = history_messages("Take shirt orders.", _history())
    reply = ToolReply("q1", "AskUserQuestion", "answered", words="M")
    step = after_replies(messages, [reply], as_text=True)
    asked, answered = step.messages[-2:]
    assert isinstance(asked, ModelResponse)
    assert asked.parts == [TextPart("Which size?")]
    assert isinstance(answered, ModelRequest)
    (part,) = answered.parts
    assert isinstance(part, UserPromptPart)
    assert part.content == "M"
    assert step.force_text
    assert step.withhold == frozenset({"AskUserQuestion"})
    # The user's first message stays; the call and its result are replaced.
    assert not any(
        isinstance(p, ToolCallPart | ToolReturnPart) for m in step.messages for p in m.parts
    )


def test_a_callers_tool_result_is_not_changed() -> None:
    messages = history_messages("Take shirt orders.", _history())
    reply = ToolReply("i1", "lookup", '{"stored": true}')
    step = after_replies(messages, [reply], as_text=True)
    assert step.messages == messages
    assert step.withhold == frozenset()


def test_several_answers_read_as_question_and_answer_lines() -> None:
    questions = [("size", "Which size?"), ("colour", "Which colour?")]
    assert answers_words(questions, {"size": "M", "colour": "red"}) == (
        "Which size? M\nWhich colour? red"
    )
    assert answers_words(questions[:1], {"size": "M"}) == "M"
