"""`pilothouse serve`: run the HTTP service with uvicorn.

Settings reach the worker processes through the environment
(``PILOTHOUSE_*`` and ``PILOTHOUSE_SERVER_*``), because uvicorn starts each
worker by importing :func:`pilothouse.server.app_from_environment`; the
command-line options are written there first, so they win.

Shutdown is graceful: on SIGTERM or Ctrl-C uvicorn stops accepting
connections and gives open requests ``--grace`` seconds; turns still
running after that are cancelled and recorded ``TE`` before the process
exits (code 0).
"""

from __future__ import annotations

__all__ = ["serve"]

import io
import logging
import logging.config
import os
import shutil
import signal
import tempfile
from collections.abc import Generator
from contextlib import contextmanager, redirect_stderr
from enum import StrEnum
from pathlib import Path
from types import FrameType
from typing import Annotated, NoReturn

import typer

from pilothouse.cli._context import CliState, fail, open_facade, run, settings_problem


class LogFormat(StrEnum):
    """How the service writes its log lines."""

    TEXT = "text"
    JSON = "json"


def _stopped(_signum: int, _frame: FrameType | None) -> None:
    """Accept the re-raised SIGTERM after a graceful shutdown (exit code 0)."""


_MULTIPROC = "PROMETHEUS_MULTIPROC_DIR"


@contextmanager
def _metrics_across_workers(workers: int, start: _StartUp) -> Generator[None]:
    """One ``/metrics`` for the whole process group: the Prometheus client's multiprocess mode.

    Each worker writes its samples to files in ``PROMETHEUS_MULTIPROC_DIR``
    and a scrape of any worker adds up all of them. An operator's directory
    is used as given; otherwise, with more than one worker, serve makes one
    for this run and removes it at the end. Either way it starts empty: the
    files of an earlier run would be counted again.
    """
    given = os.environ.get(_MULTIPROC)
    if not given and workers == 1:
        yield
        return
    folder = Path(given) if given else Path(tempfile.mkdtemp(prefix="pilothouse-metrics-"))
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.db"):
        stale.unlink()
    # Set before any worker starts: the client picks its mode when imported.
    os.environ[_MULTIPROC] = str(folder)
    start.note(
        f"metrics: the {workers} worker(s) write their samples to {folder}; /metrics adds them up"
    )
    try:
        yield
    finally:
        if not given:
            shutil.rmtree(folder)


class _StartUp:
    """How ``serve`` writes its own lines before uvicorn starts: in the service's log format.

    With ``--log-format json`` every line on standard error is a JSON
    object, the start-up's notes and errors too (through the ``logging``
    configuration uvicorn is given); with ``text`` they are plain lines.
    """

    def __init__(self, log_format: LogFormat, config: dict[str, object]) -> None:
        self.json = log_format is LogFormat.JSON
        self.log = logging.getLogger("pilothouse.serve")
        if self.json:
            logging.config.dictConfig(config)
            # A library's warning is a log line like any other, not plain text.
            logging.captureWarnings(True)

    def note(self, line: str, *, warning: bool = False) -> None:
        """Write one start-up note."""
        if self.json:
            self.log.log(logging.WARNING if warning else logging.INFO, "%s", line)
        else:
            typer.echo(line, err=True)

    def fail(self, message: str) -> NoReturn:
        """Stop the start with exit code 2 and one line naming the problem."""
        if self.json:
            self.log.error("error: %s", message)
            raise typer.Exit(code=2)
        fail(message)

    @contextmanager
    def lines_of(self) -> Generator[None]:
        """Make what the checks inside write to standard error log lines (JSON mode)."""
        if not self.json:
            yield
            return
        caught = io.StringIO()
        failed = True
        try:
            with redirect_stderr(caught):
                yield
            failed = False
        finally:
            level = logging.ERROR if failed else logging.WARNING
            for line in caught.getvalue().splitlines():
                if line.strip():
                    self.log.log(level, "%s", line)


