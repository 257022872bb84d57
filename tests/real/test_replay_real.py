"""A replay on the packaged model (llama.cpp Qwen): the example catalog's two actions.

Two recorded conversations (a summary and a competitor list) become a
dataset, are replayed on the same model with the other configuration and
scored against the recording; the replays are recorded as replays.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pilothouse.api import Pilothouse
from pilothouse.providers._local import LocalModelServers
from pilothouse.settings import Settings

pytestmark = [pytest.mark.real, pytest.mark.anyio]

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "catalog"
DOCUMENT = "Nimbus Bikes makes city bikes. We compete with Velo Works (velo.example)."


@pytest.fixture
async def ph(
    tmp_path: Path, local_model_servers: LocalModelServers, qwen_base_url: str
) -> AsyncIterator[Pilothouse]:
    del qwen_base_url  # started once for the session
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'pilothouse.db'}")
    async with Pilothouse(settings, local_servers=local_model_servers) as facade:
        await facade.catalog.import_files([EXAMPLES])
        yield facade


async def test_replay_on_the_packaged_model_with_another_configuration(ph: Pilothouse) -> None:
    summary = await ph.command.start_and_send(
        "Summarize.", action="SUMBRAND", input_data={"document": DOCUMENT}
    )
    listed = await ph.command.start_and_send(
        "List them.", action="COMPETITORS", input_data={"document": DOCUMENT}
    )
    assert summary.text and listed.text
    info = await ph.evaluation.create_dataset("brand", from_conversations=True)
    assert info.cases == 2
    run = await ph.evaluation.replay("brand", run="prec", configuration="PREC", concurrency=2)
    assert [r.status for r in run.results] == ["ok", "ok"]
    assert all(r.output for r in run.results)
    assert all(r.input_tokens > 0 for r in run.results)
    for result in run.results:
        conversation = await ph.query.get_conversation(result.conversation_uuid or "")
        assert conversation.face == "replay"
        assert conversation.response_model is not None
    report = await ph.evaluation.evaluate("prec", scorers=["json_valid", "cost_delta:1000"])
    # The competitor list is JSON under its schema; the summary is prose.
    assert report.cases[1].scores["json_valid"].passed
    assert "json_valid" in report.as_markdown()


# The packaged model again, priced, as a judge: its verdicts have a cost.
JUDGE = """\
models:
  - code: QJUDGE
    provider: LOCL
    model_name: Qwen2.5-Coder-0.5B-Instruct
    capabilities: [FC, SR]
    input_price: 1
    output_price: 4
    context_window: 4096
"""


async def test_a_judge_on_the_packaged_model_grades_replayed_cases(ph: Pilothouse) -> None:
    await ph.catalog.import_text(JUDGE)
    await ph.command.start_and_send(
        "Summarize.", action="SUMBRAND", input_data={"document": DOCUMENT}
    )
    await ph.evaluation.create_dataset("one", from_conversations=True)
    await ph.evaluation.replay("one", run="again")
    report = await ph.evaluation.evaluate(
        "again",
        scorers=["judge:QJUDGE"],
        rubric="The answer is a short summary about a bike maker.",
    )
    (case,) = report.cases
    verdict = case.scores["judge:QJUDGE"]
    # The small model's opinion may go either way; that it gave one, under
    # the verdict's schema, in a priced and recorded turn, may not.
    assert 0.0 <= verdict.value <= 1.0
    assert not verdict.detail.startswith("judge"), verdict.detail
    assert verdict.cost > 0
    assert report.scoring_cost == verdict.cost
    conversation = await ph.query.get_conversation(verdict.conversation_uuid or "")
    assert conversation.face == "replay"
    assert conversation.audit
    assert conversation.response_model is not None
