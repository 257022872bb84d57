"""Tool round trips through each event bus against the in-process tool loop.

One turn = the model calls ``lookup_order`` and answers from its result:
two model calls (a local function model: no provider time), the tool, and
pilothouse's records. In process, the tool is a catalog python tool run by
the loop; through a bus, it is an event tool: outbox, relay, worker,
completion, resume. Timed from ``start_and_send`` to the conversation's
``TurnFinished`` with status ``CO`` (the hub event the resuming process
emits). Brokers are started on loopback as in tests/real: tansu (memory
storage) and an isolated NATS JetStream server.

    python bench/events.py [--turns 200] [--concurrency 16] [--applied 1,8] [--only-concurrent]
                           [--model-latency 0.2]

``--applied`` lists the completion concurrencies to compare through each bus
(``EventService(concurrency=...)``: completions applied at once per process;
1 is one after another); every row of one run shares the machine's load, so
compare ratios within a run. ``--model-latency`` makes every model call
wait that many seconds first (a provider's answer time; the default 0 is a
model that answers at once, so the figures are pilothouse's own cost).

Writes bench/results/events.json and bench/results/events.md.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "real"))
sys.path.insert(0, str(ROOT / "tests" / "events"))

from event_brokers import Broker  # noqa: E402  # pyright: ignore[reportMissingImports]
from event_catalog import CATALOG, order_model  # noqa: E402  # pyright: ignore[reportMissingImports]

from pilothouse.api import Pilothouse  # noqa: E402
from pilothouse.events import Bus, EventService, Worker, open_bus  # noqa: E402
from pilothouse.settings import Settings  # noqa: E402
from pilothouse.types import ProcessStatus, TurnEvent, TurnFinished  # noqa: E402

IN_PROCESS = CATALOG.replace(
    """    kind: event
    description: Look up an order's status.""",
    """    kind: python
    implementation: bench_tools_events:lookup_order
    description: Look up an order's status.""",
).replace(
    """    settings:
      topic: agent-commands
      reply_to: agent-events
      timeout: 120
""",
    "",
)


def delayed_model(latency: float) -> Any:
    """The order model, each call answered after ``latency`` seconds (a provider's time)."""
    from pydantic_ai.messages import ModelMessage, ModelResponse
    from pydantic_ai.models.function import AgentInfo, FunctionModel

    inner: Any = order_model().function

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        await anyio.sleep(latency)
        return inner(messages, info)

    return FunctionModel(answer, model_name="order-model")


def lookup_order(order_id: str) -> dict[str, str]:
    """The tool every scenario runs."""
    return {"order_id": order_id, "status": "shipped"}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_turns(
    ph: Pilothouse, turns: int, concurrency: int, first: int = 0
) -> tuple[list[float], float]:
    done: dict[str, anyio.Event] = {}

    async def finished(event: TurnEvent) -> None:
        if isinstance(event, TurnFinished) and event.result.status is ProcessStatus.COMPLETED:
            waiter = done.get(event.result.conversation_uuid)
            if waiter is not None:
                waiter.set()

    ph.subscribe(finished, deltas=False)
    latencies: list[float] = []
    limiter = anyio.Semaphore(concurrency)

    async def one(index: int) -> None:
        async with limiter:
            started = time.perf_counter()
            uuid = f"00000000-0000-4000-8000-{index:012d}"
            done[uuid] = anyio.Event()
            result = await ph.command.start_and_send(
                f"B-{index}", action="ORDERS", conversation_uuid=uuid
            )
            if result.status is not ProcessStatus.COMPLETED:
                await done[uuid].wait()
            latencies.append((time.perf_counter() - started) * 1000)

    began = time.perf_counter()
    async with anyio.create_task_group() as group:
        for index in range(first, first + turns):
            group.start_soon(one, index)
    wall = time.perf_counter() - began
    ph.unsubscribe(finished)
    return latencies, wall


