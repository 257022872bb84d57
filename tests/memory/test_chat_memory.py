"""Chat memory selection: windows, tool-call groups, token budgets."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pilothouse.catalog._enums import MemoryKind, MessageRole
from pilothouse.memory import (
    MESSAGE_OVERHEAD_TOKENS,
    EstimateCounter,
    MemoryMessage,
    MemoryPolicy,
    message_tokens,
    select_history,
)

SY, US, AS, TO, QU = (
    MessageRole.SYSTEM,
    MessageRole.USER,
    MessageRole.ASSISTANT,
    MessageRole.TOOL,
    MessageRole.QUESTION,
)
COUNTER = EstimateCounter()


def us(text: str) -> MemoryMessage:
    return MemoryMessage(US, text)


def asst(text: str) -> MemoryMessage:
    return MemoryMessage(AS, text)


def call(*ids: str) -> MemoryMessage:
    calls = [{"id": i, "name": "lookup", "arguments": {"q": i}} for i in ids]
    return MemoryMessage(AS, "", data={"tool_calls": calls})


def result(call_id: str) -> MemoryMessage:
    return MemoryMessage(TO, f"result {call_id}", tool_call_id=call_id)


def select(
    history: Sequence[MemoryMessage],
    policy: MemoryPolicy,
    system_prompt: str = "You are helpful.",
) -> list[MemoryMessage]:
    return select_history(history, policy, system_prompt=system_prompt, counter=COUNTER)


def conversation(turns: int) -> list[MemoryMessage]:
    history: list[MemoryMessage] = []
    for i in range(turns):
        history += [us(f"question {i}"), asst(f"answer {i}")]
    return history


# --- FULL and WINDOW ---------------------------------------------------------


def test_empty_history_selects_nothing() -> None:
    assert select([], MemoryPolicy()) == []


def test_full_keeps_every_message() -> None:
    history = [*conversation(30), us("now")]
    assert select(history, MemoryPolicy(kind=MemoryKind.FULL, window=2)) == history


def test_window_keeps_the_last_n_messages() -> None:
    history = [*conversation(5), us("now")]
    assert select(history, MemoryPolicy(window=3)) == history[-3:]


def test_window_larger_than_history_keeps_everything() -> None:
    history = [*conversation(2), us("now")]
    assert select(history, MemoryPolicy(window=50)) == history


def test_window_of_one_keeps_only_the_current_input() -> None:
    history = [*conversation(3), us("now")]
    assert select(history, MemoryPolicy(window=1)) == [history[-1]]


def test_default_policy_is_window_20() -> None:
    policy = MemoryPolicy()
    assert (policy.kind, policy.window, policy.token_budget) == (MemoryKind.WINDOW, 20, None)


@pytest.mark.parametrize(
    ("field", "kwargs"), [("window", {"window": 0}), ("token_budget", {"token_budget": 0})]
)
def test_policy_rejects_non_positive_limits(field: str, kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=field):
        MemoryPolicy(**kwargs)  # pyright: ignore[reportArgumentType]


# --- tool-call groups -------------------------------------------------------


def test_window_drops_a_tool_group_it_would_split() -> None:
    group = [call("a", "b"), result("a"), result("b")]
    history = [us("q1"), *group, asst("done"), us("now")]
    # The last 4 would start at result("a"): the whole group goes instead.
    assert select(history, MemoryPolicy(window=4)) == [asst("done"), us("now")]


def test_window_keeps_a_tool_group_that_fits_whole() -> None:
    group = [call("a", "b"), result("a"), result("b")]
    history = [us("q1"), *group, asst("done"), us("now")]
    assert select(history, MemoryPolicy(window=5)) == [*group, asst("done"), us("now")]


def test_assistant_with_empty_tool_calls_is_a_plain_message() -> None:
    plain = MemoryMessage(AS, "hi", data={"tool_calls": []})
    history = [us("q"), plain, us("now")]
    assert select(history, MemoryPolicy(window=2)) == [plain, us("now")]


def test_leading_orphan_tool_result_is_dropped() -> None:
    # A tool result whose request is not stored at all (e.g. imported history).
    history = [result("x"), us("q"), asst("a"), us("now")]
    assert select(history, MemoryPolicy(kind=MemoryKind.FULL)) == history[1:]


def test_kept_history_never_starts_with_a_tool_message_under_a_window() -> None:
    history = [us("q"), result("x"), result("y"), asst("a"), us("now")]
    assert select(history, MemoryPolicy(window=4)) == [asst("a"), us("now")]


def test_newest_group_is_kept_whole_even_past_the_window() -> None:
    # Inside a tool loop the newest messages can be a request and its results.
    history = [us("q"), call("a", "b"), result("a"), result("b")]
    assert select(history, MemoryPolicy(window=1)) == history[1:]


# --- token budget -----------------------------------------------------------


def cost(messages: Sequence[MemoryMessage], system_prompt: str = "You are helpful.") -> int:
    system = COUNTER.count(system_prompt) + MESSAGE_OVERHEAD_TOKENS
    return system + sum(message_tokens(m, COUNTER) for m in messages)


def test_budget_drops_oldest_messages_until_the_rest_fits() -> None:
    history = [*conversation(10), us("now")]
    budget = cost(history[-5:])
    kept = select(history, MemoryPolicy(kind=MemoryKind.FULL, token_budget=budget))
    assert kept == history[-5:]
    assert cost(kept) <= budget


def test_budget_just_below_a_fit_drops_one_more_message() -> None:
    history = [*conversation(10), us("now")]
    budget = cost(history[-5:]) - 1
    kept = select(history, MemoryPolicy(kind=MemoryKind.FULL, token_budget=budget))
    assert kept == history[-4:]


def test_budget_and_window_both_apply() -> None:
    history = [*conversation(10), us("now")]
    generous = cost(history)
    assert select(history, MemoryPolicy(window=3, token_budget=generous)) == history[-3:]
    tight = cost(history[-2:])
    assert select(history, MemoryPolicy(window=9, token_budget=tight)) == history[-2:]


def test_budget_drops_tool_groups_whole() -> None:
    group = [call("a"), result("a")]
    history = [us("q"), *group, asst("done"), us("now")]
    budget = cost(history[-3:])  # room for result("a") but not for its request
    kept = select(history, MemoryPolicy(kind=MemoryKind.FULL, token_budget=budget))
    assert kept == [asst("done"), us("now")]


def test_budget_counts_the_system_prompt() -> None:
    history = [*conversation(3), us("now")]
    budget = cost(history[-3:], system_prompt="")
    policy = MemoryPolicy(kind=MemoryKind.FULL, token_budget=budget)
    assert select(history, policy, system_prompt="") == history[-3:]
    assert len(select(history, policy, system_prompt="x" * 40)) < 3


def test_system_prompt_over_budget_keeps_only_the_newest_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    history = [*conversation(3), us("now")]
    policy = MemoryPolicy(kind=MemoryKind.FULL, token_budget=10)
    with caplog.at_level(logging.WARNING, logger="pilothouse.memory._chat"):
        kept = select(history, policy, system_prompt="s" * 400)
    assert kept == [us("now")]
    assert "system prompt" in caplog.text


def test_newest_message_over_budget_is_still_kept(caplog: pytest.LogCaptureFixture) -> None:
    history = [us("old"), asst("old answer"), us("n" * 4000)]
    policy = MemoryPolicy(kind=MemoryKind.FULL, token_budget=100)
    with caplog.at_level(logging.WARNING, logger="pilothouse.memory._chat"):
        assert select(history, policy) == [history[-1]]
    assert "newest message" in caplog.text


def test_stored_token_count_is_used_instead_of_counting() -> None:
    class Refuses:
        def count(self, text: str) -> int:
            raise AssertionError("counted a message with a stored token_count")

    message = MemoryMessage(US, "whatever", token_count=7)
    assert message_tokens(message, Refuses()) == 7 + MESSAGE_OVERHEAD_TOKENS


def test_tool_call_names_and_arguments_are_counted() -> None:
    message = MemoryMessage(
        AS,
        "",
        data={"tool_calls": [{"id": "1", "name": "abcd", "arguments": '{"q": "12345678"}'}]},
    )
    # "" -> 0, "abcd" -> 1, the 17-char arguments -> 5, plus the overhead.
    assert message_tokens(message, COUNTER) == 0 + 1 + 5 + MESSAGE_OVERHEAD_TOKENS


def test_no_counting_happens_without_a_budget() -> None:
    class Refuses:
        def count(self, text: str) -> int:
            raise AssertionError("counted tokens without a budget")

    history = [*conversation(5), us("now")]
    kept = select_history(history, MemoryPolicy(window=4), system_prompt="s", counter=Refuses())
    assert kept == history[-4:]


def test_question_messages_are_ordinary_history() -> None:
    history = [us("q"), MemoryMessage(QU, "which one?"), us("the first")]
    assert select(history, MemoryPolicy(window=2)) == history[-2:]


# --- properties -------------------------------------------------------------

_text = st.text(alphabet="abc xyz", max_size=60)


@st.composite
def _block(draw: st.DrawFn) -> list[MemoryMessage]:
    kind = draw(st.sampled_from(["user", "assistant", "tools", "orphan", "question"]))
    if kind == "user":
        return [us(draw(_text))]
    if kind == "assistant":
        return [asst(draw(_text))]
    if kind == "question":
        return [MemoryMessage(QU, draw(_text))]
    if kind == "orphan":
        return [MemoryMessage(TO, draw(_text), tool_call_id="orphan")]
    ids = [f"c{i}" for i in range(draw(st.integers(1, 3)))]
    answered = draw(st.integers(0, len(ids)))
    return [call(*ids), *(result(i) for i in ids[:answered])]


@st.composite
def _histories(draw: st.DrawFn) -> list[MemoryMessage]:
    blocks = draw(st.lists(_block(), max_size=12))
    history = [m for block in blocks for m in block]
    return [*history, us(draw(_text))]


_policies = st.builds(
    MemoryPolicy,
    kind=st.sampled_from(list(MemoryKind)),
    window=st.integers(1, 12),
    token_budget=st.none() | st.integers(1, 200),
)


def _newest_group_start(history: Sequence[MemoryMessage]) -> int:
    return len(history) - 1  # the generated newest message is always a user message


@settings(max_examples=300, deadline=None)
@given(history=_histories(), policy=_policies, system_prompt=_text)
def test_selection_properties(
    history: list[MemoryMessage], policy: MemoryPolicy, system_prompt: str
) -> None:
    kept = select(history, policy, system_prompt=system_prompt)

    # A suffix of the history that always holds the newest message.
    assert kept
    assert kept == history[len(history) - len(kept) :]
    # Never leads with a tool result (so no tool group was split).
    assert kept[0].role is not TO
    only_newest = len(kept) == len(history) - _newest_group_start(history)
    if policy.kind is MemoryKind.WINDOW and not only_newest:
        assert len(kept) <= policy.window
    if policy.token_budget is not None and not only_newest:
        system = COUNTER.count(system_prompt) + MESSAGE_OVERHEAD_TOKENS if system_prompt else 0
        total = system + sum(message_tokens(m, COUNTER) for m in kept)
        assert total <= policy.token_budget
    if policy.kind is MemoryKind.FULL and policy.token_budget is None:
        # Nothing but leading orphan tool results is ever dropped.
        assert all(m.role is TO for m in history[: len(history) - len(kept)])
