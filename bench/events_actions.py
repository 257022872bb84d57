"""``run_action`` through a bus against the same action over REST, at equal concurrency.

One turn = one plain answer of the loopback mock upstream
(``bench/mock_upstream.py``, model ``plain-d<ms>``: it answers after
``--latency-ms``), recorded by pilothouse (audit on). Both paths run the
action in a pilothouse process of their own, on a SQLite database of their
own, with the same catalog:

- **REST**: ``pilothouse serve`` (one worker); the client keeps
  ``--concurrency`` requests in flight (``POST /v1/chat/completions`` with
  model ``action:BUSACT``: one request per turn);
- **bus**: ``pilothouse events --action-topic ... --concurrency N`` on tansu
  (Kafka protocol, memory storage) and on an isolated NATS JetStream server,
  both started on loopback as in tests/real; the client keeps
  ``--concurrency`` ``run_action``s in flight (a new one is published when
  an answer arrives on its ``replyTo``).

A turn is timed from the request (the publish) to its answer (the
``turn_finished`` read back); turns/s is the turns over the wall time of
the whole batch. Ten turns first warm each path (the consumer group joined,
the connection pool open) and are not counted.

    python bench/events_actions.py [--turns 200] [--concurrency 8] [--latency-ms 200]

Writes bench/results/events-actions.json and bench/results/events-actions.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests" / "real"))

from childenv import MOCK_KEY, child_env  # noqa: E402
from event_brokers import Broker  # noqa: E402  # pyright: ignore[reportMissingImports]

from pilothouse.api import Pilothouse  # noqa: E402
from pilothouse.events import Bus, RunAction, encode, open_bus  # noqa: E402
from pilothouse.settings import Settings  # noqa: E402

TENANT = "bench"
ACTION = "BUSACT"


def catalog(base_url: str, latency_ms: int) -> str:
    """One action answered by the mock after ``latency_ms``."""
    return f"""providers:
  - code: MOCK
    kind: openai-compatible
    base_url: {base_url}
    api_key: "@secrets(BENCH_MOCK_API_KEY)"
models:
  - code: MOCKD
    provider: MOCK
    model_name: plain-d{latency_ms}
configurations:
  - code: BNCH
    max_tokens: 64
    retry_count: 0
    retry_delay: 0
actions:
  - code: {ACTION}
    model: MOCKD
    configuration: BNCH
    prompt: Answer.
    ask_user: false
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def wait_port(port: int, process: subprocess.Popen[bytes], timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"process exited with {process.returncode}")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.close()
            return
        except OSError:
            await asyncio.sleep(0.1)
    raise RuntimeError(f"nothing listens on {port} after {timeout} s")


async def prepare(folder: Path, mock: str, latency_ms: int) -> str:
    url = f"sqlite+aiosqlite:///{folder / 'ph.db'}"
    async with Pilothouse(Settings(database_url=url), tenant=TENANT) as ph:
        await ph.catalog.import_text(catalog(mock, latency_ms))
    return url


def environment() -> dict[str, str]:
    return {
        **child_env(**MOCK_KEY),
        "PILOTHOUSE_SERVER_RATE_LIMIT_PER_MINUTE": "0",
        # The catalog names the mock on loopback: the operator allows it.
        "PILOTHOUSE_EGRESS_ALLOW": "127.0.0.1",
    }


async def timed(
    turns: int, concurrency: int, first: int, one: Callable[[int], Awaitable[None]]
) -> tuple[list[float], float]:
    """Run ``turns`` calls of ``one``, ``concurrency`` at a time; their latencies and the wall."""
    limiter = asyncio.Semaphore(concurrency)
    latencies: list[float] = []

    async def each(index: int) -> None:
        async with limiter:
            started = time.perf_counter()
            await one(index)
            latencies.append((time.perf_counter() - started) * 1000)

    began = time.perf_counter()
    await asyncio.gather(*(each(i) for i in range(first, first + turns)))
    return latencies, time.perf_counter() - began


async def rest(folder: Path, url: str, turns: int, concurrency: int) -> tuple[list[float], float]:
    cli = str(Path(sys.executable).with_name("pilothouse"))
    port = free_port()
    log = (folder / "serve.log").open("ab")
    command = [cli, "--database-url", url, "--tenant", TENANT, "serve", "--port", str(port)]
    command += ["--workers", "1", "--log-level", "warning"]
    server = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment())
    try:
        made = subprocess.run(
            [cli, "--database-url", url, "keys", "create", "--tenant", TENANT],
            capture_output=True,
            text=True,
            check=True,
            env=environment(),
        )
        key = made.stdout.strip().split()[-1]
        await wait_port(port, server)
        async with httpx.AsyncClient(
            base_url=f"http://127.0.0.1:{port}/v1",
            headers={"authorization": f"Bearer {key}"},
            timeout=120,
            limits=httpx.Limits(max_connections=concurrency * 2),
        ) as client:

            async def one(index: int) -> None:
                body = {
                    "model": f"action:{ACTION}",
                    "messages": [{"role": "user", "content": f"turn {index}"}],
                }
                response = await client.post("/chat/completions", json=body)
                if response.status_code != 200:
                    raise RuntimeError(f"HTTP {response.status_code}: {response.text[:300]}")

            await timed(10, concurrency, 0, one)
            return await timed(turns, concurrency, 10, one)
    finally:
        server.terminate()
        server.wait(30)
        log.close()


