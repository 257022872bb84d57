"""`pilothouse catalog validate|import|export` through the real command line."""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner, Result

from pilothouse.catalog import export_catalog
from pilothouse.cli import app
from pilothouse.store import Database

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).parents[2] / "examples" / "catalog"


async def invoke(database: Database | None, *args: str) -> Result:
    options = ["--database-url", database.url] if database is not None else []
    # The command runs its own event loop, so it runs in a worker thread.
    return await anyio.to_thread.run_sync(
        lambda: CliRunner().invoke(app, [*options, *args], catch_exceptions=False)
    )


async def test_validate_prints_a_one_line_summary() -> None:
    result = await invoke(None, "catalog", "validate", str(EXAMPLES))
    assert result.exit_code == 0
    assert result.stdout.startswith("ok: 4 files, 26 entities (3 providers, 3 models, ")
    assert result.stdout.count("\n") == 1


async def test_validate_errors_exit_2_with_one_line_each(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "providers:\n  - code: P\n    kind: openai\n    api_key: sk-TOPSECRET\n"
        "configurations:\n  - code: C\n"
    )
    result = await invoke(None, "catalog", "validate", str(bad))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{bad}:4: provider 'P': api_key: must be a @secrets(NAME) reference, not a literal value",
        f"{bad}:6: configuration 'C': max_tokens: required",
    ]
    assert "TOPSECRET" not in result.output


async def test_validate_against_the_database(database: Database, tmp_path: Path) -> None:
    action = tmp_path / "action.yaml"
    action.write_text(
        "actions:\n  - code: A\n    model: SMOLLM2\n    configuration: DFLT\n    prompt: p\n"
    )
    offline = await invoke(database, "catalog", "validate", str(action))
    assert offline.exit_code == 2
    assert (await invoke(database, "catalog", "import", str(EXAMPLES))).exit_code == 0
    online = await invoke(database, "catalog", "validate", "--use-database", str(action))
    assert online.exit_code == 0, online.output


async def test_import_prints_a_summary_table_and_is_idempotent(database: Database) -> None:
    first = await invoke(database, "--tenant", "acme", "catalog", "import", str(EXAMPLES))
    assert first.exit_code == 0, first.output
    assert "│ actions " in first.stdout
    assert "tenant 'acme': catalog revision 1" in first.stdout
    second = await invoke(database, "--tenant", "acme", "catalog", "import", str(EXAMPLES))
    assert second.exit_code == 0
    assert "tenant 'acme': nothing changed (revision 1)" in second.stdout


async def test_import_of_invalid_files_exits_2_and_writes_nothing(
    database: Database, tmp_path: Path
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("actions:\n  - code: A\n    model: GPT5\n    configuration: X\n    prompt: p\n")
    result = await invoke(database, "catalog", "import", str(bad))
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        f"{bad}:3: action 'A': model: unknown model 'GPT5'",
        f"{bad}:4: action 'A': configuration: unknown configuration 'X'",
    ]
    async with database.sessions() as session:
        assert await export_catalog(session, "default") == ""


async def test_export_prints_the_catalog(database: Database) -> None:
    assert (await invoke(database, "catalog", "import", str(EXAMPLES))).exit_code == 0
    result = await invoke(database, "catalog", "export")
    assert result.exit_code == 0
    async with database.sessions() as session:
        assert result.stdout == await export_catalog(session, "default")
    only = await invoke(database, "catalog", "export", "--kind", "personas")
    assert only.stdout.startswith("personas:\n  - code: EDITOR\n")


async def test_export_of_an_unknown_kind_exits_2(database: Database) -> None:
    result = await invoke(database, "catalog", "export", "--kind", "modelz")
    assert result.exit_code == 2
    assert result.stderr == "error: unknown kind 'modelz' (did you mean 'models'?)\n"
