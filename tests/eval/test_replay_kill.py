"""A replay killed with SIGKILL mid-run resumes without running its finished cases again.

``pilothouse replay --concurrency 2`` runs in a real process against a model
server on loopback (an OpenAI-compatible stand-in that answers slowly and
notes every request). The process is killed once a few cases are written;
the same command again runs only the cases the run lacks.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import anyio
import pytest

from database_templates import SqliteTemplates
from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder

CASES = 8


class _Upstream:
    """A chat-completions server that takes 0.5 s per answer and notes each request."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.lock = threading.Lock()
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                del format, args  # quiet: the test reads self.asked

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                question = str(body["messages"][-1]["content"])
                with upstream.lock:
                    upstream.asked.append(question)
                time.sleep(0.5)
                answer = f"answer to {question}"
                if body.get("stream"):
                    self._stream(answer)
                    return
                data = json.dumps(
                    {
                        "id": "c1",
                        "object": "chat.completion",
                        "created": 0,
                        "model": "slow",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": answer},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
                    }
                ).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _stream(self, answer: str) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                chunks = [
                    {"delta": {"role": "assistant", "content": answer}, "finish_reason": None},
                    {"delta": {}, "finish_reason": "stop"},
                ]
                for chunk in chunks:
                    event = {
                        "id": "c1",
                        "object": "chat.completion.chunk",
                        "created": 0,
                        "model": "slow",
                        "choices": [{"index": 0, **chunk}],
                    }
                    self.wfile.write(f"data: {json.dumps(event)}\n\n".encode())
                usage = {
                    "id": "c1",
                    "object": "chat.completion.chunk",
                    "created": 0,
                    "model": "slow",
                    "choices": [],
                    "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
                }
                self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def taken(self) -> list[str]:
        with self.lock:
            return list(self.asked)


@pytest.fixture
def upstream() -> Iterator[_Upstream]:
    server = _Upstream()
    thread = threading.Thread(target=server.server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server
    finally:
        server.server.shutdown()
        server.server.server_close()


def _prepare(database_url: str, upstream_url: str) -> dict[int, str]:
    """Write the catalog and the dataset; return each case's input by sequence."""

    async def body() -> dict[int, str]:
        settings = Settings(database_url=database_url, secrets_file=None)
        async with Pilothouse(settings) as ph:
            await (
                CatalogBuilder()
                .provider("UP", kind="openai-compatible", base_url=upstream_url)
                .model("SLOW", provider="UP", model_name="slow", input_price=1, output_price=1)
                .action("SAY", prompt="Answer.", model="SLOW", ask_user=False)
                .import_into(ph)
            )
            await ph.evaluation.import_dataset(
                "many", [{"action": "SAY", "input_text": f"case {i}"} for i in range(CASES)]
            )
            return {c.sequence: c.input_text for c in await ph.evaluation.cases("many")}

    return anyio.run(body)


def _results(path: Path) -> dict[int, str]:
    """The run's written cases: sequence to conversation (read as another process would)."""
    with sqlite3.connect(path) as connection:
        rows = connection.execute(
            "select r.case_sequence, r.conversation_uuid from replay_result r "
            "join replay_run n on n.id = r.run_id where n.name = 'killed'"
        ).fetchall()
    return {int(sequence): str(uuid) for sequence, uuid in rows}


def test_a_killed_replay_resumes_without_running_finished_cases(
    tmp_path: Path, sqlite_templates: SqliteTemplates, upstream: _Upstream
) -> None:
    path = tmp_path / "replay.db"
    database_url = sqlite_templates.fresh(path)
    inputs = _prepare(database_url, upstream.url)
    command = [
        str(Path(sys.executable).with_name("pilothouse")),
        "--database-url",
        database_url,
        "replay",
        "many",
        "--run",
        "killed",
        "--concurrency",
        "2",
    ]
    env = {**os.environ, "PILOTHOUSE_EGRESS_ALLOW": "127.0.0.1"}
    log = tmp_path / "first.log"
    with log.open("wb") as out:
        first = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 90
        while len(_results(path)) < 3:
            assert first.poll() is None, log.read_text()
            assert time.monotonic() < deadline, "the replay wrote no cases"
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=10)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    assert first.returncode == -signal.SIGKILL
    finished = _results(path)
    # Killed mid-run: some cases were written, not all.
    assert 3 <= len(finished) < CASES
    before = upstream.taken()

    second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stderr
    assert f"killed: {CASES} cases, 0 failed" in second.stdout
    resumed = _results(path)
    # Every case once; the finished ones kept their conversations.
    assert sorted(resumed) == sorted(inputs)
    assert {k: resumed[k] for k in finished} == finished
    # The resumed process asked the model only about cases that had not finished.
    asked_again = upstream.taken()[len(before) :]
    done_inputs = {inputs[sequence] for sequence in finished}
    assert asked_again
    assert not done_inputs & set(asked_again), (done_inputs, asked_again)
    assert len(asked_again) == CASES - len(finished)
