"""`pilothouse worker` and `pilothouse events`: bad input is one line and exit code 2.

The commands' running loops are the package's Worker and EventService,
tested in tests/events and, against tansu and NATS, in tests/real.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from pilothouse.cli import app
from pilothouse.cli._context import CliState, open_facade
from pilothouse.settings import Settings

runner = CliRunner()


def test_worker_refuses_an_unknown_bus_scheme(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    result = runner.invoke(app, ["--database-url", url, "worker", "--bus", "amqp://x"])
    assert result.exit_code == 2
    assert result.stderr.strip() == (
        "error: bus: unknown bus 'amqp://x': write memory://, kafka://host:port or nats://host:port"
    )


def test_worker_refuses_tools_it_cannot_import(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    result = runner.invoke(
        app,
        ["--database-url", url, "worker", "--bus", "memory://", "--tools", "no_such_mod:f"],
    )
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --tools: ")
    assert "no_such_mod" in result.stderr


def test_events_refuses_a_session_timeout_for_nats(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    result = runner.invoke(
        app,
        ["--database-url", url, "events", "--bus", "nats://127.0.0.1:1", "--session-timeout", "2"],
    )
    assert result.exit_code == 2
    assert "session_timeout: only Kafka consumer groups have one" in result.stderr


def test_worker_refuses_a_metrics_port_out_of_range(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    result = runner.invoke(
        app,
        ["--database-url", url, "worker", "--bus", "memory://", "--metrics-port", "70000"],
    )
    assert result.exit_code == 2
    assert "--metrics-port must be between 1 and 65535" in result.stderr


def test_events_refuses_a_concurrency_below_one(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    result = runner.invoke(
        app, ["--database-url", url, "events", "--bus", "memory://", "--concurrency", "0"]
    )
    assert result.exit_code == 2
    assert "--concurrency" in result.stderr


@pytest.mark.parametrize(
    ("environment", "long_running", "frozen"),
    [(None, True, True), ("false", True, False), (None, False, False), ("true", False, True)],
)
@pytest.mark.anyio
async def test_long_running_commands_freeze_their_heap_unless_the_environment_says_otherwise(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    environment: str | None,
    long_running: bool,
    frozen: bool,
) -> None:
    # pilothouse events and worker own their process (open_facade's
    # long_running); every other command is as the library: off by default.
    if environment is None:
        monkeypatch.delenv("PILOTHOUSE_FREEZE_HEAP", raising=False)
    else:
        monkeypatch.setenv("PILOTHOUSE_FREEZE_HEAP", environment)
    state = CliState(Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'x.db'}"))
    async with open_facade(state, long_running=long_running) as ph:
        assert ph.settings.freeze_heap is frozen
