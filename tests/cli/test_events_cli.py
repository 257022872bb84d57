"""`pilothouse worker` and `pilothouse events`: bad input is one line and exit code 2.

The commands' running loops are the package's Worker and EventService,
tested in tests/events and, against tansu and NATS, in tests/real.
"""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from pilothouse.cli import app

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