def serve(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option("--host", help="Address to bind; 127.0.0.1 serves this machine only.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port to bind.")] = 8000,
    workers: Annotated[
        int,
        typer.Option(
            "--workers",
            min=1,
            help="Worker processes (rate limits per worker unless PILOTHOUSE_REDIS_URL is set).",
        ),
    ] = 1,
    grace: Annotated[
        float,
        typer.Option("--grace", min=0, help="Seconds running turns get to finish on shutdown."),
    ] = 30.0,
    log_level: Annotated[str, typer.Option("--log-level", help="uvicorn log level.")] = "info",
    log_format: Annotated[
        LogFormat,
        typer.Option(
            "--log-format",
            envvar="PILOTHOUSE_SERVER_LOG_FORMAT",
            help="text: uvicorn's lines; json: one JSON object per line with the request, "
            "conversation and trace ids.",
        ),
    ] = LogFormat.TEXT,
    keep_alive: Annotated[
        float,
        typer.Option(
            "--keep-alive",
            min=1,
            help="Seconds an idle keep-alive connection stays open; keep it above "
            "the clients' and proxies' idle timeouts.",
        ),
    ] = 75.0,
) -> None:
    """Serve the HTTP API (REST, SSE, OpenAI-compatible, JSON-RPC) with uvicorn.

    Spans are exported as the standard ``OTEL_*`` variables say
    (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_SERVICE_NAME``, ...; see
    docs/operations.md); a variable that asks for what cannot be done stops
    the start with an error naming it.
    """
    import uvicorn

    from pilothouse.api import TraceExport, logging_config
    from pilothouse.errors import InvalidFieldError

    state: CliState = ctx.obj
    settings = state.settings
    log_config = logging_config(log_level, "json" if log_format is LogFormat.JSON else "text")
    start = _StartUp(log_format, log_config)
    if not 0 < port < 65536:
        start.fail(f"--port must be between 1 and 65535, not {port}")
    try:
        tracing = TraceExport.from_environment(os.environ)
    except InvalidFieldError as exc:
        start.fail(str(exc))
    if tracing is not None:
        start.note(tracing.describe())
    os.environ["PILOTHOUSE_DATABASE_URL"] = settings.database_url
    os.environ["PILOTHOUSE_TENANT"] = state.effective_tenant
    if settings.secrets_file is not None:
        os.environ["PILOTHOUSE_SECRETS_FILE"] = str(settings.secrets_file)
    os.environ["PILOTHOUSE_SERVER_HOST"] = host
    os.environ["PILOTHOUSE_SERVER_PORT"] = str(port)
    os.environ["PILOTHOUSE_SERVER_SHUTDOWN_GRACE_SECONDS"] = str(grace)
    os.environ["PILOTHOUSE_SERVER_LOG_FORMAT"] = log_format.value
    # The service's processes are pilothouse's own: each freezes its heap after
    # its first turn, unless the environment says otherwise (docs/operations.md).
    os.environ.setdefault("PILOTHOUSE_FREEZE_HEAP", "true")
    # Each worker reads its PILOTHOUSE_SERVER_* settings when it starts: read
    # here first, a bad one stops the start in one line, not in a traceback
    # from every worker.
    from pydantic import ValidationError

    from pilothouse.server import ServerSettings

    try:
        ServerSettings()
    except ValidationError as exc:
        start.fail(
            settings_problem(exc, prefix=str(ServerSettings.model_config.get("env_prefix", "")))
        )

    # The database too (reachable, pilothouse's, migrated): a problem stops the
    # start in one line, not in a traceback from every worker's startup.
    async def check_database() -> tuple[bool, str]:
        async with open_facade(state) as ph:
            # Whether catalog script tools can run here, said once at start
            # rather than found out at a tenant's first script tool call.
            return ph.script_tools_status()

    with start.lines_of():
        can_run, script_tools = run(check_database)
    start.note(script_tools, warning=not can_run)
    # uvicorn re-raises the signal that stopped it once it has shut down
    # gracefully, for the handler that was there before; this one makes a
    # SIGTERM-requested, completed shutdown exit with code 0, as service
    # managers expect, instead of dying by the signal.
    signal.signal(signal.SIGTERM, _stopped)
    with _metrics_across_workers(workers, start):
        uvicorn.run(
            "pilothouse.server:app_from_environment",
            factory=True,
            host=host,
            port=port,
            workers=workers,
            log_level=log_level,
            # uvicorn's own lines (text) unless JSON is asked for; credentials masked in both.
            log_config=log_config,
            # Above the grace: the app stops the turns still running at the grace
            # (recorded TE, answered 503) and needs its requests' connections open
            # to answer them.
            timeout_graceful_shutdown=int(grace) + 10,
            # The service answers its own problem documents; uvicorn's server
            # header adds nothing but a fingerprint.
            server_header=False,
            # uvicorn's default (5 s) equals common clients' pool idle expiry
            # (httpx: 5 s): a request sent on a connection the server is closing
            # at that moment meets a reset. Longer than the clients' expiry, the
            # client always closes first (docs/operations.md).
            timeout_keep_alive=int(keep_alive),
            proxy_headers=False,
        )
