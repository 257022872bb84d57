"""What enforcing budgets costs a governed turn: CPU per turn with none, one and three.

The same governed turn (scripted model, SQLite store, the example shape of
an action with a priced model) runs ``--turns`` times per round for each
variant, on one Pilothouse per variant opened side by side in one process,
in alternating order so a noisy neighbour touches all of them alike; the
figure is process CPU time per turn (``time.process_time``), the median over
the rounds, and the extra is the median of each round's ratio to ``none``
(short paired rounds follow a shared machine's drift). Variants:

- ``none``: the tenant has no budget (the gate reads the catalog once per
  revision and does nothing else);
- ``one``: a tenant money budget (a hold and a settle per model call);
- ``three``: tenant money, per-action turns and per-user tokens budgets.

Writes ``bench/results/budgets.md`` and ``budgets.json``. Run:
``python bench/budgets.py [--turns 50] [--rounds 30]``.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel

RESULTS = Path(__file__).resolve().parent / "results"

BUDGETS: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "one": [{"code": "TENANT", "money": "1000000"}],
    "three": [
        {"code": "TENANT", "money": "1000000"},
        {"code": "ACTION", "scope": "action", "turns": 10**12},
        {"code": "USER", "scope": "user", "period": "day", "output_tokens": 10**12},
    ],
}


def catalog(budgets: list[dict[str, Any]]) -> CatalogBuilder:
    builder = (
        CatalogBuilder()
        .model("PRICED", provider="TEST", model_name="priced", input_price=1, output_price=2)
        .configuration("SMAL", max_tokens=64, retry_delay=0)
        .action("ASK", prompt="Answer briefly.", model="PRICED", configuration="SMAL")
    )
    for budget in budgets:
        builder.add("budgets", **budget)
    return builder


async def measure(turns: int, rounds: int) -> dict[str, list[float]]:
    """Process CPU milliseconds per turn of each variant, per round.

    One Pilothouse per variant, all open at once, each on its own SQLite
    file and warmed up; every round runs ``turns`` turns of each variant,
    in alternating order, so drift on a shared machine touches all alike.
    """
    samples: dict[str, list[float]] = {name: [] for name in BUDGETS}
    replies = [Reply("ok", input_tokens=20, output_tokens=5)] * ((turns + 1) * rounds + 10)
    with tempfile.TemporaryDirectory() as folder:
        async with AsyncExitStack() as stack:
            facades: dict[str, Pilothouse] = {}
            for name in BUDGETS:
                url = f"sqlite+aiosqlite:///{Path(folder) / f'{name}.db'}"
                ph = await stack.enter_async_context(
                    Pilothouse(
                        Settings(database_url=url, secrets_file=None),
                        model=ScriptedModel(list(replies)),
                    )
                )
                await catalog(BUDGETS[name]).import_into(ph)
                for _ in range(5):
                    await ph.command.start_and_send("warm up", action="ASK", memory_id="warm")
                facades[name] = ph
            for index in range(rounds):
                order = list(BUDGETS) if index % 2 == 0 else list(reversed(BUDGETS))
                # A user of the round's own: the memory a turn reads (every
                # earlier turn of its user) stays as long in every round.
                user = f"u{index}"
                for name in order:
                    ph = facades[name]
                    # Its first turn makes the user's ledger rows: not measured.
                    await ph.command.start_and_send("Hi", action="ASK", memory_id=user)
                    started = time.process_time()
                    for _ in range(turns):
                        await ph.command.start_and_send("Hi", action="ASK", memory_id=user)
                    samples[name].append((time.process_time() - started) * 1000 / turns)
                print(
                    f"round {index + 1}/{rounds}: "
                    + ", ".join(f"{name} {values[-1]:.3f} ms" for name, values in samples.items())
                )
    return samples


def report(samples: dict[str, list[float]], turns: int, rounds: int) -> str:
    base = samples["none"]
    lines = [
        "## Budgets: what enforcement costs a governed turn",
        "",
        f"Method: `bench/budgets.py`, {rounds} rounds of {turns} governed turns per variant, "
        "variants alternating within each round; one process, one open Pilothouse per "
        "variant (SQLite store, scripted model); process CPU time per turn, median over "
        "rounds; the extra is the median of the rounds' ratios to `none`. Machine: "
        f"{platform.machine()}, Python {platform.python_version()}.",
        "",
        "| budgets that apply | CPU per turn (ms) | extra over none |",
        "|---|---:|---:|",
    ]
    for name, values in samples.items():
        median = statistics.median(values)
        ratios = [value / none for value, none in zip(values, base, strict=True)]
        extra = "–" if name == "none" else f"{(statistics.median(ratios) - 1) * 100:+.1f} %"
        lines.append(f"| {name} | {median:.3f} | {extra} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=30)
    args = parser.parse_args()
    samples = anyio.run(measure, args.turns, args.rounds)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "budgets.json").write_text(
        json.dumps({"turns": args.turns, "rounds": args.rounds, "cpu_ms": samples}, indent=2) + "\n"
    )
    (RESULTS / "budgets.md").write_text(report(samples, args.turns, args.rounds))
    print(report(samples, args.turns, args.rounds))


if __name__ == "__main__":
    main()
