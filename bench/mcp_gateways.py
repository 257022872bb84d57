"""MCP gateways side by side: what each does to a tools/call, and a few protocol behaviours.

One backend MCP server (``bench/mcp_backend.py``: the official SDK's
``MCPServer`` with one tool, ``add``) on loopback, and in front of it, each
in a process of its own on loopback:

- ``direct``: no gateway, the backend itself (the floor);
- ``pilothouse``: ``pilothouse serve`` (SQLite), the backend declared as an
  MCP client and its ``add`` as a catalog tool, called as ``tool_add`` at
  ``/mcp`` with an API key: every call is a governed, audited conversation;
- ``fastmcp``: FastMCP's proxy (``fastmcp.server.create_proxy``) served over
  streamable HTTP, default settings;
- ``contextforge``: IBM's ContextForge gateway (``mcpgateway``, SQLite, a
  JWT), the backend registered as a gateway, called at ``/mcp/``.

A gateway whose package is missing is skipped with the reason (FastMCP and
ContextForge run from the interpreters given by ``--fastmcp-python`` and
``--contextforge-python``; each may be its own virtual environment:
``python -m venv /tmp/fmcp && /tmp/fmcp/bin/pip install fastmcp``, and
likewise ``mcp-contextforge-gateway``). Kong's MCP proxy is not measured:
it is a plugin of Kong Gateway, which none of the registries this machine
reaches carries.

Per gateway, with the official ``mcp`` client from this interpreter:

- **features**, each tried and recorded as the answer seen: a session
  (handshake protocol) lists and calls the tool; a 2026-07-28 stateless
  client does; ``resources/list`` is answered; a request without a
  credential; a body that is not a JSON-RPC request; a 5 MiB call;
- **the figure**: ``--calls`` sequential ``tools/call`` of ``add`` in one
  session after 10 warm-up calls, the client's wall time per call (median,
  p95) and the CPU time the gateway's process (with its children) spent
  per call, from psutil, the backend's own CPU not counted.

Writes ``bench/results/mcp-gateways.md`` and ``mcp-gateways.json``. Run:
``python bench/mcp_gateways.py [--calls 60] [--fastmcp-python PATH]
[--contextforge-python PATH]`` (about two minutes, most of it ContextForge's
first start on a fresh database).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx
import httpx2
import psutil
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
WARM_UP = 10
"""Calls before the measured ones (sessions opened, code paths warm)."""
PILOTHOUSE = str(Path(sys.executable).with_name("pilothouse"))

FASTMCP_PROXY = """
import sys
from fastmcp.server import create_proxy
proxy = create_proxy(sys.argv[1], name="proxy")
proxy.run(transport="http", host="127.0.0.1", port=int(sys.argv[2]), log_level="WARNING",
          show_banner=False)
"""

CONTEXTFORGE_ENV = {
    "JWT_SECRET_KEY": "bench-jwt-secret-key-0123456789abcdef0123456789",
    "AUTH_ENCRYPTION_SECRET": "bench-enc-secret-key-0123456789abcdef01234567",
    "PLATFORM_ADMIN_EMAIL": "admin@example.com",
    "PLATFORM_ADMIN_PASSWORD": "Bench-Passw0rd-123!",
    "BASIC_AUTH_PASSWORD": "Bench-Passw0rd-123!",
    "SSRF_ALLOW_LOCALHOST": "true",
    "SSRF_ALLOW_PRIVATE_NETWORKS": "true",
    "DEV_MODE": "true",
    "ENVIRONMENT": "development",
    "MCPGATEWAY_UI_ENABLED": "false",
    "MCPGATEWAY_ADMIN_API_ENABLED": "true",
    "LOG_LEVEL": "WARNING",
    "CACHE_TYPE": "none",
    "REDIS_URL": "",
    "PLUGINS_ENABLED": "false",
    # Its default MCP rate limit (100 a minute per user) would refuse the
    # measured calls (-32603 after the 97th); lifted, like pilothouse's own.
    "RATE_LIMIT_MEDIUM_RPM": "1000000",
    "RATE_LIMIT_MEDIUM_BURST": "1000000",
}

CATALOG = """
mcp_clients:
  - name: backend
    transport: streamable-http
    url: {url}
tools:
  - code: ADD
    name: add
    kind: mcp
    implementation: "backend:add"
    description: Add two numbers.
