"""Replay throughput: cases per second replayed through the run loop on a scripted model.

A dataset of ``--cases`` recorded conversations (one model call each) is
replayed at concurrency 1 and 4
on a SQLite store; the figure is wall-clock cases per second of
``ph.evaluation.replay`` (the median over ``--rounds``), which includes the
turn's own records and the run's per-case result rows.

Writes ``bench/results/replay.md`` and ``replay.json``. Run:
``python bench/replay.py [--cases 100] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import anyio

from pilothouse.api import Pilothouse
from pilothouse.providers import SecretResolver
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, ScriptedModel
from pilothouse.tools import ToolRegistry

RESULTS = Path(__file__).resolve().parent / "results"


def stock(item: str) -> str:
    """Units in stock."""
    return f"{item}: 7"


async def measure(cases: int, rounds: int) -> dict[str, Any]:
    registry = ToolRegistry(SecretResolver({}))
    registry.register(stock)
    # One answer per turn, so turns running at once take answers in any order.
    model = ScriptedModel(["7 left"] * cases * (1 + rounds * 2))
    figures: dict[str, list[float]] = {"1": [], "4": []}
    with tempfile.TemporaryDirectory() as folder:
        settings = Settings(
            database_url=f"sqlite+aiosqlite:///{folder}/bench.db", secrets_file=None
        )
        async with Pilothouse(settings, model=model, tools=registry) as ph:
            await (
                CatalogBuilder()
                .tool("STOCK", name="stock", kind="python", implementation="stock")
                .action("COUNT", prompt="Count stock.", tools=["STOCK"], ask_user=False)
                .import_into(ph)
            )
            for _ in range(cases):
                await ph.command.start_and_send("how many?", action="COUNT")
            await ph.evaluation.create_dataset("bench", from_conversations=True)
            for index in range(rounds):
                for concurrency in ("1", "4"):
                    started = time.perf_counter()
                    run = await ph.evaluation.replay(
                        "bench", run=f"r{index}-{concurrency}", concurrency=int(concurrency)
                    )
                    elapsed = time.perf_counter() - started
                    assert len(run.results) == cases
                    assert all(r.status == "ok" for r in run.results)
                    figures[concurrency].append(cases / elapsed)
    return {
        "cases": cases,
        "rounds": rounds,
        "machine": f"{platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}",
        "cases_per_second": {k: round(statistics.median(v), 1) for k, v in figures.items()},
    }


def write(result: dict[str, Any]) -> None:
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "replay.json").write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    rate = result["cases_per_second"]
    (RESULTS / "replay.md").write_text(
        "## Replay throughput (scripted model)\n\n"
        f"{result['cases']} cases of one model call each, replayed on a SQLite store; "
        f"median of {result['rounds']} rounds "
        f"({result['machine']}; `python bench/replay.py`).\n\n"
        "| concurrency | cases/s |\n|---|---|\n"
        f"| 1 | {rate['1']} |\n| 4 | {rate['4']} |\n",
        encoding="utf-8",
    )


def main() -> None:
    """Measure and write the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    result = anyio.run(measure, args.cases, args.rounds)
    write(result)
    print(json.dumps(result["cases_per_second"]))


if __name__ == "__main__":
    main()
