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
import sys
import textwrap
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


def readme_cli_commands() -> list[str]:
    """Each ``$ pilothouse`` command of the README's console blocks, in order."""
    return [
        line[2:] for line in README.read_text().splitlines() if line.startswith("$ pilothouse ")
    ]


# About fifteen processes, eight turns on the packaged model: minutes on a loaded machine.
@pytest.mark.timeout(900)
def test_the_readme_cli_commands_run_as_written(tmp_path: Path) -> None:
    """Every ``pilothouse`` command of the README, in its order, in a fresh directory.

    The directory holds the repository's ``examples/`` and nothing else, and
    no ``PILOTHOUSE_*`` variable is set: the commands use the default
    database (``.pilothouse/pilothouse.db``) and the packaged model. ``$UUID``
    is a conversation's id, as the README says. What the README shows a
    command printing is checked where it shows it whole (the bad catalog's
    errors).
    """
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp is not importable: pip install 'pilothouse[local]'")
    (tmp_path / "examples").symlink_to(README.parent / "examples")
    bin_dir = Path(shutil.which("pilothouse") or README.parent / ".venv" / "bin" / "pilothouse")
    env = {name: value for name, value in os.environ.items() if not name.startswith("PILOTHOUSE_")}
    env["PATH"] = f"{bin_dir.parent}{os.pathsep}{env.get('PATH', '')}"
    commands = readme_cli_commands()
    assert len(commands) >= 12, commands
    shown_errors = [
        line
        for line in README.read_text().splitlines()
        if line.startswith("examples/badcat/bad.yaml:")
    ]
    for command in commands:
        if "$UUID" in command:
            listed = subprocess.run(
                ["pilothouse", "conversations", "list", "--json"],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                check=True,
            )
            env["UUID"] = json.loads(listed.stdout)["items"][0]["uuid"]
        done = subprocess.run(
            ["bash", "-c", command],
            cwd=tmp_path,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if "examples/badcat" in command:
            # A catalog with mistakes: exit 2 and exactly the README's lines.
            assert done.returncode == 2, (command, done.stdout, done.stderr)
            assert (done.stdout + done.stderr).strip().splitlines() == shown_errors
            continue
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        if command.endswith("--json"):
            json.loads(done.stdout)
    exported = (tmp_path / "catalog.yaml").read_text()
    assert "COMPETITORS" in exported and "SUMBRAND" in exported

    # Step 4, "From Python", on the catalog and database the commands left.
    script = tmp_path / "step4.py"
    script.write_text(
        "import asyncio\n\nasync def main():\n"
        + textwrap.indent(readme_python_step(), "    ")
        + "\n\nasyncio.run(main())\n",
        encoding="utf-8",
    )
    ran = subprocess.run(
        [sys.executable, str(script)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    printed = ran.stdout.splitlines()
    assert printed[0].startswith("CO [{'name': 'Globex'"), printed
    assert "TurnFinished" in printed, printed
    # The inline agent's turn ends completed, or waiting on a question it asked.
    assert printed[-1][:3] in ("CO ", "WA "), printed


def readme_python_step() -> str:
    """The README's "From Python" block, as written."""
    text = README.read_text()
    start = text.index("```python", text.index("### 4. From Python")) + len("```python\n")
    return text[start : text.index("```", start)]
