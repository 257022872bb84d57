"""Settings the command line is given: validated, and refused in one line.

Before: ``--database-url`` went in through ``model_copy(update=...)``,
unchecked, so ``mysql://`` or ``postgresql://`` (psycopg) failed later with a
``ModuleNotFoundError`` traceback, and an invalid ``PILOTHOUSE_*`` variable
ended every command with a pydantic traceback.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from pilothouse.cli import app
from pilothouse.errors import InvalidFieldError
from pilothouse.settings import Settings, database_driver_url
from pilothouse.store import Database

runner = CliRunner()


@pytest.mark.parametrize(
    ("written", "used"),
    [
        ("sqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("sqlite://", "sqlite+aiosqlite://"),
        ("sqlite+aiosqlite:///x.db", "sqlite+aiosqlite:///x.db"),
        ("postgres://u:pw@h:5432/d", "postgresql+asyncpg://u:pw@h:5432/d"),
        ("postgresql://u@h/d?ssl=require", "postgresql+asyncpg://u@h/d?ssl=require"),
        ("POSTGRESQL+ASYNCPG://u@h/d", "postgresql+asyncpg://u@h/d"),
    ],
)
def test_the_plain_schemes_get_the_async_drivers(written: str, used: str) -> None:
    assert database_driver_url(written) == used
    assert Settings(database_url=written).database_url == used


@pytest.mark.parametrize(
    ("written", "said"),
    [
        ("mysql://u:s3cret@h/d", "'mysql://' is not a database pilothouse runs on"),
        ("postgresql+psycopg://u:s3cret@h/d", "'postgresql+psycopg://' is not a database"),
        ("sqlite+pysqlite:///x.db", "'sqlite+pysqlite://' is not a database"),
        ("s3cret-not-a-url", "is not a database URL"),
    ],
)
def test_other_databases_and_drivers_are_refused_without_the_password(
    written: str, said: str
) -> None:
    with pytest.raises(ValueError, match=re.escape(said)) as refused:
        database_driver_url(written)
    assert "s3cret" not in str(refused.value)
    assert "postgresql+asyncpg://user@host:5432/db" in str(refused.value)
    # The store's own door says the same, naming the field.
    with pytest.raises(InvalidFieldError, match="database_url"):
        Database(written)


def test_a_database_url_option_pilothouse_cannot_use_is_one_line_and_exit_2() -> None:
    result = runner.invoke(app, ["--database-url", "mysql://u:s3cret@h/d", "conversations", "list"])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert lines == [
        "error: invalid settings: database_url (--database-url or PILOTHOUSE_DATABASE_URL): "
        "Value error, 'mysql://' is not a database pilothouse runs on (SQLite through "
        "aiosqlite, PostgreSQL through asyncpg): write sqlite+aiosqlite:///path/to/file.db "
        "or postgresql+asyncpg://user@host:5432/db"
    ]
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_an_invalid_environment_setting_is_named_without_its_value(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    result = runner.invoke(
        app,
        ["--database-url", url, "conversations", "list"],
        env={"PILOTHOUSE_FREEZE_HEAP": "s3cret", "PILOTHOUSE_DATABASE_POOL_SIZE": "-"},
    )
    assert result.exit_code == 2, result.output
    assert "s3cret" not in result.output
    assert "freeze_heap (PILOTHOUSE_FREEZE_HEAP): Input should be a valid boolean" in result.output
    assert "database_pool_size (PILOTHOUSE_DATABASE_POOL_SIZE):" in result.output
    assert "Traceback" not in result.output


def test_a_plain_sqlite_url_works_end_to_end(tmp_path: Path) -> None:
    result = runner.invoke(
        app,
        ["--database-url", f"sqlite:///{tmp_path / 'plain.db'}", "conversations", "list", "--json"],
    )
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["items"] == []


@pytest.mark.postgres
def test_a_plain_postgresql_url_works_end_to_end(postgres_database_url: str) -> None:
    # What hosting platforms hand out: postgres://, no driver.
    plain = postgres_database_url.replace("postgresql+asyncpg://", "postgres://")
    result = runner.invoke(app, ["--database-url", plain, "conversations", "list", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["items"] == []


def test_a_misspelt_variable_is_refused_and_names_the_setting(tmp_path: Path) -> None:
    # Before: ignored, so audit stayed on and nothing said why.
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    result = runner.invoke(
        app, ["--database-url", url, "conversations", "list"], env={"PILOTHOUSE_AUDITT": "false"}
    )
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        "error: invalid settings: PILOTHOUSE_AUDITT is not a setting, so it would be ignored: "
        "write PILOTHOUSE_AUDIT (or unset it)"
    )


def test_the_library_refuses_a_misspelt_variable_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("pilothouse_freze_heap", "true")  # read case-insensitively
    with pytest.raises(ValidationError, match="write PILOTHOUSE_FREEZE_HEAP"):
        Settings()


def test_a_variable_that_resembles_no_setting_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A script's own variable (the docs' curl examples use PILOTHOUSE_KEY), and
    # the server's settings, which ServerSettings checks.
    monkeypatch.setenv("PILOTHOUSE_KEY", "ph_abc")
    monkeypatch.setenv("PILOTHOUSE_SERVER_RATE_LIMT_PER_MINUTE", "5")
    assert Settings(database_url=f"sqlite:///{tmp_path / 'x.db'}").audit is True
