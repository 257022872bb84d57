"""Real MCP servers for the MCP client tests, imported by test_mcp_servers.py.

``@modelcontextprotocol/server-everything`` is installed from npm once into
its own prefix under ``tests/real/.node/`` (about 10 s, then cached across
sessions; see npm_packages.py); its HTTP
transports are started on a free loopback port per test. Tests are skipped,
with the reason printed, only when node or npm is missing.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from npm_packages import NpmUnavailable, node_executable, npm_package, skip_without
from ports import free_port

EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"


@pytest.fixture(scope="session")
def node() -> str:
    """The node executable."""
    try:
        return node_executable()
    except NpmUnavailable as missing:
        skip_without(missing, "the MCP server-everything tests")


@pytest.fixture(scope="session")
def everything_js(node: str) -> Path:
    """server-everything's entry point, installed from npm on first use."""
    try:
        return npm_package(EVERYTHING, "dist/index.js")
    except NpmUnavailable as missing:
        skip_without(missing, "the MCP server-everything tests")


def _wait_for_port(
    port: int, process: subprocess.Popen[bytes], log: Path, timeout: float = 15.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            said = log.read_text(errors="replace").strip()[-1500:]
            raise RuntimeError(f"server-everything exited with {process.returncode}: {said}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"server-everything did not listen on {port} within {timeout} s")


class HttpServer:
    """server-everything serving one HTTP transport on a loopback port."""

    def __init__(self, node: str, script: Path, mode: str, log: Path) -> None:
        self.port = free_port()
        path = "/sse" if mode == "sse" else "/mcp"
        self.url = f"http://127.0.0.1:{self.port}{path}"
        # Its error output goes to a file so that a failed start says why.
        with log.open("wb") as sink:
            self.process = subprocess.Popen(
                [node, str(script), mode],
                env={"PATH": os.environ.get("PATH", ""), "PORT": str(self.port)},
                stdout=subprocess.DEVNULL,
                stderr=sink,
            )
        _wait_for_port(self.port, self.process, log)

    def stop(self) -> None:
        """Stop the server (the test's 'server exits')."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@pytest.fixture
def everything_http(
    node: str, everything_js: Path, request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[HttpServer]:
    """server-everything over the transport named by the test's parameter."""
    server = HttpServer(node, everything_js, str(request.param), tmp_path / "everything.log")
    try:
        yield server
    finally:
        server.stop()


def child_pids(marker: str) -> list[int]:
    """Our child processes whose command line contains ``marker``."""
    pids: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        # The parent pid is the 2nd field after the parenthesized command name.
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid == os.getpid() and marker in cmdline:
            pids.append(int(entry.name))
    return pids