async def scenario(
    name: str,
    bus_url: str | None,
    turns: int,
    concurrency: int,
    applied: int = 1,
    latency: float = 0.0,
) -> dict[str, Any]:
    folder = Path(tempfile.mkdtemp(prefix="ph-bench-events-"))
    settings = Settings(database_url=f"sqlite+aiosqlite:///{folder / 'ph.db'}")
    model = order_model() if latency == 0 else delayed_model(latency)
    async with Pilothouse(settings, model=model) as ph:
        await ph.catalog.import_text(IN_PROCESS if bus_url is None else CATALOG)
        if bus_url is None:
            await run_turns(ph, 10, 1)  # warm-up
            latencies, wall = await run_turns(ph, turns, concurrency, first=10)
        else:
            options: dict[str, float] = (
                {"session_timeout": 2.0} if bus_url.startswith("kafka") else {}
            )
            bus: Bus = open_bus(bus_url, **options)
            # The memory bus lives in one object: the worker must share it.
            worker_bus: Bus = bus if bus_url == "memory://" else open_bus(bus_url, **options)
            worker = Worker(ph, worker_bus)
            worker.tool(lookup_order)
            try:
                async with anyio.create_task_group() as group:
                    await group.start(EventService(ph, bus, concurrency=applied).run)
                    await group.start(worker.run)
                    await run_turns(ph, 10, 1)  # warm-up (consumer groups joined)
                    latencies, wall = await run_turns(ph, turns, concurrency, first=10)
                    group.cancel_scope.cancel()
            finally:
                await bus.close()
                if worker_bus is not bus:
                    await worker_bus.close()
    return {
        "name": name,
        "turns": turns,
        "concurrency": concurrency,
        "applied": applied if bus_url is not None else None,
        "model_latency_s": latency,
        "per_second": turns / wall,
        "p50_ms": statistics.median(latencies),
        "p99_ms": percentile(latencies, 0.99),
    }


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--applied", default="1,8")
    parser.add_argument("--only-concurrent", action="store_true")
    parser.add_argument("--model-latency", type=float, default=0.0)
    args = parser.parse_args()
    applied_levels = [int(v) for v in str(args.applied).split(",")]
    levels = (args.concurrency,) if args.only_concurrent else (1, args.concurrency)
    sys.modules["bench_tools_events"] = sys.modules[__name__]
    folder = Path(tempfile.mkdtemp(prefix="ph-bench-brokers-"))
    kafka, nats = Broker("kafka", folder), Broker("nats", folder)
    kafka.start()
    nats.start()
    rows: list[dict[str, Any]] = []
    try:
        for concurrency in levels:
            for name, url in (
                ("in process (python tool)", None),
                ("memory bus", "memory://"),
                ("Kafka protocol (tansu)", kafka.url),
                ("NATS JetStream", nats.url),
            ):
                for applied in [1] if url is None else applied_levels:
                    row = await scenario(
                        name, url, args.turns, concurrency, applied, args.model_latency
                    )
                    print(json.dumps(row), flush=True)
                    rows.append(row)
    finally:
        kafka.stop()
        nats.stop()
    results = ROOT / "bench" / "results"
    results.mkdir(exist_ok=True)
    # A comparison of completion concurrencies only (--only-concurrent) is
    # kept apart from the full table; a model latency names its own files.
    stem = "events-applied" if args.only_concurrent else "events"
    if args.model_latency:
        stem += f"-latency-{args.model_latency:g}"
    (results / f"{stem}.json").write_text(json.dumps(rows, indent=2))
    (results / f"{stem}.md").write_text(render(rows, args.turns))


def render(rows: list[dict[str, Any]], turns: int) -> str:
    lines = [
        "## Events: tool round trips through a bus",
        "",
        f"Measured with `bench/events.py` ({turns} turns per row, method in its docstring) on the "
        "shared 2-core machine: the broker, the worker and pilothouse share its cores, so these "
        "are loopback figures under load, not a broker's capacity. Added latency is the bus "
        "row's p50/p99 minus the in-process row's at the same concurrency.",
        "",
        "| path | concurrency | completions applied at once | round trips/s | p50 ms | p99 ms "
        "| added p50 ms | added p99 ms |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = {r["concurrency"]: r for r in rows if r["name"].startswith("in process")}
    for row in rows:
        ref = base[row["concurrency"]]
        added50 = row["p50_ms"] - ref["p50_ms"]
        added99 = row["p99_ms"] - ref["p99_ms"]
        same = row is ref
        lines.append(
            f"| {row['name']} | {row['concurrency']} | {row.get('applied') or '–'} | "
            f"{row['per_second']:.1f} | "
            f"{row['p50_ms']:.1f} | {row['p99_ms']:.1f} | "
            f"{'–' if same else f'{added50:+.1f}'} | {'–' if same else f'{added99:+.1f}'} |"
        )
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    anyio.run(main)
