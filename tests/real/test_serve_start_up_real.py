"""What ``pilothouse serve`` says as it starts: one log format, and whether script tools run.

``pilothouse serve`` runs as a subprocess. With ``--log-format json`` every
line on its standard error is a JSON object, the start-up's own notes (the
tracing line, the script tools line) and a start-up error included. The
script tools line says whether they can run and, when not, why: here a
``bwrap`` first on ``PATH`` that cannot create the sandbox's namespaces,
which is what bubblewrap does in a container with Docker's default
security settings.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from live_serve import PILOTHOUSE
from ports import free_port

pytestmark = [pytest.mark.real]

# What bubblewrap says where Docker's default seccomp profile refuses it.
REFUSED = (
    "bwrap: No permissions to create new namespace, likely because the kernel does not "
    "allow non-privileged user namespaces."
)


def _blocked_bwrap(folder: Path) -> Path:
    """A folder whose ``bwrap`` is recent (offers --size) but cannot make namespaces."""
    bin_dir = folder / "bin"
    bin_dir.mkdir()
    (folder / "said").write_text(REFUSED + "\n")
    bwrap = bin_dir / "bwrap"
    bwrap.write_text(
        "#!/bin/sh\n"
        'if [ "$1" = --help ]; then echo "usage: bwrap --size BYTES"; exit 0; fi\n'
        f"cat {folder / 'said'} >&2\nexit 1\n"
    )
    bwrap.chmod(0o755)
    return bin_dir


def _serve(
    tmp_path: Path, log_format: str, env: dict[str, str], database_url: str | None = None
) -> tuple[int, str]:
    """Start serve, call it once, stop it; its exit code and standard error."""
    port = free_port()
    database_url = database_url or f"sqlite+aiosqlite:///{tmp_path / 'serve.db'}"
    err_path = tmp_path / f"stderr-{log_format}.log"
    with err_path.open("w") as err, (tmp_path / "stdout.log").open("w") as out:
        process = subprocess.Popen(
            [
                PILOTHOUSE,
                "--database-url",
                database_url,
                "serve",
                "--port",
                str(port),
                "--grace",
                "2",
                "--log-format",
                log_format,
            ],
            stdout=out,
            stderr=err,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
                "PILOTHOUSE_SECRETS_FILE": "",
                **env,
            },
        )
        try:
            deadline = time.monotonic() + 60
            while process.poll() is None:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).is_success:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, err_path.read_text()
                time.sleep(0.2)
        finally:
            if process.poll() is None:
                process.terminate()
            code = process.wait(timeout=60)
    return code, err_path.read_text()


def _json_lines(text: str) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            pytest.fail(f"a line on stderr is not JSON: {line!r}\n\n{text}")
        assert isinstance(entry, dict), line
        entries.append(entry)
    return entries


def test_with_json_logs_every_line_is_json_and_says_why_script_tools_cannot_run(
    tmp_path: Path,
) -> None:
    blocked = _blocked_bwrap(tmp_path)
    env = {
        "PATH": f"{blocked}{os.pathsep}{os.environ['PATH']}",
        # Spans asked for: serve says where they go (nothing listens there).
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{free_port()}",
    }
    code, stderr = _serve(tmp_path, "json", env)
    assert code == 0, stderr
    entries = _json_lines(stderr)
    messages = {e["message"]: e for e in entries}
    tracing = [m for m in messages if m.startswith("tracing: spans of service")]
    assert tracing, stderr
    (refused,) = [m for m in messages if m.startswith("script tools cannot run here:")]
    assert REFUSED in refused
    assert "compose.yaml's security_opt" in refused
    assert messages[refused]["level"] == "WARNING"
    # uvicorn's own lines are in the same stream, in the same format.
    assert any(e["logger"].startswith("uvicorn") for e in entries), stderr


def test_with_json_logs_a_start_up_error_is_a_json_line_too(tmp_path: Path) -> None:
    # A PostgreSQL server that is not there: the start stops on the database check.
    nowhere = f"postgresql+asyncpg://pilothouse@127.0.0.1:{free_port()}/pilothouse"
    code, stderr = _serve(tmp_path, "json", {}, database_url=nowhere)
    assert code == 2, stderr
    entries = _json_lines(stderr)
    assert entries and all(e["level"] == "ERROR" for e in entries), stderr


def test_with_text_logs_serve_says_script_tools_run_in_the_sandbox(tmp_path: Path) -> None:
    import shutil

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    code, stderr = _serve(tmp_path, "text", {})
    assert code == 0, stderr
    assert "script tools: bubblewrap sandbox; processes: " in stderr
