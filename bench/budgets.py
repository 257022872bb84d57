"""What enforcing budgets costs a governed turn: CPU and p50 per turn with none, one and three.

The same turn (an action with a priced model) runs ``--turns`` times per
round for each variant, on one Pilothouse per variant opened side by side
in one process, in alternating order so a noisy neighbour touches all of
them alike; the figures are process CPU time per turn
(``time.process_time``) and the round's median wall time per turn, each the
median over the rounds, and the extra is the median of each round's ratio
to ``none`` (short paired rounds follow a shared machine's drift). Three
kinds of turn, each its own table:

- ``governed``: scenario 1's governed turn, the model called through
  pilothouse's Chat Completions client over HTTP against the loopback mock
  (``bench/mock_upstream.py``, a child process, delay 0): what a turn costs
  the process that runs it in production;
- ``scripted``: the model replaced by ``pilothouse.testing.ScriptedModel``,
  so the turn is pilothouse's own work only (a smaller denominator);
- ``postgres``: the governed turn on PostgreSQL (``--pg``, a fresh database
  per variant), the production store.

The first two run on SQLite files.

Variants:

- ``none``: the tenant has no budget (the gate reads the catalog once per
  revision and does nothing else);
- ``one``: a tenant money budget (a hold and a settle per model call);
- ``three``: tenant money, per-action turns and per-user tokens budgets.

Writes ``bench/results/budgets.md`` and ``budgets.json``. Run:
``python bench/budgets.py [--turns 50] [--rounds 30] [--kinds governed,scripted,postgres]
[--pg URL] [--instructions 60]`` (``--instructions`` needs valgrind; it counts the SQLite
kinds).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import harness as H  # noqa: E402
from childenv import MOCK_KEY  # noqa: E402

RESULTS = BENCH / "results"

BUDGETS: dict[str, list[dict[str, Any]]] = {
    "none": [],
    "one": [{"code": "TENANT", "money": "1000000"}],
    "three": [
        {"code": "TENANT", "money": "1000000"},
        {"code": "ACTION", "scope": "action", "turns": 10**12},
        {"code": "USER", "scope": "user", "period": "day", "output_tokens": 10**12},
    ],
}


KINDS = ("governed", "scripted", "postgres")
"""What each kind of turn is: see TITLES; ``postgres`` is ``governed`` on PostgreSQL."""


def catalog(budgets: list[dict[str, Any]], base_url: str | None) -> CatalogBuilder:
    """The action with a priced model: the loopback mock's, or (None) the scripted one's."""
    builder = CatalogBuilder()
    if base_url is None:
        builder.model("PRICED", provider="TEST", model_name="priced", input_price=1, output_price=2)
    else:
        builder.provider(
            "MOCK",
            kind="openai-compatible",
            base_url=base_url,
            api_key="@secrets(BENCH_MOCK_API_KEY)",
        ).model("PRICED", provider="MOCK", model_name="plain-d0", input_price=1, output_price=2)
    builder.configuration("SMAL", max_tokens=64, retry_delay=0).action(
        "ASK", prompt="Answer briefly.", model="PRICED", configuration="SMAL", ask_user=False
    )
    for budget in budgets:
        builder.add("budgets", **budget)
    return builder


async def _database_urls(folder: str, pg: str | None) -> dict[str, str]:
    """Each variant's own database: a SQLite file, or a fresh PostgreSQL database."""
    if pg is None:
        return {name: f"sqlite+aiosqlite:///{Path(folder) / f'{name}.db'}" for name in BUDGETS}
    import asyncpg

    admin = await asyncpg.connect(pg.replace("postgresql+asyncpg", "postgresql") + "/test")
    try:
        for name in BUDGETS:
            await admin.execute(f"DROP DATABASE IF EXISTS bench_budgets_{name}")
            await admin.execute(f"CREATE DATABASE bench_budgets_{name}")
    finally:
        await admin.close()
    return {name: f"{pg}/bench_budgets_{name}" for name in BUDGETS}


