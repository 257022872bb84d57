"""The README's HTTP commands, run as written with the real ``curl`` against ``pilothouse serve``.

The README's ``curl -d '{...}'`` sends its JSON body labelled
``application/x-www-form-urlencoded`` (curl's default for ``-d``); the
service reads it as JSON. The only change made to a command is the
address: the test's server listens on a free port, not on 8000.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from live_serve import LiveServer, live_serve

pytestmark = pytest.mark.real

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_curl_commands() -> list[str]:
    """Each ``$ curl`` command of the README, its continuation lines joined."""
    commands: list[str] = []
    lines = README.read_text().splitlines()
    for index, line in enumerate(lines):
        if not line.startswith("$ curl"):
            continue
        command = line[2:]
        following = index + 1
        while command.endswith("\\"):
            command = command[:-1] + " " + lines[following].strip()
            following += 1
        commands.append(command)
    return commands


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp is not importable: pip install 'pilothouse[local]'")
    with live_serve(tmp_path_factory.mktemp("readme"), "") as server:
        yield server


def run(command: str, server: LiveServer, **env: str) -> str:
    address = server.base_url.removeprefix("http://").removesuffix("/v1")
    done = subprocess.run(
        ["bash", "-c", command.replace("127.0.0.1:8000", address)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        env={**os.environ, "KEY": server.key, **env},
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.skipif(shutil.which("curl") is None, reason="curl is not installed")
def test_the_readme_curl_commands_run_as_written(live_server: LiveServer) -> None:
    start, send = readme_curl_commands()
    assert "Content-Type" not in start + send  # as the README writes them
    conversation = json.loads(run(start, live_server))
    assert "uuid" in conversation, conversation
    stream = run(send, live_server, UUID=conversation["uuid"])
    events = re.findall(r"^event: (\S+)", stream, flags=re.MULTILINE)
    assert events, stream
    assert "error" not in events, stream
    print(f"streamed events: {sorted(set(events))}")