"""


@dataclass
class Target:
    """One gateway in front of the backend, as the client reaches it."""

    name: str
    url: str
    tool: str
    headers: dict[str, str] = field(default_factory=dict[str, str])
    pid: int = 0


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_until(check: Any, what: str, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while True:
        try:
            if check():
                return
        except (httpx.HTTPError, OSError):
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not start in {seconds:g} s")
        time.sleep(0.3)


@contextlib.contextmanager
def process(args: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[int]:
    """Run a server process for the block; its pid."""
    with log.open("w") as out:
        child = subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        try:
            yield child.pid
        finally:
            child.terminate()
            try:
                child.wait(timeout=20)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _answers(url: str) -> bool:
    return httpx.get(url, timeout=2).status_code < 500


def has_module(python: str, module: str) -> bool:
    found = subprocess.run(
        [python, "-c", f"import {module}"], capture_output=True, timeout=120, check=False
    )
    return found.returncode == 0


def version(python: str, distribution: str) -> str:
    """The installed version of ``distribution`` as ``python`` sees it."""
    return subprocess.run(
        [python, "-c", f"import importlib.metadata as m; print(m.version({distribution!r}))"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.strip()


def run(args: list[str], env: dict[str, str] | None = None) -> str:
    done = subprocess.run(
        args,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, **(env or {})},
    )
    if done.returncode != 0:
        raise RuntimeError(f"{args[:4]} failed: {done.stderr[-2000:]}")
    return done.stdout


@contextlib.contextmanager
def pilothouse(folder: Path, backend: str) -> Iterator[Target]:
    database = f"sqlite+aiosqlite:///{folder / 'ph.db'}"
    catalog = folder / "mcp.yaml"
    catalog.write_text(CATALOG.format(url=backend))
    env = {
        "PILOTHOUSE_EGRESS_ALLOW": "127.0.0.1",
        "PILOTHOUSE_SECRETS_FILE": "",
        # Its default per-key rate limit (600 a minute) is lifted, as ContextForge's is.
        "PILOTHOUSE_SERVER_RATE_LIMIT_PER_MINUTE": "1000000",
    }
    run([PILOTHOUSE, "--database-url", database, "db", "upgrade"], env)
    run([PILOTHOUSE, "--database-url", database, "catalog", "import", str(catalog)], env)
    created = run([PILOTHOUSE, "--database-url", database, "keys", "create", "--name", "b"], env)
    key = next(word for word in created.split() if word.startswith("ph_"))
    port = free_port()
    args = [PILOTHOUSE, "--database-url", database, "serve", "--port", str(port)]
    with process([*args, "--log-level", "warning"], folder / "ph.log", env) as pid:
        wait_until(lambda: _answers(f"http://127.0.0.1:{port}/healthz"), "pilothouse serve")
        yield Target(
            "pilothouse",
            f"http://127.0.0.1:{port}/mcp",
            "tool_add",
            {"Authorization": f"Bearer {key}"},
            pid,
        )


@contextlib.contextmanager
def fastmcp(folder: Path, backend: str, python: str) -> Iterator[Target]:
    script = folder / "proxy.py"
    script.write_text(FASTMCP_PROXY)
    port = free_port()
    with process([python, str(script), backend, str(port)], folder / "fastmcp.log") as pid:
        wait_until(lambda: _answers(f"http://127.0.0.1:{port}/mcp"), "the FastMCP proxy")
        yield Target("fastmcp", f"http://127.0.0.1:{port}/mcp", "add", pid=pid)


@contextlib.contextmanager
def contextforge(folder: Path, backend: str, python: str) -> Iterator[Target]:
    env = {**CONTEXTFORGE_ENV, "DATABASE_URL": f"sqlite:///{folder / 'cf.db'}"}
    port = free_port()
    gateway = str(Path(python).with_name("mcpgateway"))
    args = [gateway, "--host", "127.0.0.1", "--port", str(port)]
    with process(args, folder / "contextforge.log", env) as pid:
        base = f"http://127.0.0.1:{port}"
        wait_until(lambda: httpx.get(f"{base}/health", timeout=2).status_code == 200, "mcpgateway")
        token = run(
            [python, "-m", "mcpgateway.utils.create_jwt_token", "--username"]
            + ["admin@example.com", "--exp", "60", "--secret", env["JWT_SECRET_KEY"]],
            env,
        ).split()[-1]
        headers = {"Authorization": f"Bearer {token}"}
        registered = httpx.post(
            f"{base}/gateways",
            json={"name": "backend", "url": backend, "transport": "STREAMABLEHTTP"},
            headers=headers,
            timeout=60,
        )
        registered.raise_for_status()
        yield Target("contextforge", f"{base}/mcp/", "backend-add", headers, pid)


@contextlib.asynccontextmanager
async def session(target: Target, mode: str = "legacy") -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(headers=target.headers, timeout=60) as http:
        async with Client(streamable_http_client(target.url, http_client=http), mode=mode) as c:
            yield c


def _cpu(pid: int) -> float:
    parent = psutil.Process(pid)
    total = 0.0
    for proc in [parent, *parent.children(recursive=True)]:
        with contextlib.suppress(psutil.NoSuchProcess):
            times = proc.cpu_times()
            total += times.user + times.system
    return total


def _backend_requests(backend: str) -> int:
    counted = httpx.get(backend.removesuffix("/mcp") + "/requests", timeout=10)
    return int(counted.json()["requests"])


async def measure(target: Target, calls: int, backend: str) -> dict[str, float]:
    async with session(target) as client:
        for _ in range(WARM_UP):
            await client.call_tool(target.tool, {"a": 2, "b": 3})
        walls: list[float] = []
        sent = _backend_requests(backend)
        before = _cpu(target.pid)
        for i in range(calls):
            started = time.perf_counter()
            result = await client.call_tool(target.tool, {"a": i, "b": 1})
            walls.append(time.perf_counter() - started)
            if result.is_error:
                raise RuntimeError(f"{target.name}: {result.content}")
        spent = _cpu(target.pid) - before
        sent = _backend_requests(backend) - sent
    walls.sort()
    return {
        "median_ms": statistics.median(walls) * 1000,
        "p95_ms": walls[int(len(walls) * 0.95) - 1] * 1000,
        "cpu_ms_per_call": spent / calls * 1000,
        "backend_requests_per_call": sent / calls,
    }


async def _raw(
    target: Target,
    body: bytes,
    *,
    credential: bool = True,
    extra: dict[str, str] | None = None,
    words: bool = False,
) -> str:
    headers = {
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        **(target.headers if credential else {}),
        **(extra or {}),
    }
    async with httpx2.AsyncClient(timeout=60) as http:
        try:
            response = await http.post(target.url, content=body, headers=headers)
        except httpx2.HTTPError as exc:
            return f"no answer ({type(exc).__name__})"
    code = ""
    with contextlib.suppress(ValueError):
        text = response.text
        if text.startswith("event:") or "\ndata:" in text or text.startswith("data:"):
            text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
        error = json.loads(text).get("error")
        if isinstance(error, dict):
            code = f" {error.get('code')}"
    said = f" {response.text[:120]!r}" if words else ""
    return f"{response.status_code}{code}{said}"


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "bench", "version": "1"},
    },
}


def _leaf(exc: BaseException) -> str:
    """The innermost error of an exception group, with its JSON-RPC code when it has one."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    code = getattr(exc, "code", None)
    return f"{code} {exc}"[:90] if code is not None else f"{type(exc).__name__}: {exc}"[:90]


