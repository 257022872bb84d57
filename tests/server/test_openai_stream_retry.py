"""After a retried mid-stream failure the OpenAI stream client never sees text twice."""

from __future__ import annotations

from pilothouse.server._openai import _SentText


def test_the_retried_attempt_skips_the_prefix_the_client_already_has() -> None:
    text = _SentText()
    assert [text.fresh("AC"), text.fresh("K")] == ["AC", "K"]
    text.retried()
    assert [text.fresh("A"), text.fresh("CK"), text.fresh(" and"), text.fresh(" more")] == [
        "",
        "",
        " and",
        " more",
    ]
    assert text.sent == "ACK and more" and text.diverged is None


def test_a_retried_attempt_that_writes_something_else_is_marked_diverged() -> None:
    text = _SentText()
    text.fresh("Yes, ")
    text.retried()
    assert text.fresh("No") == ""
    assert text.diverged == 0
    assert text.fresh(", never.") == ""  # nothing more is sent once diverged


def test_a_retry_before_any_text_passes_everything_on() -> None:
    text = _SentText()
    text.retried()
    assert text.fresh("Hello") == "Hello"


def test_divergence_after_the_sent_prefix_is_caught() -> None:
    text = _SentText()
    text.fresh("ACK")
    text.retried()
    assert text.fresh("ABC and") == ""
    assert text.diverged == 0