async def bus_path(
    folder: Path, url: str, broker: Broker, turns: int, concurrency: int
) -> tuple[list[float], float]:
    cli = str(Path(sys.executable).with_name("pilothouse"))
    topic, replies = f"bench-actions-{uuid.uuid4().hex[:8]}", "bench-replies"
    command = [cli, "--database-url", url, "--tenant", TENANT, "events", "--bus", broker.url]
    command += ["--action-topic", topic, "--concurrency", str(concurrency)]
    command += ["--group", f"bench-{topic}"]
    if broker.kind != "nats":
        command += ["--session-timeout", "2"]
    log = (folder / "events.log").open("ab")
    service = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=environment())
    caller: Bus = (
        open_bus(broker.url, session_timeout=2.0) if broker.kind != "nats" else open_bus(broker.url)
    )
    answered: dict[str, asyncio.Event] = {}

    async def read() -> None:
        async with aclosing(caller.consume(replies, f"caller-{topic}")) as stream:
            async for delivery in stream:
                answer = json.loads(delivery.value)
                await delivery.ack()
                if answer.get("status") != "CO":
                    raise RuntimeError(f"run_action answered {answer}")
                waiter = answered.get(answer["correlationId"])
                if waiter is not None:
                    waiter.set()

    async def one(index: int) -> None:
        correlation = f"{topic}-{index}"
        answered[correlation] = asyncio.Event()
        command = RunAction(
            action=ACTION, input=f"turn {index}", correlation_id=correlation, reply_to=replies
        )
        await caller.publish(topic, encode(command), key=correlation)
        await answered[correlation].wait()

    reader = asyncio.create_task(read())
    try:
        await caller.declare(replies)
        await asyncio.wait_for(timed(10, concurrency, 0, one), 180)
        return await timed(turns, concurrency, 10, one)
    finally:
        reader.cancel()
        await asyncio.gather(reader, return_exceptions=True)
        await caller.close()
        service.terminate()
        service.wait(30)
        log.close()


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--latency-ms", type=int, default=200)
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ph-bench-actions-"))
    mock_port = free_port()
    mock = subprocess.Popen(
        [sys.executable, str(BENCH / "mock_upstream.py"), "--port", str(mock_port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    base_url = f"http://127.0.0.1:{mock_port}/v1"
    rows: list[dict[str, Any]] = []
    try:
        await wait_port(mock_port, mock)
        paths: list[tuple[str, Broker | None]] = [("REST (pilothouse serve)", None)]
        for kind, name in (
            ("kafka", "bus: Kafka protocol (tansu)"),
            ("nats", "bus: NATS JetStream"),
        ):
            paths.append((name, Broker(kind, folder)))
        for name, broker in paths:
            where = folder / uuid.uuid4().hex[:8]
            where.mkdir()
            url = await prepare(where, base_url, args.latency_ms)
            if broker is None:
                latencies, wall = await rest(where, url, args.turns, args.concurrency)
            else:
                broker.start()
                try:
                    latencies, wall = await bus_path(
                        where, url, broker, args.turns, args.concurrency
                    )
                finally:
                    broker.stop()
            row = {
                "name": name,
                "turns": args.turns,
                "concurrency": args.concurrency,
                "model_latency_ms": args.latency_ms,
                "per_second": args.turns / wall,
                "p50_ms": statistics.median(latencies),
                "p99_ms": percentile(latencies, 0.99),
            }
            print(json.dumps(row), flush=True)
            rows.append(row)
    finally:
        mock.terminate()
        mock.wait(10)
    args.out.mkdir(exist_ok=True)
    (args.out / "events-actions.json").write_text(json.dumps(rows, indent=2))
    (args.out / "events-actions.md").write_text(render(rows))


def render(rows: list[dict[str, Any]]) -> str:
    first = rows[0]
    lines = [
        "## Events: `run_action` through a bus beside REST",
        "",
        f"Measured with `bench/events_actions.py` (method in its docstring): {first['turns']} "
        f"turns per row, {first['concurrency']} in flight on every path (the client's bound "
        f"and `pilothouse events --concurrency {first['concurrency']}`), each a plain answer "
        f"of the loopback mock after {first['model_latency_ms']} ms, recorded by pilothouse. "
        "The broker, the pilothouse process and the client share the 2-core machine. "
        "The target is a bus within 0.8x of REST's turns/s.",
        "",
        "| path | turns/s | p50 ms | p99 ms | turns/s against REST |",
        "|---|---|---|---|---|",
    ]
    base = next(r for r in rows if r["name"].startswith("REST"))
    for row in rows:
        ratio = row["per_second"] / base["per_second"]
        lines.append(
            f"| {row['name']} | {row['per_second']:.1f} | {row['p50_ms']:.0f} | "
            f"{row['p99_ms']:.0f} | {'–' if row is base else f'{ratio:.2f}x'} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    os.environ.setdefault("PYTHONDONTWRITEBYTECODE", "1")
    asyncio.run(main())
