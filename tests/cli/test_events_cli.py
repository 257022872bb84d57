"""`pilothouse worker` and `pilothouse events`: bad input is one line and exit code 2.

The commands' running loops are the package's Worker and EventService,
tested in tests/events and, against tansu and NATS, in tests/real.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

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


def _capture(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Have EventService and Worker return at once from run(), keeping what they were given."""
    import pilothouse.events as events

    built: list[Any] = []

    class Service(events.EventService):
        async def run(self, *, task_status: Any = None) -> None:
            built.append(self)

    class Runner(events.Worker):
        async def run(self, *, task_status: Any = None) -> None:
            built.append(self)

    monkeypatch.setattr(events, "EventService", Service)
    monkeypatch.setattr(events, "Worker", Runner)
    return built


def test_events_takes_its_pacing_and_bus_options_and_says_them_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = _capture(monkeypatch)
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    result = runner.invoke(
        app,
        [
            "--database-url",
            url,
            "events",
            "--bus",
            "kafka://k1:9092,k2:9092",
            "--action-topic",
            "actions",
            "--concurrency",
            "4",
            "--recover-after",
            "300",
            "--busy-retry",
            "15",
            "--acks",
            "all",
            "--replication-factor",
            "3",
            "--max-deliver",
            "7",
        ],
    )
    assert result.exit_code == 0, result.stderr
    (service,) = built
    assert (service._recover_after, service._busy_retry, service._concurrency) == (300, 15, 4)
    assert service._poison.max_deliver == 7
    assert (service._bus.acks, service._bus.replication_factor) == ("all", 3)
    assert result.stderr.strip() == (
        "pilothouse events: bus kafka, servers k1:9092,k2:9092 (acks all, replication "
        "factor 3); topics: completions agent-events, run_action actions (group pilothouse); "
        "tenant default only; concurrency 4; recover_after 300 s, busy_retry 15 s, "
        "max_deliver 7"
    )


def test_the_options_have_environment_equivalents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = _capture(monkeypatch)
    monkeypatch.setenv("PILOTHOUSE_EVENTS_RECOVER_AFTER", "240")
    monkeypatch.setenv("PILOTHOUSE_EVENTS_BUSY_RETRY", "5")
    monkeypatch.setenv("PILOTHOUSE_EVENTS_ACK_WAIT", "45")
    monkeypatch.setenv("PILOTHOUSE_EVENTS_MAX_DELIVER", "3")
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    result = runner.invoke(
        app, ["--database-url", url, "events", "--bus", "nats://ops:s3cret@nats.internal:4222"]
    )
    assert result.exit_code == 0, result.stderr
    (service,) = built
    assert (service._recover_after, service._busy_retry) == (240, 5)
    assert service._bus._ack_wait == 45
    assert service._poison.max_deliver == 3
    assert "s3cret" not in result.stderr
    assert result.stderr.startswith(
        "pilothouse events: bus nats, servers ***@nats.internal:4222 (ack_wait 45 s); "
    )
    assert "recover_after 240 s, busy_retry 5 s" in result.stderr


def test_worker_takes_the_bus_options_and_says_them_at_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = _capture(monkeypatch)
    monkeypatch.setenv("PILOTHOUSE_KAFKA_ACKS", "1")
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    result = runner.invoke(
        app,
        [
            "--database-url",
            url,
            "worker",
            "--bus",
            "kafka://k1:9092",
            "--replication-factor",
            "3",
            "--attempts",
            "5",
        ],
    )
    assert result.exit_code == 0, result.stderr
    (worker,) = built
    assert (worker._bus.acks, worker._bus.replication_factor, worker.attempts) == ("1", 3, 5)
    assert result.stderr.strip() == (
        "pilothouse worker: bus kafka, servers k1:9092 (acks 1, replication factor 3); "
        "topic agent-commands (group pilothouse-workers), dead letters agent-commands.dlq; "
        "tenant default only; attempts 5, max_deliver 5, timeout 30 s; registered tools: "
        "none, and tenant "
        "default's catalog tools"
    )


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--recover-after", "0"], "recover_after: must be a positive number of seconds"),
        (["--busy-retry", "-1"], "busy_retry: must be a positive number of seconds"),
        (["--acks", "0"], "acks: must be 'all' or '1'"),
        (["--replication-factor", "3"], "replication_factor: only a Kafka bus has one"),
        (["--ack-wait", "5"], "ack_wait: only NATS has one"),
        (["--ack-wait", "0"], "ack_wait: must be a positive number of seconds"),
        (["--session-timeout", "-2"], "session_timeout: must be a positive number of seconds"),
    ],
)
def test_events_refuses_settings_it_cannot_honour(
    tmp_path: Path, args: list[str], says: str
) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    bus = "memory://" if "--replication-factor" in args else "kafka://127.0.0.1:1"
    result = runner.invoke(app, ["--database-url", url, "events", "--bus", bus, *args])
    assert result.exit_code == 2
    assert says in result.stderr
