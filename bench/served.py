"""Served contenders: ``pilothouse serve`` and the LiteLLM proxy, called over HTTP.

Each is a server process pinned to the contender's core (``options["sut_pin"]``),
one worker, started by the contender's builder inside its worker process; the
worker itself (the load generator, an ``httpx.AsyncClient``) runs on the load
core beside the mock. Latency is the client's; the CPU a round reports
(``Contender.cpu``) is the server process's own (user + system time of the
process and its descendants, from ``/proc/<pid>/stat``, 10 ms resolution),
read before and after each round. The client's CPU is reported apart.

- ``pilothouse-serve``: ``pilothouse serve`` on the contender's SQLite
  database (benchmark catalog imported by the harness, audit on, the
  default), an API key made with ``pilothouse keys create``, rate limit off,
  log level warning. Requests go to ``/v1/chat/completions`` with model
  ``action:<CODE>`` (see docs/openai-compatible.md); a tool turn is one HTTP
  request, the server runs the tool loop (two upstream requests).
- ``litellm-proxy``: ``litellm --config ... --num_workers 1`` from
  bench/.venv-litellm, no database, no master key, telemetry off, uvicorn
  logs at warning; one model entry per scenario (``openai/<mock model>``,
  retries off). It only relays, so the client runs the tool loop (two HTTP
  requests) like the library contenders do.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from childenv import MOCK_KEY, child_env
from contenders import (
    ACTIONS,
    SYSTEM,
    USER,
    Contender,
    StreamClock,
    model_for,
    run_tool,
    tool_schemas,
)

_TICKS = os.sysconf("SC_CLK_TCK")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _descendants(pid: int) -> list[int]:
    found = [pid]
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            children = (task / "children").read_text().split()
        except OSError:
            continue
        for child in children:
            found.extend(_descendants(int(child)))
    return found


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system, all threads) of ``pid`` and its live descendants."""
    total = 0
    for each in _descendants(pid):
        try:
            stat = Path(f"/proc/{each}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / _TICKS


class Server:
    """A server process: started, waited for, measured, stopped."""

    def __init__(
        self,
        name: str,
        command: list[str],
        env: dict[str, str],
        health: str,
        folder: Path | None = None,
    ) -> None:
        self.name = name
        self.folder = folder
        self.log = tempfile.NamedTemporaryFile(  # closed by stop()
            prefix=f"bench-{name}-", suffix=".log", delete=False
        )
        self.process = subprocess.Popen(
            command, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )
        self.health = health

    async def ready(self, client: Any, timeout: float = 90) -> float:
        """Wait until the health URL answers 200; return the seconds it took."""
        import httpx

        start = time.perf_counter()
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited {self.process.returncode}: {self.tail()}")
            try:
                if (await client.get(self.health, timeout=2)).status_code == 200:
                    return time.perf_counter() - start
            except httpx.TransportError:
                pass
            if time.perf_counter() - start > timeout:
                raise RuntimeError(f"{self.name} not ready in {timeout:.0f} s: {self.tail()}")
            await asyncio.sleep(0.2)

    def cpu(self) -> float:
        """The server's CPU seconds so far."""
        return process_cpu(self.process.pid)

    def tail(self) -> str:
        """The end of the server's log."""
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and remove its log."""
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
        self.log.close()
        Path(self.log.name).unlink(missing_ok=True)
        if self.folder is not None:
            shutil.rmtree(self.folder, ignore_errors=True)


async def _sse_content(response: Any, clock: StreamClock) -> None:
    async for line in response.aiter_lines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        data = json.loads(line[6:])
        if "error" in data:
            raise RuntimeError(f"stream error: {data['error']}")
        choices = data.get("choices") or []
        if choices:
            clock.chunk(choices[0].get("delta", {}).get("content"))


def _check(response: Any) -> dict[str, Any]:
    if response.status_code != 200:
        raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
    return response.json()


async def _client_contender(
    server: Server, base_url: str, key: str, model: str, scenario: str, client_loop: bool
) -> Contender:
    """The load generator's calls against a served /v1/chat/completions."""
    import httpx

    client = httpx.AsyncClient(
        base_url=base_url, headers={"authorization": f"Bearer {key}"}, timeout=120
    )
    try:
        setup = await server.ready(client)
    except BaseException:
        await client.aclose()
        server.stop()
        raise
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]

    async def complete(body_messages: list[dict[str, Any]], tools: Any = None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "messages": body_messages, "max_tokens": 256}
        if tools:
            body["tools"] = tools
        return _check(await client.post("/chat/completions", json=body))

    async def plain() -> dict[str, Any]:
        data = await complete(messages)
        return {"text": data["choices"][0]["message"]["content"]}

    async def tool() -> dict[str, Any]:
        if not client_loop:  # the server runs the tool loop
            data = await complete(messages)
            return {"text": data["choices"][0]["message"]["content"], "requests": 2}
        history = list(messages)
        tools = tool_schemas()
        data = await complete(history, tools)
        message = data["choices"][0]["message"]
        history.append(message)
        for call in message.get("tool_calls") or []:
            result = run_tool(call["function"]["name"], call["function"]["arguments"])
            history.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        data = await complete(history, tools)
        return {"text": data["choices"][0]["message"]["content"], "requests": 2}

    async def stream() -> dict[str, Any]:
        clock = StreamClock()
        body = {"model": model, "messages": messages, "max_tokens": 256, "stream": True}
        async with client.stream("POST", "/chat/completions", json=body) as response:
            if response.status_code != 200:
                await response.aread()
                raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")
            await _sse_content(response, clock)
        return clock.facts()

    async def close() -> None:
        await client.aclose()
        server.stop()

    fn = {"stream": stream, "tool-d0": tool}.get(scenario, plain)
    print(f"{server.name} ready in {setup:.1f} s", file=sys.stderr, flush=True)
    return Contender(fn, close, cpu=server.cpu)


