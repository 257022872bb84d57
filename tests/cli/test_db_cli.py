from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner, Result

from pilothouse.cli import app
from pilothouse.store import head_revision

runner = CliRunner()


def _db(url: str, *args: str) -> Result:
    return runner.invoke(app, ["--database-url", url, "db", *args])


def test_fresh_database_reports_empty_then_upgrades_to_head(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}"
    head = head_revision()

    result = _db(url, "current")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == (
        f"database at empty (not current: newest is {head}; run `pilothouse db upgrade`)"
    )

    result = _db(url, "upgrade")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"database at {head} (was: empty)"

    result = _db(url, "current")
    assert result.stdout.strip() == f"database at {head} (current)"

    result = _db(url, "upgrade")
    assert result.stdout.strip() == f"database at {head} (was: {head})"


def test_upgrade_and_current_on_both_databases(database_url: str) -> None:
    head = head_revision()
    result = _db(database_url, "upgrade")
    assert result.exit_code == 0, result.output
    # PostgreSQL's session database may already be migrated by earlier tests.
    assert re.fullmatch(rf"database at {head} \(was: (empty|{head})\)", result.stdout.strip())
    result = _db(database_url, "current")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == f"database at {head} (current)"


def test_unreachable_database_exits_2_with_one_line() -> None:
    result = _db("postgresql+asyncpg://user:hunter2@127.0.0.1:1/none", "current")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1
    assert result.stderr.startswith("error: database postgresql+asyncpg://user:***@")
    assert "hunter2" not in result.output