async def measure(
    turns: int, rounds: int, base_url: str | None, pg: str | None = None
) -> dict[str, dict[str, list[float]]]:
    """Process CPU milliseconds and p50 wall milliseconds per turn of each variant, per round.

    One Pilothouse per variant, all open at once, each on its own database
    (a SQLite file, or a PostgreSQL database at ``pg``) and warmed up; every
    round runs ``turns`` turns of each variant, in alternating order, so
    drift on a shared machine touches all alike. ``base_url`` is the
    loopback mock's (a governed turn), or None for the scripted model.
    """
    samples: dict[str, dict[str, list[float]]] = {"cpu": {}, "p50": {}}
    for figure in samples.values():
        figure.update({name: [] for name in BUDGETS})
    replies = [Reply("ok", input_tokens=20, output_tokens=5)] * ((turns + 1) * rounds + 10)
    with tempfile.TemporaryDirectory() as folder:
        urls = await _database_urls(folder, pg)
        async with AsyncExitStack() as stack:
            facades: dict[str, Pilothouse] = {}
            for name in BUDGETS:
                scripted = {} if base_url else {"model": ScriptedModel(list(replies))}
                ph = await stack.enter_async_context(
                    Pilothouse(Settings(database_url=urls[name], secrets_file=None), **scripted)
                )
                await catalog(BUDGETS[name], base_url).import_into(ph)
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
                    walls: list[float] = []
                    started = time.process_time()
                    for _ in range(turns):
                        wall = time.perf_counter()
                        await ph.command.start_and_send("Hi", action="ASK", memory_id=user)
                        walls.append(time.perf_counter() - wall)
                    samples["cpu"][name].append((time.process_time() - started) * 1000 / turns)
                    samples["p50"][name].append(statistics.median(walls) * 1000)
                print(
                    f"round {index + 1}/{rounds}: "
                    + ", ".join(
                        f"{name} {values[-1]:.3f} ms" for name, values in samples["cpu"].items()
                    )
                )
    return samples


def _table(samples: dict[str, dict[str, list[float]]]) -> list[str]:
    cpu, p50 = samples["cpu"], samples["p50"]
    lines = [
        "| budgets that apply | CPU per turn (ms) | extra over none | p50 (ms) | extra over none |",
        "|---|---:|---:|---:|---:|",
    ]

    def extra(figure: dict[str, list[float]], name: str) -> str:
        if name == "none":
            return "–"
        ratios = [value / none for value, none in zip(figure[name], figure["none"], strict=True)]
        return f"{(statistics.median(ratios) - 1) * 100:+.1f} %"

    for name in cpu:
        lines.append(
            f"| {name} | {statistics.median(cpu[name]):.3f} | {extra(cpu, name)} "
            f"| {statistics.median(p50[name]):.3f} | {extra(p50, name)} |"
        )
    return lines


TITLES = {
    "governed": "A governed turn: the Chat Completions client against the loopback mock",
    "scripted": "pilothouse's own work: the scripted model",
    "postgres": "A governed turn on PostgreSQL",
}


async def _child(name: str, turns: int, per_user: int, base_url: str | None) -> None:
    """One variant's turns, run under callgrind with collection on for the measured turns alone.

    The turns run as :func:`measure` runs them: ``per_user`` turns of one
    user, then a new user, whose first turn (it makes the user's ledger
    rows) is not counted. A turn reads its user's memory, every earlier
    turn of the user, so a user kept throughout would count ever longer
    reads, a larger turn than the one timed.
    """
    with tempfile.TemporaryDirectory() as folder:
        url = f"sqlite+aiosqlite:///{Path(folder) / f'{name}.db'}"
        replies = [Reply("ok", input_tokens=20, output_tokens=5)] * (2 * turns + 10)
        scripted = {} if base_url else {"model": ScriptedModel(replies)}
        async with Pilothouse(Settings(database_url=url, secrets_file=None), **scripted) as ph:
            await catalog(BUDGETS[name], base_url).import_into(ph)
            for _ in range(5):
                await ph.command.start_and_send("warm up", action="ASK", memory_id="warm")
            pid = str(os.getpid())
            counted = 0
            while counted < turns:
                user = f"u{counted}"
                await ph.command.start_and_send("Hi", action="ASK", memory_id=user)
                block = min(per_user, turns - counted)
                subprocess.run(
                    ["callgrind_control", "-i", "on", pid], check=True, capture_output=True
                )
                for _ in range(block):
                    await ph.command.start_and_send("Hi", action="ASK", memory_id=user)
                subprocess.run(
                    ["callgrind_control", "-i", "off", pid], check=True, capture_output=True
                )
                counted += block


def instructions(turns: int, per_user: int, kinds: list[str]) -> dict[str, dict[str, float]]:
    """Instructions per turn of each kind and variant, counted by callgrind (exact, not time).

    Each variant runs in a process of its own under ``valgrind
    --tool=callgrind``, collecting only while its ``turns`` measured turns
    run (after five warm-up turns), ``per_user`` turns of each user as the
    timed rounds run them; the mock upstream runs outside valgrind.
    """
    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    counts: dict[str, dict[str, float]] = {}
    os.environ.update(MOCK_KEY)
    mock = H.Mock(sys.executable) if "governed" in kinds else None
    try:
        with tempfile.TemporaryDirectory() as folder:
            for kind in kinds:
                counts[kind] = {}
                for name in BUDGETS:
                    out = Path(folder) / f"{kind}-{name}.out"
                    base = mock.base_url if mock is not None and kind == "governed" else ""
                    command = [
                        "valgrind",
                        "--tool=callgrind",
                        "--instr-atstart=no",
                        f"--callgrind-out-file={out}",
                        sys.executable,
                        __file__,
                        "--child",
                        name,
                        "--turns",
                        str(turns),
                        "--per-user",
                        str(per_user),
                        "--base-url",
                        base,
                    ]
                    run = subprocess.run(command, capture_output=True, text=True, check=True)
                    total = next(
                        int(line.split(":")[1].replace(",", ""))
                        for line in run.stderr.splitlines()
                        if "I   refs:" in line
                    )
                    counts[kind][name] = total / turns
                    print(f"{kind} {name}: {total / turns:,.0f} instructions per turn")
    finally:
        if mock is not None:
            mock.close()
    return counts