async def features(target: Target) -> dict[str, str]:
    found: dict[str, str] = {}
    for label, mode in (("session", "legacy"), ("stateless", "2026-07-28")):
        try:
            async with session(target, mode) as client:
                names = [t.name for t in (await client.list_tools()).tools]
                result = await client.call_tool(target.tool, {"a": 2, "b": 3})
            found[label] = "yes" if target.tool in names and not result.is_error else "no"
        except Exception as exc:  # recorded: what the client saw is the finding
            found[label] = f"no ({_leaf(exc)})"
    if found["stateless"] != "yes":
        # What the server said to a 2026-07-28 request, in its own words.
        modern = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/list",
            "params": {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}},
        }
        found["stateless"] += "; raw: " + await _raw(
            target,
            json.dumps(modern).encode(),
            extra={"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
            words=True,
        )
    try:
        async with session(target) as client:
            listed = await client.list_resources()
        found["resources"] = f"answered ({len(listed.resources)} resources)"
    except Exception as exc:  # recorded, as above
        found["resources"] = f"error ({_leaf(exc)})"
    found["no_credential"] = await _raw(target, json.dumps(INITIALIZE).encode(), credential=False)
    found["bad_envelope"] = await _raw(target, b'{"jsonrpc": "2.0", "id": 1, "method": 5}')
    big = {**INITIALIZE, "params": {**INITIALIZE["params"], "pad": "x" * (5 * 1024 * 1024)}}
    found["five_mib"] = await _raw(target, json.dumps(big).encode())
    return found


def write(results: dict[str, Any], skipped: dict[str, str], calls: int) -> None:
    RESULTS.mkdir(exist_ok=True)
    data = {"calls": calls, "machine": platform.machine(), "results": results, "skipped": skipped}
    (RESULTS / "mcp-gateways.json").write_text(json.dumps(data, indent=2) + "\n")
    lines = [
        "## MCP gateways: one tools/call through each, and what each answers",
        "",
        f"Method: `bench/mcp_gateways.py`, one backend MCP server (the official SDK's "
        f"`MCPServer`, tool `add`) on loopback behind each gateway in its own process; "
        f"the official `mcp` client in one session, {WARM_UP} warm-up calls, then {calls} "
        "sequential `tools/call`. Wall time per call at the client; CPU time of the "
        "gateway's process (and its children) per call, the backend's not counted. "
        f"Machine: {platform.machine()}, Python {platform.python_version()}, "
        f"{os.cpu_count()} cores shared with other work.",
        "",
        "| gateway | median (ms) | p95 (ms) | gateway CPU per call (ms) "
        "| HTTP requests to the backend per call |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, row in results.items():
        m = row["measure"]
        lines.append(
            f"| {name} ({row['version']}) | {m['median_ms']:.2f} | {m['p95_ms']:.2f} "
            f"| {m['cpu_ms_per_call']:.2f} "
            f"| {m['backend_requests_per_call']:.2f} |"
        )
    lines += [
        "",
        "What each answered (tried, not read from documentation; default settings as "
        "described in the script):",
        "",
        "| gateway | session lists and calls | 2026-07-28 stateless client | resources/list "
        "| no credential | method not a string | 5 MiB body |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, row in results.items():
        f = {k: str(v).replace("|", "\\|") for k, v in row["features"].items()}
        lines.append(
            f"| {name} | {f['session']} | {f['stateless']} | {f['resources']} | "
            f"{f['no_credential']} | {f['bad_envelope']} | {f['five_mib']} |"
        )
    for name, reason in skipped.items():
        lines.append(f"\nNot measured: {name}: {reason}.")
    (RESULTS / "mcp-gateways.md").write_text("\n".join(lines) + "\n")


async def bench(args: argparse.Namespace) -> None:
    results: dict[str, Any] = {}
    skipped: dict[str, str] = {
        "kong": "Kong's MCP proxy is a plugin of Kong Gateway, which none of the registries "
        "this machine reaches carries (PyPI and npm hold only clients and UI components of "
        "it, Debian nothing)"
    }
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        port = free_port()
        backend_args = [sys.executable, str(HERE / "mcp_backend.py"), str(port)]
        with process(backend_args, folder / "backend.log") as backend_pid:
            backend = f"http://127.0.0.1:{port}/mcp"
            wait_until(lambda: _answers(backend), "the backend")
            versions = {"direct": f"mcp {version(sys.executable, 'mcp')}"}
            versions["pilothouse"] = f"pilothouse {version(sys.executable, 'pilothouse')}"
            gateways: list[tuple[str, Any]] = [
                (
                    "direct",
                    contextlib.nullcontext(Target("direct", backend, "add", pid=backend_pid)),
                ),
                ("pilothouse", pilothouse(folder, backend)),
            ]
            if has_module(args.fastmcp_python, "fastmcp"):
                gateways.append(("fastmcp", fastmcp(folder, backend, args.fastmcp_python)))
                versions["fastmcp"] = f"fastmcp {version(args.fastmcp_python, 'fastmcp')}"
            else:
                skipped["fastmcp"] = f"fastmcp is not importable by {args.fastmcp_python}"
            if has_module(args.contextforge_python, "mcpgateway"):
                gateways.append(
                    ("contextforge", contextforge(folder, backend, args.contextforge_python))
                )
                versions["contextforge"] = "mcp-contextforge-gateway " + version(
                    args.contextforge_python, "mcp-contextforge-gateway"
                )
            else:
                skipped["contextforge"] = (
                    f"mcpgateway is not importable by {args.contextforge_python}"
                )
            for name, opened in gateways:
                with opened as target:
                    print(f"{name}: measuring", flush=True)
                    measured = await measure(target, args.calls, backend)
                    results[name] = {
                        "version": versions[name],
                        "measure": measured,
                        "features": await features(target),
                    }
                    print(f"{name}: {results[name]}", flush=True)
    write(results, skipped, args.calls)


def main() -> None:
    parser = argparse.ArgumentParser(description="MCP gateways side by side on loopback.")
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--fastmcp-python", default=sys.executable)
    parser.add_argument("--contextforge-python", default=sys.executable)
    anyio.run(bench, parser.parse_args())


if __name__ == "__main__":
    main()
