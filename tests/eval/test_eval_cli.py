"""The example catalog's two actions: recorded, made a dataset, replayed, scored."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from database_templates import SqliteTemplates
from pilothouse.catalog import import_catalog
from pilothouse.cli import app
from pilothouse.store import Database
from pilothouse.testing import Json, Reply, ScriptedModel, override

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "catalog"
# Two summaries a day: the recording takes one; replays hold nothing on it.
BUDGET = """\
budgets:
  - code: TWICE
    name: Two summaries a day
    scope: action
    match: SUMBRAND
    period: day
    timezone: Europe/Berlin
    turns: 2
"""
ACME = [{"name": "Kelp Co", "website": "", "reason": "sells seaweed"}]


async def seed_examples(database: Database) -> None:
    await import_catalog(database, "default", [EXAMPLES])


@pytest.fixture
def db_url(tmp_path: Path, sqlite_templates: SqliteTemplates) -> str:
    return sqlite_templates.fresh(tmp_path / "cli.db", seed_examples)


def test_datasets_replay_and_eval_on_the_example_catalog(db_url: str, tmp_path: Path) -> None:
    cli = CliRunner()
    base = ["--database-url", db_url]
    budget = tmp_path / "budget.yaml"
    budget.write_text(BUDGET, encoding="utf-8")
    assert cli.invoke(app, [*base, "catalog", "import", str(budget)]).exit_code == 0
    with override(model=ScriptedModel([Reply("Orca sells food."), Json(ACME)])):
        summary = cli.invoke(app, [*base, "run", "SUMBRAND", "--input", "document=Orca", "Go."])
        competitors = cli.invoke(
            app, [*base, "run", "COMPETITORS", "--input", "document=Orca vs Kelp Co", "Go."]
        )
    assert summary.exit_code == 0, summary.output
    assert competitors.exit_code == 0, competitors.output

    created = cli.invoke(app, [*base, "datasets", "create", "brand", "--from-conversations"])
    assert created.exit_code == 0, created.output
    assert "brand\t2 cases" in created.output
    only = cli.invoke(
        app, [*base, "datasets", "create", "one", "--from-conversations", "--action", "SUMBRAND"]
    )
    assert "one\t1 cases" in only.output
    refused = cli.invoke(app, [*base, "datasets", "create", "bad", "--status", "XX"])
    assert refused.exit_code == 2 and "--status 'XX'" in refused.output

    exported = tmp_path / "brand.jsonl"
    assert (
        cli.invoke(app, [*base, "datasets", "export", "brand", "-o", str(exported)]).exit_code == 0
    )
    lines = [json.loads(x) for x in exported.read_text().splitlines()]
    assert [x["action"] for x in lines] == ["SUMBRAND", "COMPETITORS"]
    assert lines[0]["input_data"] == {"document": "Orca"}
    imported = cli.invoke(app, [*base, "datasets", "import", "copy", str(exported)])
    assert "copy\t2 cases" in imported.output

    # The baseline: the same answers; then another configuration answering otherwise.
    with override(model=ScriptedModel([Reply("Orca sells food."), Json(ACME)])):
        same = cli.invoke(app, [*base, "replay", "brand", "--run", "base"])
    assert same.exit_code == 0, same.output
    assert "base: 2 cases, 0 failed, 0 diverged" in same.output
    with override(model=ScriptedModel([Reply("Orca makes fish food."), Json(ACME)])) as prec:
        other = cli.invoke(
            app, [*base, "replay", "brand", "--run", "prec", "--configuration", "PREC"]
        )
    assert other.exit_code == 0, other.output
    assert "prec: 2 cases, 0 failed, 0 diverged" in other.output  # the budget was not spent
    with override(model=ScriptedModel([Reply("x"), Json(ACME)])):
        counted = cli.invoke(app, [*base, "replay", "brand", "--run", "counted", "--count-budgets"])
    assert "counted: 2 cases, 0 failed" in counted.output  # the recording spent 1 of 2
    with override(model=ScriptedModel([Json(ACME)])):
        spent = cli.invoke(app, [*base, "replay", "brand", "--run", "spent", "--count-budgets"])
    assert "spent: 2 cases, 1 failed" in spent.output
    # The summary action's own configuration is DFLT (256 tokens); the replay ran on PREC's 512.
    settings = prec.requests[0].info.model_settings
    assert settings is not None and settings.get("max_tokens") == 512

    scored = [*base, "eval", "brand", "--run", "prec", "--against", "base"]
    passing = cli.invoke(app, [*scored, "--scorer", "json_valid", "--format", "json"])
    assert passing.exit_code == 0, passing.output
    report = json.loads(passing.output)
    assert report["pass_rates"] == {"json_valid": 0.5}  # the summary is plain text
    failing = cli.invoke(
        app, [*scored, "--scorer", "exact", "--threshold", "exact=1", "--format", "markdown"]
    )
    assert failing.exit_code == 1
    assert "| exact | 50% | 100% |" in failing.output
    unknown = cli.invoke(app, [*scored, "--scorer", "nope"])
    assert unknown.exit_code == 2 and "unknown scorer 'nope'" in unknown.output
    bad_format = cli.invoke(app, [*scored, "--format", "xml"])
    assert bad_format.exit_code == 2
    # A judge on the example catalog's model, with a rubric; its verdicts are priced turns.
    verdicts = [Json({"reason": "on topic", "score": 1, "passed": True})] * 4
    with override(model=ScriptedModel(verdicts)):
        judged = cli.invoke(
            app,
            [*scored, "--scorer", "judge:QWEN05", "--rubric", "On topic.", "--format", "json"],
        )
    assert judged.exit_code == 0, judged.output
    verdict = json.loads(judged.output)
    assert verdict["pass_rates"] == {"judge:QWEN05": 1.0}
    assert verdict["cases"][0]["scores"]["judge:QWEN05"]["detail"] == "on topic"
    lonely = cli.invoke(app, [*scored, "--rubric", "On topic."])
    assert lonely.exit_code == 2 and "a rubric is for judge" in lonely.output

    # Replays never enter datasets built afterwards.
    again = cli.invoke(app, [*base, "datasets", "create", "again", "--from-conversations"])
    assert "again\t2 cases" in again.output
