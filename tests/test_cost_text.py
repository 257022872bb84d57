"""One writer of costs for every face: plain decimal notation, never an exponent."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal

import pytest

from pilothouse.types import ConversationInfo, FinishReason, ProcessStatus, TurnResult, cost_text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Decimal("0E-8"), "0"),  # a zero read back from NUMERIC(18, 8)
        (Decimal("0.00000000"), "0"),
        (Decimal("7.5E-7"), "0.00000075"),
        (Decimal("0.00019500"), "0.000195"),
        (Decimal("1.50000000"), "1.5"),
        (Decimal("12"), "12"),
        (Decimal("1E+2"), "100"),
        (0, "0"),
        ("0.0042", "0.0042"),
    ],
)
def test_costs_are_written_in_plain_notation(value: Decimal | int | str, text: str) -> None:
    assert cost_text(value) == text


@pytest.mark.parametrize("value", ["NaN", "Infinity", "abc"])
def test_what_is_no_cost_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="a cost must be"):
        cost_text(value)


def test_a_turn_result_writes_its_cost_plainly() -> None:
    result = TurnResult(
        conversation_uuid="c",
        status=ProcessStatus.COMPLETED,
        finish_reason=FinishReason.STOP,
        output="hi",
        text="hi",
        input_tokens=1,
        output_tokens=1,
        cost=Decimal("0E-8"),
        ai_meta=None,
    )
    assert result.as_json()["cost"] == "0"
    assert result.as_json()["usage_estimated"] is False


def test_a_conversation_writes_its_cost_plainly_in_json() -> None:
    now = datetime.now(UTC)
    info = ConversationInfo(
        uuid="c",
        tenant="default",
        agent_code=None,
        action_code="A",
        status=ProcessStatus.COMPLETED,
        finish_reason=None,
        response_model=None,
        input_tokens=0,
        output_tokens=0,
        cached_tokens=0,
        reasoning_tokens=0,
        estimated_cost=Decimal("7.5E-7"),
        error_detail=None,
        memory_id="c",
        audit=True,
        created_at=now,
        started_at=None,
        finished_at=None,
        updated_at=now,
        version=1,
    )
    assert info.model_dump(mode="json")["estimated_cost"] == "0.00000075"
    assert info.estimated_cost == Decimal("7.5E-7")  # the value itself is kept
