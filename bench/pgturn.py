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
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import harness as H  # noqa: E402

HERE = str(BENCH.parent / "src")


def _contenders(before: str | None) -> dict[str, tuple[str, str]]:
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
    return found


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


def main() -> None:
    """Run the rounds; print and write the medians and ratios."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--before", help="an older pilothouse source tree (its src/)")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--pg", default="postgresql+asyncpg://postgres@127.0.0.1:5432")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    mock = H.Mock(args.python)
    work = Path(tempfile.mkdtemp())
    workers: dict[str, H.Worker] = {}
    try:
        for label, (contender, tree) in _contenders(args.before).items():
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
            workers[label] = H.Worker(args.python, options)
            if workers[label].ready.get("first_error"):
                raise RuntimeError(workers[label].ready["first_error"])
        for worker in workers.values():
            worker.ask({"op": "round", "n": 50})  # warm-up
        cpu: dict[str, list[float]] = {label: [] for label in workers}
        p50: dict[str, list[float]] = {label: [] for label in workers}
        for index in range(args.rounds):
            order = list(workers) if index % 2 == 0 else list(reversed(workers))
            for label in order:
                result = workers[label].ask({"op": "round", "n": args.calls})
                if result["errors"]:
                    raise RuntimeError(result["errors"][:2])
                cpu[label].append(result["cpu_s"] / args.calls * 1000)
                p50[label].append(statistics.median(result["lat_ms"]))
            print(
                f"round {index}: "
                + "  ".join(f"{k} {cpu[k][-1]:.3f} ms CPU, p50 {p50[k][-1]:.2f}" for k in cpu),
                flush=True,
            )
        base = "model_request"
        summary: dict[str, Any] = {
            "machine": {**H._machine(), "load_average_at_end": os.getloadavg()},
            "method": {"rounds": args.rounds, "calls_per_round": args.calls},
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
        print(table)
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            (args.out / "pgturn.json").write_text(json.dumps(summary, indent=2) + "\n")
            (args.out / "pgturn.md").write_text(table)
    finally:
        for worker in workers.values():
            worker.close()
        mock.close()


if __name__ == "__main__":
    main()
