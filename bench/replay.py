"""Replay throughput on a scripted model, and what an LLM judge costs per case.

A dataset of ``--cases`` recorded conversations (one model call each) is
replayed at concurrency 1 and 4
on a SQLite store; the figure is wall-clock cases per second of
``ph.evaluation.replay`` (the median over ``--rounds``), which includes the
turn's own records and the run's per-case result rows.

Then ``--judge-cases`` of the replayed cases are graded by ``judge:QJUDGE``,
the packaged Qwen (llama.cpp) priced at GPT-4o mini's catalog prices: the
judge's tokens and cost per case are those of real verdicts (its prompt,
the rubric, the case and the schema-bound answer), and its seconds per case
are the local model's on this machine.

Writes ``bench/results/replay.md`` and ``replay.json``. Run:
``python bench/replay.py [--cases 100] [--rounds 3] [--judge-cases 3]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import anyio

from pilothouse.api import Pilothouse
from pilothouse.providers import LocalModelServers, SecretResolver
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, ScriptedModel
from pilothouse.tools import ToolRegistry

RESULTS = Path(__file__).resolve().parent / "results"
# The packaged model as a judge, priced like the example catalog's GPT4OMINI
# (per million tokens), so its verdicts' cost is what a hosted judge's would be.
JUDGE = """\
providers:
  - code: LOCL
    kind: local
models:
  - code: QJUDGE
    provider: LOCL
    model_name: Qwen2.5-Coder-0.5B-Instruct
    capabilities: [FC, SR]
    input_price: 0.15
    output_price: 0.6
    context_window: 4096
"""
RUBRIC = "The answer gives the number of units in stock, as the expected answer does."


def stock(item: str) -> str:
    """Units in stock."""
    return f"{item}: 7"


async def judge(database_url: str, cases: int) -> dict[str, Any]:
    """Grade run ``judged`` (``cases`` cases) with the packaged model as the judge."""
    settings = Settings(database_url=database_url, secrets_file=None)
    servers = LocalModelServers()
    try:
        async with Pilothouse(settings, local_servers=servers) as ph:
            await ph.catalog.import_text(JUDGE)
            # Warm up: the server starts, the weights are paged in.
            await ph.evaluation.evaluate("warm", scorers=["judge:QJUDGE"], rubric=RUBRIC)
            started = time.perf_counter()
            report = await ph.evaluation.evaluate(
                "judged", scorers=["judge:QJUDGE"], rubric=RUBRIC, concurrency=1
            )
            elapsed = time.perf_counter() - started
            verdicts = [c.scores["judge:QJUDGE"] for c in report.cases]
            assert len(verdicts) == cases
            tokens = [0, 0]
            for verdict in verdicts:
                conversation = await ph.query.get_conversation(verdict.conversation_uuid or "")
                tokens[0] += conversation.input_tokens
                tokens[1] += conversation.output_tokens
    finally:
        await servers.aclose()
    return {
        "cases": cases,
        "passed": sum(1 for v in verdicts if v.passed),
        "input_tokens_per_case": round(tokens[0] / cases),
        "output_tokens_per_case": round(tokens[1] / cases),
        "cost_per_case": str((report.scoring_cost / cases).quantize(Decimal("0.00000001"))),
        "seconds_per_case": round(elapsed / cases, 1),
    }


async def measure(cases: int, rounds: int, judge_cases: int) -> dict[str, Any]:
    registry = ToolRegistry(SecretResolver({}))
    registry.register(stock)
    # One answer per turn, so turns running at once take answers in any order.
    model = ScriptedModel(["7 left"] * (cases * (1 + rounds * 2) + judge_cases + 1))
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
            if judge_cases:
                for name, size in (("warm", 1), ("judged", judge_cases)):
                    await ph.evaluation.create_dataset(
                        name, from_conversations=True, sample=size, seed=1
                    )
                    await ph.evaluation.replay(name, run=name)
        judged = await judge(settings.database_url, judge_cases) if judge_cases else None
    return {
        "cases": cases,
        "rounds": rounds,
        "machine": f"{platform.machine()}, {platform.python_implementation()} "
        f"{platform.python_version()}",
        "cases_per_second": {k: round(statistics.median(v), 1) for k, v in figures.items()},
        "judge": judged,
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
        f"| 1 | {rate['1']} |\n| 4 | {rate['4']} |\n" + _judge_md(result["judge"]),
        encoding="utf-8",
    )


def _judge_md(judged: dict[str, Any] | None) -> str:
    if judged is None:
        return ""
    return (
        "\n## LLM judge per case (packaged Qwen, GPT-4o mini prices)\n\n"
        f"`judge:QJUDGE` grading {judged['cases']} replayed cases one at a time "
        f"({judged['passed']} passed); cost at "
        "0.15 / 0.6 per million input / output tokens.\n\n"
        "| input tokens | output tokens | cost | seconds |\n|---|---|---|---|\n"
        f"| {judged['input_tokens_per_case']} | {judged['output_tokens_per_case']} "
        f"| {judged['cost_per_case']} | {judged['seconds_per_case']} |\n"
    )


def main() -> None:
    """Measure and write the results."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cases", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--judge-cases", type=int, default=3, help="0: no judge")
    args = parser.parse_args()
    result = anyio.run(measure, args.cases, args.rounds, args.judge_cases)
    write(result)
    print(json.dumps({k: result[k] for k in ("cases_per_second", "judge")}))


if __name__ == "__main__":
    main()