async def _pilothouse_serve(base_url: str, scenario: str, options: dict[str, Any]) -> Contender:
    """``pilothouse serve`` on the harness-prepared SQLite database, one worker."""
    cli = str(Path(sys.executable).with_name("pilothouse"))
    database = options["database_url"]
    port = _free_port()
    bench = options["bench_dir"]
    env = {
        **child_env(**MOCK_KEY),
        "PILOTHOUSE_SERVER_RATE_LIMIT_PER_MINUTE": "0",
        # The operator's benchmark catalog names the mock upstream on loopback,
        # which the service's egress policy refuses unless the operator allows it.
        "PILOTHOUSE_EGRESS_ALLOW": "127.0.0.1",
        "PYTHONPATH": os.pathsep.join(p for p in (bench, os.environ.get("PYTHONPATH")) if p),
    }
    command = [
        *options.get("sut_pin", []),
        cli,
        "--database-url",
        database,
        "--tenant",
        "bench",
        "serve",
        "--port",
        str(port),
        "--workers",
        "1",
        "--grace",
        "1",
        "--log-level",
        "warning",
    ]
    server = Server("pilothouse-serve", command, env, f"http://127.0.0.1:{port}/healthz")
    # The key is made while the server starts: a request looks it up, a start does not.
    keys = await asyncio.create_subprocess_exec(
        *(cli, "--database-url", database, "keys", "create", "--tenant", "bench"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await keys.communicate()
    if keys.returncode != 0:
        server.stop()
        raise RuntimeError(f"pilothouse keys create failed: {err.decode()[-1000:]}")
    return await _client_contender(
        server,
        f"http://127.0.0.1:{port}/v1",
        out.decode().strip().split()[-1],
        f"action:{ACTIONS[scenario]}",
        scenario,
        client_loop=False,
    )


_LOG_CONFIG = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"default": {"class": "logging.StreamHandler", "stream": "ext://sys.stderr"}},
    "loggers": {
        "uvicorn": {"handlers": ["default"], "level": "WARNING"},
        "uvicorn.error": {"level": "WARNING"},
        "uvicorn.access": {"handlers": ["default"], "level": "WARNING", "propagate": False},
    },
}


def litellm_config(base_url: str) -> str:
    """The proxy's config: one model per scenario, relayed to the mock, retries off."""
    models = [model_for(s) for s in ("plain-d0", "plain-d50", "tool-d0", "stream")]
    config = {
        "model_list": [
            {
                "model_name": name,
                "litellm_params": {"model": f"openai/{name}", "api_base": base_url, "api_key": "x"},
            }
            for name in models
        ],
        "litellm_settings": {"num_retries": 0, "telemetry": False},
    }
    return json.dumps(config, indent=1)  # JSON is YAML


async def _litellm_proxy(base_url: str, scenario: str, options: dict[str, Any]) -> Contender:
    """The LiteLLM proxy from bench/.venv-litellm: one worker, no database."""
    default = Path(options["bench_dir"]) / ".venv-litellm" / "bin" / "python"
    litellm = Path(options.get("litellm_python") or default).with_name("litellm")
    if not litellm.exists():
        raise RuntimeError(f"no LiteLLM proxy at {litellm} (pip install 'litellm[proxy]')")
    folder = Path(tempfile.mkdtemp(prefix="bench-litellm-proxy-"))
    (folder / "config.yaml").write_text(litellm_config(base_url))
    (folder / "log.json").write_text(json.dumps(_LOG_CONFIG))
    port = _free_port()
    env = {
        **os.environ,
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",  # no download of the price list
        "LITELLM_LOG": "ERROR",
        "LITELLM_TELEMETRY": "False",
    }
    command = [
        *options.get("sut_pin", []),
        str(litellm),
        "--config",
        str(folder / "config.yaml"),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--num_workers",
        "1",
        "--telemetry",
        "False",
        "--log_config",
        str(folder / "log.json"),
    ]
    health = f"http://127.0.0.1:{port}/health/liveliness"
    server = Server("litellm-proxy", command, env, health, folder)
    return await _client_contender(
        server,
        f"http://127.0.0.1:{port}/v1",
        "x",
        model_for(scenario),
        scenario,
        client_loop=True,
    )


BUILDERS = {"pilothouse-serve": _pilothouse_serve, "litellm-proxy": _litellm_proxy}
