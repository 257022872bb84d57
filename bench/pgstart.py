"""What writing a new conversation's start while its request is built buys on PostgreSQL.

Usage (with bench/.venv; PostgreSQL on 127.0.0.1:5432)::

    python bench/pgstart.py --rounds 16 --turns 200 --out bench/results

One process, one Pilothouse on a fresh PostgreSQL database, scenario 1's
governed turn (``start_and_send`` against the loopback mock, delay 0). Each
round runs ``--turns`` turns twice, in alternating order: as pilothouse runs
them (the start statement in flight while the model request is built, the
request sent once it has committed) and with the start written first and
the request built after it (the runner's ``start_ahead`` replaced by one
that declines, as it does for a turn that runs tools). Same process, same
database, same connection pool, so the difference is the overlap alone.
Figures: per round, the p50 wall time and the process CPU per turn; the
ratios are medians of the per-round ratios. Writes ``pgstart.json`` and
``pgstart.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import contenders as C  # noqa: E402
import harness as H  # noqa: E402
from childenv import MOCK_KEY  # noqa: E402

import pilothouse.runtime._runner as runner  # noqa: E402


async def _declined(*args: Any, **kwargs: Any) -> None:
    """The start written first: what the runner does for a turn that cannot overlap."""
    return None


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    import asyncpg

    os.environ.update(MOCK_KEY)
    mock = H.Mock(sys.executable)
    work = tempfile.mkdtemp()
    admin = await asyncpg.connect(args.pg.replace("postgresql+asyncpg", "postgresql") + "/test")
    await admin.execute("DROP DATABASE IF EXISTS bench_pgstart")
    await admin.execute("CREATE DATABASE bench_pgstart")
    await admin.close()
    url = f"{args.pg}/bench_pgstart"
    ahead = runner.start_ahead
    try:
        await C.prepare_pilothouse(url, mock.base_url, work)
        contender = await C.make(
            "pilothouse-postgres", mock.base_url, "plain-d0", {"database_url": url}
        )
        for _ in range(300):  # warm-up
            await contender.call()
        p50: dict[str, list[float]] = {"overlapped": [], "start first": []}
        cpu: dict[str, list[float]] = {"overlapped": [], "start first": []}
        for index in range(args.rounds):
            order = list(p50) if index % 2 == 0 else list(reversed(p50))
            for mode in order:
                runner.start_ahead = ahead if mode == "overlapped" else _declined
                times: list[float] = []
                began = time.process_time()
                for _ in range(args.turns):
                    start = time.perf_counter()
                    await contender.call()
                    times.append(time.perf_counter() - start)
                cpu[mode].append((time.process_time() - began) / args.turns * 1000)
                p50[mode].append(statistics.median(times) * 1000)
            print(
                f"round {index}: "
                + "  ".join(f"{m} {cpu[m][-1]:.3f} ms CPU, p50 {p50[m][-1]:.3f}" for m in p50),
                flush=True,
            )
        await contender.aclose()
    finally:
        runner.start_ahead = ahead
        mock.close()
    base = "start first"
    return {
        "machine": {**H._machine(), "load_average_at_end": os.getloadavg()},
        "method": {"rounds": args.rounds, "turns_per_round": args.turns},
        "modes": {
            mode: {
                "cpu_ms": statistics.median(cpu[mode]),
                "p50_ms": statistics.median(p50[mode]),
                "cpu_ratio": statistics.median(
                    a / b for a, b in zip(cpu[mode], cpu[base], strict=True)
                ),
                "p50_ratio": statistics.median(
                    a / b for a, b in zip(p50[mode], p50[base], strict=True)
                ),
                "round_cpu_ms": cpu[mode],
                "round_p50_ms": p50[mode],
            }
            for mode in p50
        },
    }


def _markdown(result: dict[str, Any]) -> str:
    rows = [
        "| a new conversation's start | CPU ms per turn | × start first | p50 ms | × start first |",
        "|---|---|---|---|---|",
    ]
    for mode, row in result["modes"].items():
        rows.append(
            f"| {mode} | {row['cpu_ms']:.3f} | {row['cpu_ratio']:.3f} | "
            f"{row['p50_ms']:.3f} | {row['p50_ratio']:.3f} |"
        )
    return "\n".join(rows) + "\n"


def main() -> None:
    """Run the rounds; print and write the medians and ratios."""
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=16)
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--pg", default="postgresql+asyncpg://postgres@127.0.0.1:5432")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    result = asyncio.run(_run(args))
    table = _markdown(result)
    print(table)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "pgstart.json").write_text(json.dumps(result, indent=2) + "\n")
        (args.out / "pgstart.md").write_text(table)


if __name__ == "__main__":
    main()
