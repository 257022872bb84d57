"""Scenario 1 on PostgreSQL beside SQLite and ``model_request``, side by side.

Usage (with bench/.venv; PostgreSQL on 127.0.0.1:5432)::

    python bench/pgturn.py --before /path/to/old/src --rounds 10 --calls 300 --out bench/results

One worker process per contender (``bench/worker.py``, pinned as the
harness pins them: mock on core 0, workers on core 1): pydantic-ai's
``model_request``, pilothouse on SQLite, pilothouse on PostgreSQL from the
tree given as ``--before`` and from this tree. Each pilothouse contender
has a database of its own (a fresh PostgreSQL database per contender).
Rounds interleave them in alternating order, so drift on a shared machine
spreads over all of them; ratios are taken round by round, then their
median. Writes ``pgturn.json`` and ``pgturn.md`` to ``--out``.

``--flush-diagnostic`` adds ``postgres-no-flush``: the default turn on a
database whose commits do not wait for the write-ahead log's flush
(``ALTER DATABASE ... SET synchronous_commit = off``, on that contender's
database only). It is a measurement of what the two durable commits cost,
never a setting pilothouse ships or recommends: such a commit is lost if
the server crashes before the log reaches the disk. Each round then also
times one durable flush on the same server (:func:`_flush_probe`), and the
results go to ``pgturn-flush.json`` and ``pgturn-flush.md`` instead, with
the load average of each round: the stored ``pgturn`` results stay those of
the default run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import harness as H  # noqa: E402

HERE = str(BENCH.parent / "src")


NO_FLUSH = "postgres-no-flush"
"""The diagnostic contender: the default turn, its commits not waiting for the disk."""


def _contenders(before: str | None, flush_diagnostic: bool) -> dict[str, tuple[str, str]]:
    """Label -> (bench contender, source tree).

    ``postgres-lazy-start`` is the same contender with the operator's
    ``database_lazy_start`` on (the turn's first write does not wait for the
    log's flush).
    """
    found = {
        "model_request": ("pydantic-ai-model_request", HERE),
        "sqlite": ("pilothouse-sqlite", HERE),
        "postgres": ("pilothouse-postgres", HERE),
        "postgres-lazy-start": ("pilothouse-postgres", HERE),
    }
    if before:
        found["postgres-before"] = ("pilothouse-postgres", str(Path(before).resolve()))
    if flush_diagnostic:
        found[NO_FLUSH] = ("pilothouse-postgres", HERE)
    return found


def _no_flush(python: str, database_url: str) -> None:
    """Make the commits of one benchmark database not wait for the log's flush."""
    server, _, name = database_url.replace("+asyncpg", "").rpartition("/")
    script = (
        "import asyncio, asyncpg\n"
        "async def m():\n"
        f"    c = await asyncpg.connect({server!r} + '/postgres')\n"
        f"    await c.execute('ALTER DATABASE {name} SET synchronous_commit = off')\n"
        "    await c.close()\n"
        "asyncio.run(m())\n"
    )
    subprocess.run([python, "-c", script], check=True)


_PROBE = """
import asyncio, json, statistics, sys, time, asyncpg
async def main():
    c = await asyncpg.connect(sys.argv[1])
    await c.execute("CREATE TABLE bench_flush_probe (v int)")
    found = {}
    for mode in ("on", "off", "on", "off"):
        await c.execute(f"SET synchronous_commit = {mode}")
        for _ in range(int(sys.argv[2])):
            t = time.perf_counter()
            await c.execute("INSERT INTO bench_flush_probe VALUES (1)")
            found.setdefault(mode, []).append((time.perf_counter() - t) * 1000)
    await c.execute("DROP TABLE bench_flush_probe")
    await c.close()
    print(json.dumps({k: statistics.median(v) for k, v in found.items()}))
asyncio.run(main())
"""


def _flush_probe(python: str, database_url: str, n: int = 100) -> dict[str, float]:
    """Median ms of a one-row insert committed durably (``on``) and not (``off``).

    A table of its own, dropped after (a temporary table's rows are not
    logged, so its commit would not wait for the disk either way): what the
    difference measures is the wait for the log's flush on this server now.
    """
    url = database_url.replace("+asyncpg", "")
    done = subprocess.run(
        [python, "-c", _PROBE, url, str(n)], check=True, capture_output=True, text=True
    )
    return json.loads(done.stdout)


def _markdown(result: dict[str, Any]) -> str:
    rows = [
        "| contender | CPU ms per turn | × model_request CPU | p50 ms | × model_request p50 |",
        "|---|---|---|---|---|",
    ]
    for label, row in result["contenders"].items():
        rows.append(
            f"| {label} | {row['cpu_ms']:.2f} | {row['cpu_ratio']:.2f} | "
            f"{row['p50_ms']:.2f} | {row['p50_ratio']:.2f} |"
        )
    return "\n".join(rows) + "\n"


def _flush_lines(
    summary: dict[str, Any], probes: list[dict[str, float]], loads: list[float]
) -> str:
    """What the durable commits cost in the diagnostic run, next to one flush alone."""
    found = summary["contenders"]
    flush = [p["on"] - p["off"] for p in probes]
    gap = [
        a - b
        for a, b in zip(
            found["postgres"]["round_p50_ms"], found[NO_FLUSH]["round_p50_ms"], strict=True
        )
    ]
    return (
        f"\nPer round (medians of the rounds): the default turn's p50 less the same turn's "
        f"without flushes {statistics.median(gap):.2f} ms; one durable one-row commit less "
        f"the same commit without its flush {statistics.median(flush):.2f} ms "
        f"({min(flush):.2f}–{max(flush):.2f}); load average (1 min) "
        f"{min(loads):.1f}–{max(loads):.1f} on {os.cpu_count()} cores.\n"
    )


def main() -> None:
    """Run the rounds; print and write the medians and ratios."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", help="an older pilothouse source tree (its src/)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--pg", default="postgresql+asyncpg://postgres@127.0.0.1:5432")
    parser.add_argument("--out", type=Path)
    parser.add_argument(
        "--flush-diagnostic",
        action="store_true",
        help="add postgres-no-flush: commits that do not wait for the disk (a measurement only)",
    )
    args = parser.parse_args()
    mock = H.Mock(args.python)
    work = Path(tempfile.mkdtemp())
    workers: dict[str, H.Worker] = {}
    workers_url: dict[str, str] = {}
    try:
        for label, (contender, tree) in _contenders(args.before, args.flush_diagnostic).items():
            os.environ["PYTHONPATH"] = tree
            options: dict[str, Any] = {
                "contender": contender,
                "scenario": "plain-d0",
                "base_url": mock.base_url,
                "bench_dir": str(BENCH),
                "lazy_start": label == "postgres-lazy-start",
            }
            if contender.startswith("pilothouse"):
                (work / label).mkdir()
                options.update(
                    H._prepare_pilothouse(args.python, contender, mock, work / label, args.pg)
                )
                workers_url[label] = options["database_url"]
                if label == NO_FLUSH:
                    _no_flush(args.python, options["database_url"])
            workers[label] = H.Worker(args.python, options)
            if workers[label].ready.get("first_error"):
                raise RuntimeError(workers[label].ready["first_error"])
        for worker in workers.values():
            worker.ask({"op": "round", "n": 50})  # warm-up
        cpu: dict[str, list[float]] = {label: [] for label in workers}
        p50: dict[str, list[float]] = {label: [] for label in workers}
        probes: list[dict[str, float]] = []
        loads: list[float] = []
        for index in range(args.rounds):
            order = list(workers) if index % 2 == 0 else list(reversed(workers))
            loads.append(os.getloadavg()[0])
            for label in order:
                result = workers[label].ask({"op": "round", "n": args.calls})
                if result["errors"]:
                    raise RuntimeError(result["errors"][:2])
                cpu[label].append(result["cpu_s"] / args.calls * 1000)
                p50[label].append(statistics.median(result["lat_ms"]))
            if args.flush_diagnostic:
                probes.append(_flush_probe(args.python, workers_url[NO_FLUSH]))
            print(
                f"round {index}: "
                + "  ".join(f"{k} {cpu[k][-1]:.3f} ms CPU, p50 {p50[k][-1]:.2f}" for k in cpu),
                flush=True,
            )
        base = "model_request"
        summary: dict[str, Any] = {
            "machine": {**H._machine(), "load_average_at_end": os.getloadavg()},
            "method": {"rounds": args.rounds, "calls_per_round": args.calls},
            "round_load_average": loads,
            "contenders": {},
        }
        for label in workers:
            summary["contenders"][label] = {
                "cpu_ms": statistics.median(cpu[label]),
                "p50_ms": statistics.median(p50[label]),
                "cpu_ratio": statistics.median(
                    a / b for a, b in zip(cpu[label], cpu[base], strict=True)
                ),
                "p50_ratio": statistics.median(
                    a / b for a, b in zip(p50[label], p50[base], strict=True)
                ),
                "round_cpu_ms": cpu[label],
                "round_p50_ms": p50[label],
            }
        table = _markdown(summary)
        name = "pgturn"
        if args.flush_diagnostic:
            name = "pgturn-flush"
            summary["flush_probe"] = probes
            table += _flush_lines(summary, probes, loads)
        print(table)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / f"{name}.json").write_text(json.dumps(summary, indent=2) + "\n")
            (args.out / f"{name}.md").write_text(table)
    finally:
        for worker in workers.values():
            worker.close()
        mock.close()


if __name__ == "__main__":
    main()
