"""`pilothouse serve` hands uvicorn the settings that keep connections and shutdowns clean."""

from __future__ import annotations

import os
import signal
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from typer.testing import CliRunner

from pilothouse.cli import app


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    seen: dict[str, Any] = {}

    def run(target: str, **kwargs: Any) -> None:
        seen.update(kwargs, target=target)

    monkeypatch.setattr(uvicorn, "run", run)
    # serve installs its own SIGTERM handler; the test process keeps its own.
    before = signal.getsignal(signal.SIGTERM)
    # serve writes its options to the environment (for uvicorn's workers):
    # setting then deleting each records it, so the test's changes are undone.
    for name in (
        "DATABASE_URL",
        "TENANT",
        "SECRETS_FILE",
        "SERVER_HOST",
        "SERVER_PORT",
        "SERVER_SHUTDOWN_GRACE_SECONDS",
        "SERVER_LOG_FORMAT",
        "FREEZE_HEAP",
    ):
        monkeypatch.setenv(f"PILOTHOUSE_{name}", "")
        monkeypatch.delenv(f"PILOTHOUSE_{name}")
    yield seen
    signal.signal(signal.SIGTERM, before)


def test_keep_alive_outlasts_client_pools_and_uvicorn_waits_past_the_grace(
    captured: dict[str, Any], tmp_path: Path
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    done = CliRunner().invoke(app, ["--database-url", url, "serve", "--grace", "3"])
    assert done.exit_code == 0, done.output
    # Longer than httpx's (5 s) and most proxies' idle expiry: the client closes first.
    assert captured["timeout_keep_alive"] == 75
    # The app stops the turns at the grace and answers them 503: uvicorn must wait longer.
    assert captured["timeout_graceful_shutdown"] == 13
    again = CliRunner().invoke(app, ["--database-url", url, "serve", "--keep-alive", "120"])
    assert again.exit_code == 0, again.output
    assert captured["timeout_keep_alive"] == 120


def test_the_service_freezes_its_heap_unless_the_environment_says_otherwise(
    captured: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    done = CliRunner().invoke(app, ["--database-url", url, "serve"])
    assert done.exit_code == 0, done.output
    # uvicorn's workers build their settings from the environment.
    assert os.environ["PILOTHOUSE_FREEZE_HEAP"] == "true"
    monkeypatch.setenv("PILOTHOUSE_FREEZE_HEAP", "false")
    again = CliRunner().invoke(app, ["--database-url", url, "serve"])
    assert again.exit_code == 0, again.output
    assert os.environ["PILOTHOUSE_FREEZE_HEAP"] == "false"


@pytest.mark.parametrize(
    ("variable", "value", "said"),
    [
        (
            "PILOTHOUSE_SERVER_RATE_LIMIT_PER_MINUTE",
            "lots",
            "rate_limit_per_minute (PILOTHOUSE_SERVER_RATE_LIMIT_PER_MINUTE): Input should be "
            "a valid integer, unable to parse string as an integer",
        ),
        (
            "PILOTHOUSE_SERVER_RATE_LIMT_PER_MINUTE",
            "5",
            "PILOTHOUSE_SERVER_RATE_LIMT_PER_MINUTE is not a setting, so it would be ignored: "
            "write PILOTHOUSE_SERVER_RATE_LIMIT_PER_MINUTE (or unset it)",
        ),
        (
            # The prefix itself misspelt: was ignored, the port stayed 8000.
            "PILOTHOUSE_SEVER_PORT",
            "9000",
            "PILOTHOUSE_SEVER_PORT is not a setting, so it would be ignored: "
            "write PILOTHOUSE_SERVER_PORT (or unset it)",
        ),
    ],
)
def test_a_bad_server_setting_stops_the_start_in_one_line(
    captured: dict[str, Any],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
    value: str,
    said: str,
) -> None:
    # Before: every uvicorn worker died on the first with a pydantic
    # traceback, and the second was ignored.
    monkeypatch.setenv(variable, value)
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    done = CliRunner().invoke(app, ["--database-url", url, "serve"])
    assert done.exit_code == 2, done.output
    assert done.output.strip().splitlines() == [f"error: invalid settings: {said}"]
    assert "target" not in captured  # uvicorn never started


@pytest.mark.parametrize(
    "variable",
    [
        "PILOTHOUSE_SERVER",  # a client script's URL of its server
        "PILOTHOUSE_PORT",
        "PILOTHOUSE_KEY",
        "PILOTHOUSE_TENANT_MCP_STDIO",  # a setting of the library's own
    ],
)
def test_a_variable_like_a_server_setting_but_not_misspelt_is_left_alone(
    captured: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.setenv(variable, "false" if variable.endswith("STDIO") else "x")
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    done = CliRunner().invoke(app, ["--database-url", url, "serve"])
    assert done.exit_code == 0, done.output
    assert "target" in captured  # uvicorn was started


def test_a_database_that_is_not_pilothouse_s_stops_the_start_in_one_line(
    captured: dict[str, Any], tmp_path: Path
) -> None:
    path = tmp_path / "app.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY)")
    done = CliRunner().invoke(app, ["--database-url", f"sqlite:///{path}", "serve"])
    assert done.exit_code == 2, done.output
    assert done.output.startswith(
        "error: the database holds 1 table (invoices) and no pilothouse schema"
    )
    assert "Traceback" not in done.output
    assert "target" not in captured  # uvicorn never started


def test_with_two_workers_serve_makes_one_metrics_directory_for_the_run(
    captured: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Set then deleted: the test's change to the environment is undone.
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", "")
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    seen: list[Path] = []

    def run(target: str, **kwargs: Any) -> None:
        folder = Path(os.environ["PROMETHEUS_MULTIPROC_DIR"])
        assert folder.is_dir() and not list(folder.iterdir())
        seen.append(folder)

    monkeypatch.setattr(uvicorn, "run", run)
    url = f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"
    done = CliRunner().invoke(app, ["--database-url", url, "serve", "--workers", "2"])
    assert done.exit_code == 0, done.output
    (folder,) = seen
    assert f"write their samples to {folder}" in done.output
    # Made for the run, removed after it.
    assert not folder.exists()
    monkeypatch.delenv("PROMETHEUS_MULTIPROC_DIR")
    # One worker is the whole service: no directory.
    monkeypatch.setattr(uvicorn, "run", lambda target, **kwargs: seen.append(Path(target)))
    single = CliRunner().invoke(app, ["--database-url", url, "serve"])
    assert single.exit_code == 0, single.output
    assert "PROMETHEUS_MULTIPROC_DIR" not in os.environ
