"""A real ``pilothouse serve`` process for tests: example catalog, a key, a free port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import anyio
import httpx
from ports import free_port

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "examples" / "catalog"
# The console script installed beside this interpreter (the venv's own).
PILOTHOUSE = str(Path(sys.executable).with_name("pilothouse"))


@dataclass(frozen=True)
class LiveServer:
    """A running ``pilothouse serve``: where its ``/v1`` is and a key for it."""

    base_url: str
    key: str
    database_url: str = ""


def cli(database_url: str, *args: str) -> str:
    """Run the CLI on ``database_url``; its standard output (fails the test on an error)."""
    done = subprocess.run(
        [PILOTHOUSE, "--database-url", database_url, *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@contextmanager
def live_serve(folder: Path, extra_catalog: str, *, admin: bool = False) -> Iterator[LiveServer]:
    """Serve ``examples/catalog`` plus ``extra_catalog`` from a fresh SQLite file.

    ``admin`` gives the key the admin scope (catalog writes).
    """
    database_url = f"sqlite+aiosqlite:///{folder / 'live.db'}"
    key = prepare_database(database_url, folder, extra_catalog, admin=admin)
    port = free_port()
    log_path = folder / "serve.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            [
                PILOTHOUSE,
                "--database-url",
                database_url,
                "serve",
                "--port",
                str(port),
                "--grace",
                "5",
                "--log-level",
                "warning",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            # The test upstreams are on loopback: the operator allows them
            # (the service checks catalog URLs at every call).
            env={
                **os.environ,
                "PILOTHOUSE_SECRETS_FILE": "",
                "PILOTHOUSE_EGRESS_ALLOW": os.environ.get("PILOTHOUSE_EGRESS_ALLOW", "127.0.0.1"),
            },
        )
        base_url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                assert process.poll() is None, log_path.read_text()
                try:
                    if httpx.get(f"{base_url}/healthz", timeout=1).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "pilothouse serve did not start in 60 s"
                time.sleep(0.2)
            yield LiveServer(base_url=f"{base_url}/v1", key=key, database_url=database_url)
        finally:
            process.terminate()
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def prepare_database(
    database_url: str, folder: Path, extra_catalog: str, *, admin: bool = False
) -> str:
    """Import ``examples/catalog`` plus ``extra_catalog`` into ``database_url``; a new key.

    Done in this process through the facade (what ``catalog import`` and
    ``keys create`` call): the set-up is not what these tests are about,
    and two CLI processes cost seconds of start-up per server (the CLI's
    own tests run it).
    """
    extra = folder / "extra.yaml"
    extra.write_text(extra_catalog)

    async def prepare() -> str:
        settings = Settings(database_url=database_url, secrets_file=None)
        async with Pilothouse(settings, tenant="default") as ph:  # migrates first
            await ph.catalog.import_files([CATALOG, extra])
            key, _ = await ph.keys.create(name="live", admin=admin)
            return key

    return anyio.run(prepare)


@dataclass
class ServeProcess:
    """A ``pilothouse serve`` process the test may kill (-9) and start again."""

    database_url: str
    log_path: Path
    port: int
    workers: int = 1
    env: dict[str, str] | None = None
    grace: float = 5
    """``serve --grace``: seconds a SIGTERM waits for running turns before stopping them."""
    process: subprocess.Popen[bytes] | None = None

    @property
    def root(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start serving; return once ``/healthz`` answers (every worker has started)."""
        with self.log_path.open("a") as log:
            self.process = subprocess.Popen(
                [
                    PILOTHOUSE,
                    "--database-url",
                    self.database_url,
                    "serve",
                    "--port",
                    str(self.port),
                    "--workers",
                    str(self.workers),
                    "--grace",
                    str(self.grace),
                    "--log-level",
                    "warning",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PILOTHOUSE_SECRETS_FILE": "", **(self.env or {})},
                # Its own process group: kill -9 reaches the workers too.
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while True:
            assert self.process.poll() is None, self.log_path.read_text()
            try:
                if httpx.get(f"{self.root}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "pilothouse serve did not start in 60 s"
            time.sleep(0.2)

    def kill9(self) -> None:
        """SIGKILL the server and its workers: no shutdown code runs."""
        assert self.process is not None
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def terminate(self) -> int:
        """SIGTERM (a graceful stop); its exit code."""
        assert self.process is not None
        self.process.terminate()
        try:
            return self.process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            raise

    def stop(self) -> None:
        """Stop it if it runs (test clean-up)."""
        if self.process is not None and self.process.poll() is None:
            try:
                self.terminate()
            except subprocess.TimeoutExpired:
                pass
