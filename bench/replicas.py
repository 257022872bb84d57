"""Replicas of ``pilothouse serve`` on one PostgreSQL and one Redis: turns/s, latency, connections.

Usage (with bench/.venv; PostgreSQL on 127.0.0.1:5432, Redis on 127.0.0.1:6379)::

    python bench/replicas.py --replicas 1,2,3 --clients 32,128 --seconds 20 --out bench/results

For each replica count, that many ``pilothouse serve --workers 2`` processes
start on one fresh PostgreSQL database and one Redis (a key prefix of the
run's own), with the mock upstream answering after 200 ms (model
``plain-d200``, ``bench/mock_upstream.py``). For each client count, that
many concurrent clients (one ``httpx.AsyncClient`` connection pool in this
process) send one turn after another, each to the next replica in turn
(round robin), as ``POST /v1/chat/completions`` with model ``action:SLOW``
(one governed turn of a new conversation, audited). Nothing is pinned:
replicas, mock, PostgreSQL and the clients share the machine's cores.

Reported per run: turns/s, latency p50/p99 (the client's), errors, the
largest number of PostgreSQL connections to the database seen by polling
``pg_stat_activity`` every 0.25 s, the machine's busy CPU fraction over
the run (``/proc/stat``; other processes on the machine count too) and the
replicas' own CPU per turn. Each worker's PostgreSQL pool is
``--pool-size`` + ``--max-overflow`` (6 + 6 by default: 72 connections for
three replicas of two workers, under a default server's 100; the service's
own defaults, 20 + 40, let one replica of two workers open 120).
Writes ``replicas.json`` and ``replicas.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from childenv import MOCK_KEY, child_env  # noqa: E402
from harness import _machine  # noqa: E402
from served import Server, _free_port  # noqa: E402

PG = "postgresql://postgres@127.0.0.1:5432"
REDIS = "redis://127.0.0.1:6379/0"
WORKERS = 2

CATALOG = """providers:
  - code: MOCK
    name: Mock upstream
    kind: openai-compatible
    base_url: {base_url}
    api_key: "@secrets(BENCH_MOCK_API_KEY)"
models:
  - code: MSLOW
    provider: MOCK
    model_name: plain-d200
    input_price: 0
    output_price: 0
    context_window: 128000
configurations:
  - code: BNCH
    name: Benchmark
    max_tokens: 256
    retry_count: 0
    retry_delay: 0
actions:
  - code: SLOW
    name: A model that answers in 200 ms
    model: MSLOW
    configuration: BNCH
    prompt: You are a concise assistant.
    ask_user: false
"""


def _cpu_times() -> tuple[int, int]:
    """The machine's (busy, total) jiffies so far, from ``/proc/stat``."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])
    return total - idle, total


def _total_cpu(servers: list[Server]) -> float:
    return sum(server.cpu() for server in servers)


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


async def _prepare(database: str, base_url: str, folder: Path) -> str:
    """Create the database, import the catalog, make a key; return the key."""
    import asyncpg

    connection = await asyncpg.connect(f"{PG}/postgres")
    try:
        await connection.execute(f"CREATE DATABASE {database}")
    finally:
        await connection.close()
    from pilothouse.api import Pilothouse
    from pilothouse.settings import Settings

    path = folder / "catalog.yaml"
    path.write_text(CATALOG.format(base_url=base_url))
    url = f"{PG.replace('postgresql://', 'postgresql+asyncpg://')}/{database}"
    async with Pilothouse(Settings(database_url=url, secrets_file=None), tenant="bench") as ph:
        await ph.catalog.import_files([path])
        key, _ = await ph.keys.create(name="bench-replicas")
    return key


async def _connections(database: str, stop: asyncio.Event, seen: list[int]) -> None:
    """Poll ``pg_stat_activity`` for the database's connections until ``stop``."""
    import asyncpg

    connection = await asyncpg.connect(f"{PG}/postgres")
    try:
        while not stop.is_set():
            count = await connection.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", database
            )
            seen.append(int(count))
            try:
                await asyncio.wait_for(stop.wait(), 0.25)
            except TimeoutError:
                pass
    finally:
        await connection.close()


