"""`pilothouse serve` for real: a subprocess on loopback, the packaged local model.

The example catalog is imported and a key created with the CLI, then the
service is started as ``pilothouse serve`` on a free loopback port. A
message is streamed as Server-Sent Events with httpx while SmolLM2 answers,
and SIGTERM must end the process with exit code 0.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from ports import free_port

pytestmark = pytest.mark.real

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "catalog"
# The console script next to this interpreter (the package has no __main__).
CLI = [str(Path(sys.executable).with_name("pilothouse"))]


def _cli(database_url: str, *args: str) -> str:
    command = [*CLI, "--database-url", database_url, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, subprocess.Popen[bytes]]]:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp is not importable: pip install 'pilothouse[local]'")
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'live.db'}"
    _cli(database_url, "catalog", "import", str(EXAMPLES))
    key = _cli(database_url, "keys", "create", "--tenant", "default", "--name", "live").strip()
    port = free_port()
    log = (tmp_path / "serve.log").open("wb")
    process = subprocess.Popen(
        [*CLI, "--database-url", database_url, "serve", "--port", str(port), "--grace", "5"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail((tmp_path / "serve.log").read_text(errors="replace"))
        time.sleep(0.2)
    try:
        yield base, key, process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        log.close()


def test_sse_stream_from_the_local_model_then_sigterm_exits_0(
    served: tuple[str, str, subprocess.Popen[bytes]],
) -> None:
    base, key, process = served
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=base, headers=headers, timeout=180) as http:
        started = http.post("/v1/conversations", json={"agent": "WRITER", "action": "SUMBRAND"})
        assert started.status_code == 201, started.text
        uuid = started.json()["uuid"]
        events: list[str] = []
        with http.stream(
            "POST",
            f"/v1/conversations/{uuid}/messages",
            params={"stream": "true"},
            json={
                "text": "Summarize the brand document.",
                "inputData": {"document": "Acme builds small, quiet electric boats."},
            },
        ) as response:
            assert response.status_code == 200
            for line in response.iter_lines():
                if line.startswith("event: "):
                    events.append(line.removeprefix("event: "))
        assert events.count("delta") > 1, events
        assert events[-1] == "finished"
        transcript = http.get(f"/v1/conversations/{uuid}").json()
        assert transcript["status"] == "CO"
        assert (
            "pilothouse_turns_total" in http.get("/metrics").text  # anonymous on a loopback bind
        )
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=30) == 0
