from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from database_templates import SqliteTemplates
from pilothouse.catalog import import_catalog
from pilothouse.cli import app
from pilothouse.cli._run import parse_assignments
from pilothouse.store import Database

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "catalog"


def test_assignments_parse_json_values_strings_and_files(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text("brand text", encoding="utf-8")
    values = parse_assignments(
        ["temperature=0.5", "stop=END", "audit=false", f"document=@{doc}"], "--set"
    )
    assert values == {"temperature": 0.5, "stop": "END", "audit": False, "document": "brand text"}


async def seed_examples(database: Database) -> None:
    await import_catalog(database, "default", [EXAMPLES])


@pytest.fixture
def db_url(tmp_path: Path, sqlite_templates: SqliteTemplates) -> str:
    """A SQLite file holding the example catalog (a copy of a template seeded once)."""
    return sqlite_templates.fresh(tmp_path / "cli.db", seed_examples)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "NOPE", "hi"], "error: action 'NOPE' not found"),
        (["run", "SUMBRAND", "--agent", "GHOST", "hi"], "error: agent 'GHOST' not found"),
        (
            ["run", "SUMBRAND", "--set", "novalue", "hi"],
            "error: --set 'novalue': expected key=value",
        ),
        (
            ["run", "SUMBRAND", "--set", "temprature=1", "--input", "document=x", "hi"],
            "error: runtime config: unknown key 'temprature'",
        ),
        (["run", "SUMBRAND", "hi"], "error: the action prompt needs input data for 'document'"),
        (["run", "SUMBRAND", "--input", "document=@/no/such/file", "hi"], "cannot read"),
    ],
)
def test_bad_run_input_exits_2_with_one_line(db_url: str, args: list[str], message: str) -> None:
    result = CliRunner().invoke(app, ["--database-url", db_url, *args])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1
    assert message in lines[0]
    listed = CliRunner().invoke(app, ["--database-url", db_url, "conversations", "list", "--json"])
    assert json.loads(listed.output)["total"] == 0


DOWN_CATALOG = """\
providers:
  - code: DOWN
    name: A server that is not running
    kind: openai-compatible
    base_url: http://127.0.0.1:9/v1
configurations:
  - code: ONCE
    name: No retries
    max_tokens: 16
    retry_count: 0
    retry_delay: 0
models:
  - code: DOWNMODEL
    provider: DOWN
    model_name: nothing-listens
actions:
  - code: UNREACHABLE
    name: Ask a provider that is down
    model: DOWNMODEL
    configuration: ONCE
    prompt: Say hello.
    ask_user: false
"""


def test_a_run_records_the_cli_as_its_face(db_url: str, tmp_path: Path) -> None:
    extra = tmp_path / "down.yaml"
    extra.write_text(DOWN_CATALOG, encoding="utf-8")
    runner = CliRunner()
    imported = runner.invoke(app, ["--database-url", db_url, "catalog", "import", str(extra)])
    assert imported.exit_code == 0, imported.output
    # The provider is down: the turn fails, and is recorded all the same.
    runner.invoke(app, ["--database-url", db_url, "run", "UNREACHABLE", "hi"])
    listed = runner.invoke(app, ["--database-url", db_url, "conversations", "list", "--json"])
    (conversation,) = json.loads(listed.output)["items"]
    assert conversation["status"] == "FA"
    assert (conversation["face"], conversation["caller_key_prefix"]) == ("cli", None)
