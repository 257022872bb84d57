"""Scorers that call a model: an LLM judge (scripted), embedding similarity, async plug-ins."""

from __future__ import annotations

import time
from decimal import Decimal
from typing import Any

import pytest

from pilothouse.api import Pilothouse
from pilothouse.catalog import ProcessStatus
from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, Json, Reply, ScriptedModel
from pilothouse.types import Score, Scored

pytestmark = pytest.mark.anyio

RUBRIC = "The answer names the city of the request."


def catalog() -> CatalogBuilder:
    # A priced judge: its verdicts have a cost.
    return (
        CatalogBuilder()
        .model(
            "JUDGE",
            provider="TEST",
            model_name="judge",
            capabilities=["FC", "SR"],
            input_price=2,
            output_price=8,
        )
        .action("SAY", prompt="Name the city.", ask_user=False)
    )


async def recorded_and_replayed(ph: Pilothouse) -> None:
    await catalog().import_into(ph)
    await ph.command.start_and_send("capital of France?", action="SAY")
    await ph.command.start_and_send("capital of Italy?", action="SAY")
    await ph.evaluation.create_dataset("cities", from_conversations=True)
    await ph.evaluation.replay("cities", run="new")


async def test_the_judge_grades_each_case_in_a_recorded_priced_turn(database_url: str) -> None:
    model = ScriptedModel(
        [
            Reply("Paris"),
            Reply("Rome"),
            # The replay.
            Reply("Paris, France"),
            Reply("Milan"),
            # The judge, case by case (one at a time: the order is the cases').
            Json({"reason": "names Paris", "score": 0.9, "passed": True}),
            Json({"reason": "Milan is not the capital", "score": 0.1, "passed": False}),
        ]
    )
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model) as ph:
        await recorded_and_replayed(ph)
        before = len(model.requests)
        report = await ph.evaluation.evaluate(
            "new", scorers=["judge:JUDGE", "exact"], rubric=RUBRIC, concurrency=1
        )
        judged = model.requests[before:]
        assert len(judged) == 2
        # The judge saw the rubric, the request, the expected and the replayed answer.
        prompt = repr(judged[0].messages)
        assert RUBRIC in prompt
        assert "capital of France?" in prompt and "Paris, France" in prompt
        assert report.pass_rates == {"judge:JUDGE": 0.5, "exact": 0.0}
        first, second = (c.scores["judge:JUDGE"] for c in report.cases)
        assert (first.passed, first.value, first.detail) == (True, 0.9, "names Paris")
        assert (second.passed, second.detail) == (False, "Milan is not the capital")
        # Each verdict is a priced turn of the judge's model, recorded and audited.
        assert first.cost > 0 and second.cost > 0
        assert report.scoring_cost == first.cost + second.cost
        assert report.cases[0].scores["exact"].cost == Decimal(0)
        conversation = await ph.query.get_conversation(first.conversation_uuid or "")
        assert conversation.face == "replay"
        assert conversation.status is ProcessStatus.COMPLETED
        assert conversation.estimated_cost == first.cost
        assert conversation.audit
        assert report.as_json()["scoring_cost"] == str(report.scoring_cost.normalize())
        assert "scoring cost:" in report.as_table()
        # Judges' conversations never become cases.
        again = await ph.evaluation.create_dataset("again", from_conversations=True)
        assert again.cases == 2


async def test_a_judge_is_refused_without_a_model_and_a_rubric_without_a_judge(
    database_url: str,
) -> None:
    settings = Settings(database_url=database_url, secrets_file=None)
    model = ScriptedModel([Reply("Paris"), Reply("Rome"), Reply("Paris"), Reply("Rome")])
    async with Pilothouse(settings, model=model) as ph:
        await recorded_and_replayed(ph)
        with pytest.raises(InvalidFieldError, match="name the judge's model"):
            await ph.evaluation.evaluate("new", scorers=["judge"])
        with pytest.raises(NotFoundError, match="model 'NOPE'"):
            await ph.evaluation.evaluate("new", scorers=["judge:NOPE"])
        with pytest.raises(InvalidFieldError, match="a rubric is for judge"):
            await ph.evaluation.evaluate("new", scorers=["exact"], rubric=RUBRIC)
        with pytest.raises(InvalidFieldError, match="between -1 and 1"):
            await ph.evaluation.evaluate("new", scorers=["embedding:3"])
        with pytest.raises(InvalidFieldError, match="named once"):
            await ph.evaluation.evaluate("new", scorers=["exact", "exact"])
        # No judge turn ran for a refused evaluation.
        assert model.remaining == 0


class Longer:
    """An async plug-in scorer: passes when the output is at least as long as expected."""

    name = "longer"

    async def score(self, scored: Scored) -> Score:
        expected, output = scored.expected_output or "", scored.result.output or ""
        return Score(len(output) >= len(expected), 1.0, f"{len(output)} vs {len(expected)}")


class Wrong:
    """A plug-in that breaks the contract: it answers with text."""

    name = "wrong"

    def score(self, scored: Scored) -> Any:
        del scored
        return "yes"


async def test_async_plugins_and_embedding_similarity_score_beside_the_built_ins(
    database_url: str,
) -> None:
    settings = Settings(database_url=database_url, secrets_file=None)
    model = ScriptedModel(
        [
            Reply("Paris"),
            Reply("Rome"),
            Reply("Paris"),
            Reply("The stock market closed higher on Tuesday."),
        ]
    )
    async with Pilothouse(settings, model=model) as ph:
        await recorded_and_replayed(ph)
        # The packaged MiniLM, as knowledge embeds with it.
        report = await ph.evaluation.evaluate("new", scorers=[Longer(), "embedding", "exact"])
        same, other = report.cases
        assert same.scores["embedding"].passed
        assert same.scores["embedding"].value == pytest.approx(1.0, abs=1e-3)
        assert not other.scores["embedding"].passed
        assert other.scores["embedding"].value < 0.5
        assert report.pass_rates == {"longer": 1.0, "embedding": 0.5, "exact": 0.5}
        with pytest.raises(TypeError, match="scorer 'wrong' returned str"):
            await ph.evaluation.evaluate("new", scorers=[Wrong()])


def test_a_regex_scorer_that_backtracks_without_end_fails_the_case_within_its_time_bound() -> None:
    # The caller's pattern is searched in the server's process: one that
    # backtracks exponentially would hold it (every tenant's turns) for
    # seconds on a 35-character output, for ever on a longer one.
    from pilothouse._facade.scorers import parse_scorer
    from pilothouse.types import CaseResult, DatasetCase

    scorer = parse_scorer("regex:(a|aa)+$")
    scored = Scored(
        DatasetCase(action="SAY", input_text="hi"),
        CaseResult(sequence=0, status="ok", output="a" * 35 + "!"),
        None,
    )
    started = time.monotonic()

    score = scorer.score(scored)

    assert time.monotonic() - started < 2
    assert score == Score(
        False,
        0.0,
        "the pattern ran past its time bound on this output; "
        "write one without nested or overlapping repetition",
    )
