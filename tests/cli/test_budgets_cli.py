"""The CLI exits 3 on a spent budget, and `budgets status` shows where each budget stands."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest
from typer.testing import CliRunner

from database_templates import SqliteTemplates
from pilothouse.catalog import import_catalog
from pilothouse.cli import app
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


def test_usage_groups_spend_and_filters_by_day(db_url: str) -> None:
    cli = CliRunner()
    run = ["--database-url", db_url, "run", "SUMBRAND", "--input", "document=x", "Summarize."]
    with override(model=ScriptedModel([Reply("Short.", input_tokens=7, output_tokens=3)] * 2)):
        for _ in range(2):
            ran = cli.invoke(app, run)
            assert ran.exit_code == 0, ran.output
    base = ["--database-url", db_url, "usage"]
    by_action = cli.invoke(app, [*base, "--by", "action", "--json"])
    assert by_action.exit_code == 0, by_action.output
    (row,) = json.loads(by_action.output)
    assert row["group"] == "action" and row["key"] == "SUMBRAND"
    assert row["conversations"] == 2 and row["input_tokens"] > 0 and row["output_tokens"] > 0
    # Grouped by day (both ran today) or by user, the same turns add up the same.
    (today,) = json.loads(cli.invoke(app, [*base, "--by", "day", "--json"]).output)
    assert date.fromisoformat(today["key"]).year >= 2026
    for field in ("conversations", "input_tokens", "output_tokens", "cost"):
        assert today[field] == row[field]
    users = json.loads(cli.invoke(app, [*base, "--by", "user", "--json"]).output)
    assert sum(u["input_tokens"] for u in users) == row["input_tokens"]
    # Nothing was started in 2001; a day that is not a date is refused.
    old = cli.invoke(app, [*base, "--until", "2001-01-01", "--json"])
    assert old.exit_code == 0 and json.loads(old.output) == []
    bad = cli.invoke(app, [*base, "--since", "yesterday"])
    assert bad.exit_code == 2 and "YYYY-MM-DD" in bad.output
    unknown = cli.invoke(app, [*base, "--by", "weekday"])
    assert unknown.exit_code != 0 and "weekday" in unknown.output
    table = cli.invoke(app, [*base, "--by", "day"])
    assert table.exit_code == 0 and str(row["input_tokens"]) in table.output