async def _load(
    roots: list[str],
    key: str,
    clients: int,
    seconds: float,
    database: str,
    replica_cpu: Callable[[], float],
) -> dict[str, Any]:
    import httpx

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    latencies: list[float] = []
    errors: list[str] = []
    ring = itertools.cycle(roots)
    body = {
        "model": "action:SLOW",
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 256,
    }
    deadline = 0.0

    async with httpx.AsyncClient(
        headers={"authorization": f"Bearer {key}"}, timeout=120, limits=limits
    ) as http:

        async def client() -> None:
            while time.perf_counter() < deadline:
                root = next(ring)
                start = time.perf_counter()
                try:
                    response = await http.post(f"{root}/v1/chat/completions", json=body)
                    if response.status_code != 200:
                        errors.append(f"HTTP {response.status_code}: {response.text[:200]}")
                        continue
                except httpx.HTTPError as exc:
                    errors.append(f"{type(exc).__name__}: {exc}"[:200])
                    continue
                latencies.append((time.perf_counter() - start) * 1000)

        # A short warm-up: every worker's first turn (its model, its statements).
        deadline = time.perf_counter() + 3
        await asyncio.gather(*(client() for _ in range(min(clients, 8 * len(roots)))))
        stop = asyncio.Event()
        seen: list[int] = []
        poller = asyncio.create_task(_connections(database, stop, seen))
        latencies.clear()
        errors.clear()
        busy0, total0 = _cpu_times()
        cpu0 = replica_cpu()
        wall = time.perf_counter()
        deadline = wall + seconds
        await asyncio.gather(*(client() for _ in range(clients)))
        wall = time.perf_counter() - wall
        cpu = replica_cpu() - cpu0
        busy1, total1 = _cpu_times()
        stop.set()
        await poller
    return {
        "clients": clients,
        "turns": len(latencies),
        "turns_per_s": len(latencies) / wall,
        "p50_ms": statistics.median(latencies) if latencies else None,
        "p99_ms": _percentile(latencies, 99),
        "errors": len(errors),
        "error_samples": errors[:3],
        "pg_connections_max": max(seen) if seen else None,
        "machine_busy": (busy1 - busy0) / (total1 - total0) if total1 > total0 else None,
        "wall_s": wall,
        "replica_cpu_ms_per_turn": cpu / len(latencies) * 1000 if latencies else None,
    }


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    import subprocess

    folder = Path(tempfile.mkdtemp(prefix="bench-replicas-"))
    mock_port = _free_port()
    mock = subprocess.Popen(
        [sys.executable, str(BENCH / "mock_upstream.py"), "--port", str(mock_port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert mock.stdout is not None
    mock.stdout.readline()
    base_url = f"http://127.0.0.1:{mock_port}/v1"
    database = f"bench_replicas_{uuid.uuid4().hex[:10]}"
    os.environ.update(MOCK_KEY)
    key = await _prepare(database, base_url, folder)
    url = f"{PG.replace('postgresql://', 'postgresql+asyncpg://')}/{database}"
    cli = str(Path(sys.executable).with_name("pilothouse"))
    env = child_env(
        **MOCK_KEY,
        PILOTHOUSE_REDIS_URL=REDIS,
        PILOTHOUSE_REDIS_PREFIX=f"bench-replicas-{uuid.uuid4().hex[:8]}:",
        PILOTHOUSE_SERVER_RATE_LIMIT_PER_MINUTE="0",
        PILOTHOUSE_EGRESS_ALLOW="127.0.0.1",
        PILOTHOUSE_DATABASE_POOL_SIZE=str(args.pool_size),
        PILOTHOUSE_DATABASE_MAX_OVERFLOW=str(args.max_overflow),
    )
    runs: list[dict[str, Any]] = []
    try:
        import httpx

        for count in args.replicas:
            servers: list[Server] = []
            try:
                for index in range(count):
                    port = _free_port()
                    command = [
                        cli,
                        "--database-url",
                        url,
                        "--tenant",
                        "bench",
                        "serve",
                        "--port",
                        str(port),
                        "--workers",
                        str(WORKERS),
                        "--grace",
                        "1",
                        "--log-level",
                        "warning",
                    ]
                    servers.append(
                        Server(f"replica-{index}", command, env, f"http://127.0.0.1:{port}/healthz")
                    )
                async with httpx.AsyncClient() as probe:
                    for server in servers:
                        await server.ready(probe, timeout=180)
                roots = [server.health.removesuffix("/healthz") for server in servers]
                for clients in args.clients:
                    result = await _load(
                        roots,
                        key,
                        clients,
                        args.seconds,
                        database,
                        partial(_total_cpu, list(servers)),
                    )
                    result["replicas"] = count
                    if result["errors"]:
                        result["server_log_tail"] = [s.tail()[-1500:] for s in servers]
                    print(json.dumps(result), flush=True)
                    runs.append(result)
            finally:
                for server in servers:
                    server.stop()
    finally:
        mock.terminate()
        mock.wait(10)
    return {
        "machine": {**_machine(), "pinned": False, "load_average_at_end": os.getloadavg()},
        "method": {
            "workers_per_replica": WORKERS,
            "seconds_per_run": args.seconds,
            "mock_latency_ms": 200,
            "database_pool_size": args.pool_size,
            "database_max_overflow": args.max_overflow,
            "provider_max_connections": 1000,
        },
        "runs": runs,
    }


def _markdown(result: dict[str, Any]) -> str:
    lines = [
        "| replicas | clients | turns/s | p50 ms | p99 ms | errors | PostgreSQL connections "
        "(max) | machine busy | replicas' CPU ms per turn |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for run in result["runs"]:
        lines.append(
            f"| {run['replicas']} | {run['clients']} | {run['turns_per_s']:.1f} | "
            f"{run['p50_ms']:.0f} | {run['p99_ms']:.0f} | {run['errors']} | "
            f"{run['pg_connections_max']} | {run['machine_busy']:.0%} | "
            f"{run['replica_cpu_ms_per_turn']:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run every replica count and client count; print and write the results."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--replicas", default="1,2,3")
    parser.add_argument("--clients", default="32,128")
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--pool-size", type=int, default=6, help="per worker")
    parser.add_argument("--max-overflow", type=int, default=6, help="per worker")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    args.replicas = [int(x) for x in args.replicas.split(",")]
    args.clients = [int(x) for x in args.clients.split(",")]
    result = asyncio.run(_run(args))
    table = _markdown(result)
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "replicas.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "replicas.md").write_text(table)


if __name__ == "__main__":
    main()