def _instructions_table(counts: dict[str, float]) -> list[str]:
    lines = [
        "| budgets that apply | instructions per turn | extra over none |",
        "|---|---:|---:|",
    ]
    for name, value in counts.items():
        extra = "–" if name == "none" else f"{(value / counts['none'] - 1) * 100:+.1f} %"
        lines.append(f"| {name} | {value:,.0f} | {extra} |")
    return lines


def report(
    results: dict[str, dict[str, dict[str, list[float]]]],
    turns: int,
    rounds: int,
    counts: dict[str, dict[str, float]] | None = None,
    counted_turns: int = 0,
) -> str:
    lines = [
        "## Budgets: what enforcement costs a governed turn",
        "",
        f"Method: `bench/budgets.py`, {rounds} rounds of {turns} turns per variant, "
        "variants alternating within each round; one process, one open Pilothouse per "
        "variant, each on a database of its own (SQLite files; PostgreSQL 15 on loopback "
        "for its table), each turn a new conversation of the round's user; process CPU "
        "time per turn and the round's median wall time per turn, each the median over "
        "rounds; the extra is the median of the rounds' ratios to `none`. The governed "
        "turn calls the model over HTTP through pilothouse's Chat Completions client (the "
        "loopback mock, delay 0, in a child process whose CPU is not counted), as "
        "scenario 1 does; the scripted turn replaces the model by `ScriptedModel`, "
        "leaving pilothouse's own work. Machine: "
        f"{platform.machine()}, Python {platform.python_version()}.",
    ]
    for kind, samples in results.items():
        lines += ["", f"**{TITLES[kind]}**", "", *_table(samples)]
    if counts:
        lines += [
            "",
            f"Instructions (`--instructions`): the same turns counted by callgrind, "
            f"{counted_turns} turns per variant after five warm-up turns, {turns} turns "
            "of each user as in the timed rounds (a user's first turn not counted), each "
            "variant in a process of its own. Exact and repeatable where the CPU "
            "time is not, but not time: an instruction of SQLite's commit or of a cold "
            "cache line costs more than one of a hot loop.",
        ]
        for kind, by_variant in counts.items():
            lines += ["", f"**{TITLES[kind]}**, instructions", "", *_instructions_table(by_variant)]
    return "\n".join(lines) + "\n"


async def _all(
    turns: int, rounds: int, kinds: list[str], pg: str
) -> dict[str, dict[str, dict[str, list[float]]]]:
    results: dict[str, dict[str, dict[str, list[float]]]] = {}
    for kind in kinds:
        if kind == "scripted":
            results[kind] = await measure(turns, rounds, None)
            continue
        os.environ.update(MOCK_KEY)
        mock = H.Mock(sys.executable)
        try:
            database = pg if kind == "postgres" else None
            results[kind] = await measure(turns, rounds, mock.base_url, database)
        finally:
            mock.close()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--kinds", default=",".join(KINDS), help="governed,scripted,postgres")
    parser.add_argument("--pg", default="postgresql+asyncpg://postgres@127.0.0.1:5432")
    parser.add_argument(
        "--instructions",
        type=int,
        default=0,
        metavar="TURNS",
        help="also count instructions per turn under callgrind, over TURNS turns (0: no)",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--base-url", default="", help=argparse.SUPPRESS)
    parser.add_argument("--per-user", type=int, default=50, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        anyio.run(_child, args.child, args.turns, args.per_user, args.base_url or None)
        return
    kinds = [kind for kind in args.kinds.split(",") if kind]
    unknown = set(kinds) - set(KINDS)
    if unknown:
        parser.error(f"unknown kind(s) {sorted(unknown)}: write some of {', '.join(KINDS)}")
    results = anyio.run(_all, args.turns, args.rounds, kinds, args.pg)
    counted = [kind for kind in kinds if kind != "postgres"]  # callgrind runs on SQLite only
    counts = instructions(args.instructions, args.turns, counted) if args.instructions else None
    RESULTS.mkdir(exist_ok=True)
    stored: dict[str, Any] = {"turns": args.turns, "rounds": args.rounds, "per_turn_ms": results}
    if counts:
        stored["instructions_per_turn"] = counts
        stored["instruction_turns"] = args.instructions
    (RESULTS / "budgets.json").write_text(json.dumps(stored, indent=2) + "\n")
    text = report(results, args.turns, args.rounds, counts, args.instructions)
    (RESULTS / "budgets.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
