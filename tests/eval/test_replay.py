"""Replays: recorded tool results answer the calls, divergences are reported, runs resume."""

from __future__ import annotations

import pytest

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.providers import SecretResolver
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, ScriptedModel, ToolCall
from pilothouse.tools import ToolRegistry

pytestmark = pytest.mark.anyio

LIVE_CALLS: list[str] = []


def stock(item: str) -> str:
    """Units in stock."""
    LIVE_CALLS.append(item)
    return f"{item}: 7"


async def test_replay_answers_from_the_recording_and_reports_divergences(
    database_url: str,
) -> None:
    LIVE_CALLS.clear()
    registry = ToolRegistry(SecretResolver({}))
    registry.register(stock)
    model = ScriptedModel(
        [
            # Recorded.
            ToolCall("stock", {"item": "shirt"}),
            "7 left",
            # Replay 1: the same call.
            ToolCall("stock", {"item": "shirt"}),
            "still 7",
            # Replay 2: other arguments.
            ToolCall("stock", {"item": "shoe"}),
            "no idea",
        ]
    )
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model, tools=registry) as ph:
        await (
            CatalogBuilder()
            .tool("STOCK", name="stock", kind="python", implementation="stock")
            .action("COUNT", prompt="Count stock.", tools=["STOCK"], ask_user=False)
            .import_into(ph)
        )
        await ph.command.start_and_send("how many shirts?", action="COUNT")
        assert LIVE_CALLS == ["shirt"]
        await ph.evaluation.create_dataset("stock", from_conversations=True)

        same = await ph.evaluation.replay("stock", run="same")
        (result,) = same.results
        assert result.status == "ok"
        assert result.output == "still 7"
        assert result.answered == 1
        assert result.divergences == ()
        assert result.tool_calls == ({"name": "stock", "arguments": {"item": "shirt"}},)
        # The model saw the recorded result; the tool never ran again.
        assert LIVE_CALLS == ["shirt"]
        assert "shirt: 7" in str(model.requests[-1].messages[-1])

        other = await ph.evaluation.replay("stock", run="other")
        (diverged,) = other.results
        assert diverged.answered == 0
        assert diverged.divergences == (
            {
                "tool": "stock",
                "arguments": {"item": "shoe"},
                "expected": [{"item": "shirt"}],
                "live": False,
            },
        )
        assert LIVE_CALLS == ["shirt"]

        # Replays are recorded with face "replay" and never become cases.
        conversation = await ph.query.get_conversation(result.conversation_uuid or "")
        assert conversation.face == "replay"
        again = await ph.evaluation.create_dataset("again", from_conversations=True)
        assert again.cases == 1

        # A finished run resumes with nothing left to run.
        resumed = await ph.evaluation.replay("stock", run="same")
        assert resumed.results == same.results
        with pytest.raises(InvalidFieldError, match="another dataset or target"):
            await ph.evaluation.replay("stock", run="same", settings={"temperature": 0.1})
        with pytest.raises(InvalidFieldError, match="concurrency"):
            await ph.evaluation.replay("stock", concurrency=0)
        with pytest.raises(NotFoundError, match="model 'NOPE'"):
            await ph.evaluation.replay("stock", run="bad", model="NOPE")
        assert [r.name for r in await ph.evaluation.list_runs()] == ["other", "same"]


async def test_evaluate_scores_two_runs_and_fails_on_a_regression(database_url: str) -> None:
    model = ScriptedModel(['{"n": 1, "w": "a"}', '{"n": 1, "w": "a"}', '{"n": 2, "w": "a"}'])
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        await CatalogBuilder().action("SAY", prompt="Say it.", ask_user=False).import_into(ph)
        await ph.command.start_and_send("say", action="SAY")
        await ph.evaluation.create_dataset("say", from_conversations=True)
        await ph.evaluation.replay("say", run="base")
        await ph.evaluation.replay("say", run="new", settings={"temperature": 0.5})
        good = await ph.evaluation.evaluate("base", scorers=["exact", "json_field:n"])
        assert good.passed
        assert good.pass_rates == {"exact": 1.0, "json_field:n": 1.0}
        report = await ph.evaluation.evaluate(
            "new",
            against="base",
            scorers=[
                "exact",
                "normalised",
                "json_field:w",
                "json_valid",
                "regex:n",
                "tool_sequence",
            ],
            thresholds={"exact": 0.5},
            margin=0.1,
        )
        assert not report.passed
        assert report.pass_rates["exact"] == 0.0
        assert report.pass_rates["json_field:w"] == 1.0
        assert report.baseline_rates is not None and report.baseline_rates["exact"] == 1.0
        assert report.failures[0] == "exact: pass rate 0% is below 50%"
        assert any("regressed" in f for f in report.failures)
        assert report.as_json()["cases"][0]["output"] == '{"n": 2, "w": "a"}'
        assert "| exact | 0% | 100% |" in report.as_markdown()
        assert "FAILED: exact" in report.as_table()
        with pytest.raises(InvalidFieldError, match="unknown scorer 'nope'"):
            await ph.evaluation.evaluate("new", scorers=["nope"])
        with pytest.raises(InvalidFieldError, match="no such scorer: regex"):
            await ph.evaluation.evaluate("new", thresholds={"regex": 1})
        with pytest.raises(InvalidFieldError, match="margin needs a baseline"):
            await ph.evaluation.evaluate("new", margin=0.1)
