"""The CLI exits 3 on a spent budget, and `budgets status` shows where each budget stands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from database_templates import SqliteTemplates
from pilothouse.api import Pilothouse
from pilothouse.catalog import import_catalog
from pilothouse.cli import app
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import Reply, ScriptedModel, override

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "catalog"
BUDGET = """\
budgets:
  - code: ONCE
    name: One summary a day
    scope: action
    match: SUMBRAND
    period: day
    timezone: Europe/Berlin
    turns: 1
    thresholds: [100]
"""


async def conversations(db_url: str) -> list[Any]:
    async with Pilothouse(Settings(database_url=db_url, secrets_file=None)) as ph:
        return list((await ph.query.list_conversations()).items)


async def seed_examples(database: Database) -> None:
    await import_catalog(database, "default", [EXAMPLES])


@pytest.fixture
def db_url(tmp_path: Path, sqlite_templates: SqliteTemplates) -> str:
    return sqlite_templates.fresh(tmp_path / "cli.db", seed_examples)


def test_a_spent_budget_exits_3_and_status_shows_it(db_url: str, tmp_path: Path) -> None:
    cli = CliRunner()
    budget = tmp_path / "budget.yaml"
    budget.write_text(BUDGET, encoding="utf-8")
    imported = cli.invoke(app, ["--database-url", db_url, "catalog", "import", str(budget)])
    assert imported.exit_code == 0, imported.output
    run = ["--database-url", db_url, "run", "SUMBRAND", "--input", "document=x", "Summarize."]
    with override(model=ScriptedModel([Reply("Short.")] * 2)) as model:
        first = cli.invoke(app, run)
        second = cli.invoke(app, run)
    assert first.exit_code == 0, first.output
    assert second.exit_code == 3
    assert "budget ONCE" in second.output and "turns" in second.output
    assert model.remaining == 1  # the refused turn never reached the model

    shown = cli.invoke(app, ["--database-url", db_url, "budgets", "status", "--json"])
    assert shown.exit_code == 0, shown.output
    (entry,) = json.loads(shown.output)
    assert entry["budget"] == "ONCE" and entry["subject"] == "SUMBRAND"
    assert entry["limits"] == {"turns": "1"} and entry["spent"] == {"turns": "1"}
    assert entry["remaining"] == {"turns": "0"} and entry["used_percent"] == 100
    assert entry["resets_at"].endswith("+00:00")
    table = cli.invoke(app, ["--database-url", db_url, "budgets", "status"])
    assert "ONCE" in table.output and "SUMBRAND" in table.output


def test_usage_reports_the_runs_by_action_and_model(db_url: str) -> None:
    cli = CliRunner()
    run = ["--database-url", db_url, "run", "SUMBRAND", "--input", "document=x", "Summarize."]
    with override(model=ScriptedModel([Reply("Short.", input_tokens=5, output_tokens=2)] * 2)):
        for _ in range(2):
            ran = cli.invoke(app, run)
            assert ran.exit_code == 0, ran.output
    shown = cli.invoke(
        app, ["--database-url", db_url, "usage", "--by", "action", "--by", "day", "--json"]
    )
    assert shown.exit_code == 0, shown.output
    (row,) = json.loads(shown.output)
    assert row["group"]["action"] == "SUMBRAND"
    # The conversations' own recorded totals, as `conversations show` gives them.
    recorded = [c for c in anyio.run(conversations, db_url) if c.action_code == "SUMBRAND"]
    assert row["conversations"] == len(recorded) == 2
    assert row["input_tokens"] == sum(c.input_tokens for c in recorded) > 0
    assert row["output_tokens"] == sum(c.output_tokens for c in recorded) == 4
    table = cli.invoke(app, ["--database-url", db_url, "usage"])
    assert table.exit_code == 0 and "SUMBRAND" in table.output
    wrong = cli.invoke(app, ["--database-url", db_url, "usage", "--since", "yesterday"])
    assert wrong.exit_code == 2 and "write YYYY-MM-DD" in wrong.output
    unknown = cli.invoke(app, ["--database-url", db_url, "usage", "--by", "colour"])
    assert unknown.exit_code != 0 and "write one or more of" in unknown.output
