"""Cold start to the first answer, phase by phase: where pilothouse's extra CPU goes.

``bench/coldstart.py`` times the first answer as a whole; this splits it.
Each run is a new process that imports and sets up in a fixed order and
notes its CPU time (``time.process_time()``, from the top of its script;
interpreter start-up excluded, as in the worker's clock) after each phase:

1. the interpreter's ``asyncio``;
2. the stack both contenders share: pydantic-ai;
3. (model_request only) the openai SDK, then pydantic-ai's OpenAI model
   (pilothouse serves an ``openai-compatible`` provider with its own Chat
   Completions client, ``providers/_chat.py``, and reports whether anything
   imported the SDK);
4. (pilothouse only) SQLAlchemy Core; pilothouse's settings; the
   catalog's and the store's Core tables (with the store's other modules:
   engine, SQLite runner); pilothouse's runtime and facade; ``Pilothouse``
   opened. The ORM is not imported: a turn does not use it (the child
   reports whether anything did);
5. the peer's model built (pilothouse builds its model inside the first
   turn, from the catalog);
6. the first answer: one governed turn (``start_and_send``) against one
   ``model_request`` call, the mock answering at once.

The shared stack is imported first in both, so its rows compare like with
like; the order changes where a module shared further down is paid, not
the total. The collector is off in both until the imports are done, then
what they built is moved to the oldest generation (what pilothouse's own
``collector_paused`` does for its imports, applied to the peer as well), so
the rows are the work itself: in ``coldstart.py``'s real processes the peer
also pays young collections over its imports (about 80 ms), which this
table leaves out on purpose. Runs interleave the two contenders after a
warm-up run each; figures are medians of the per-phase deltas.

Usage (``bench/run.sh`` runs it with bench/.venv)::

    python bench/coldstart_phases.py --out bench/results --runs 9

Results: ``<out>/coldstart-phases.json``, the document's section
``<out>/coldstart-phases.md``, and the table on stdout.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import harness  # noqa: E402
from childenv import MOCK_KEY, child_env  # noqa: E402

PILOTHOUSE = "pilothouse-sqlite"
PEER = "pydantic-ai-model_request"

# The child's script; what it needs comes as JSON in its first argument.
# Marks are (phase, CPU ms since the top of the script), printed as one
# JSON line.
_PROLOGUE = """\
import gc, time
gc.disable()
_t0 = time.process_time()
marks = []
def mark(name):
    marks.append((name, (time.process_time() - _t0) * 1000))
import asyncio, json, sys
mark("interpreter's asyncio")
options = json.loads(sys.argv[1])
sys.path.insert(0, options["bench_dir"])
import pydantic_ai.direct
mark("pydantic-ai (shared)")
"""

_PILOTHOUSE = """\
import sqlalchemy
mark("SQLAlchemy Core")
from pilothouse.settings import Settings
mark("pilothouse settings")
import pilothouse.catalog._tables, pilothouse.store
mark("catalog and store: Core tables, store modules")
from pilothouse.api import Pilothouse
import pilothouse.runtime
mark("pilothouse runtime and facade")
import contenders
gc.freeze(); gc.unfreeze(); gc.enable()
async def main():
    settings = Settings(database_url=options["database_url"])
    async with Pilothouse(settings, tenant="bench") as ph:
        mark("Pilothouse opened")
        action = contenders.ACTIONS["plain-d0"]
        reply = await ph.command.start_and_send(contenders.USER, action=action)
        if reply.error:
            raise RuntimeError(reply.error)
        mark("first answer (model built, action compiled, turn recorded)")
asyncio.run(main())
print(json.dumps({
    "marks": marks,
    "orm": "sqlalchemy.orm" in sys.modules,
    "openai": "openai" in sys.modules,
}))
"""

_PEER = """\
import openai
mark("openai SDK")
import pydantic_ai.models.openai
mark("pydantic-ai's OpenAI model")
import contenders
gc.freeze(); gc.unfreeze(); gc.enable()
async def main():
    contender = await contenders.make(options["contender"], options["base_url"], "plain-d0", {})
    mark("model built")
    await contender.call()
    mark("first answer")
    await contender.aclose()
asyncio.run(main())
print(json.dumps({
    "marks": marks,
    "orm": "sqlalchemy.orm" in sys.modules,
    "openai": "openai" in sys.modules,
}))
"""

SCRIPTS = {PILOTHOUSE: _PROLOGUE + _PILOTHOUSE, PEER: _PROLOGUE + _PEER}


def _run(
    python: str, name: str, options: dict[str, Any]
) -> tuple[list[tuple[str, float]], bool, bool]:
    """One child's marks, and whether it had imported SQLAlchemy's ORM and the openai SDK."""
    command = [*harness._pin(harness.SUT_CORE), python, "-c", SCRIPTS[name], json.dumps(options)]
    env = child_env(**MOCK_KEY, PYTHONDONTWRITEBYTECODE="1")
    done = subprocess.run(
        command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{name} exited {done.returncode}: {done.stderr[-2000:]}")
    found = json.loads(done.stdout.strip().splitlines()[-1])
    marks = [(str(phase), float(ms)) for phase, ms in found["marks"]]
    return marks, bool(found["orm"]), bool(found["openai"])


def _deltas(marks: list[tuple[str, float]]) -> list[tuple[str, float]]:
    out: list[tuple[str, float]] = []
    before = 0.0
    for phase, ms in marks:
        out.append((phase, ms - before))
        before = ms
    return out


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run each contender ``args.runs`` times, interleaved; return per-phase medians."""
    workdir = Path(tempfile.mkdtemp(prefix="ph-phases-"))
    mock = harness.Mock(args.python)
    try:
        database = harness._prepare_pilothouse(args.python, PILOTHOUSE, mock, workdir, "")
        options = {"base_url": mock.base_url, "bench_dir": str(BENCH), **database}
        samples: dict[str, list[list[tuple[str, float]]]] = {PILOTHOUSE: [], PEER: []}
        orm: dict[str, bool] = {PILOTHOUSE: False, PEER: False}
        sdk: dict[str, bool] = {PILOTHOUSE: False, PEER: False}
        for round_ in range(args.warmup + args.runs):
            for name in samples:
                marks, loaded, imported = _run(args.python, name, {**options, "contender": name})
                orm[name] = orm[name] or loaded
                sdk[name] = sdk[name] or imported
                if round_ >= args.warmup:
                    samples[name].append(marks)
    finally:
        mock.close()
        shutil.rmtree(workdir, ignore_errors=True)
    phases: dict[str, list[dict[str, Any]]] = {}
    for name, runs in samples.items():
        deltas = [_deltas(marks) for marks in runs]
        phases[name] = [
            {
                "phase": phase,
                "ms": statistics.median(run[i][1] for run in deltas),
                "total_ms": statistics.median(marks[i][1] for marks in runs),
            }
            for i, (phase, _) in enumerate(deltas[0])
        ]
    return {
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "runs": args.runs,
        "phases": phases,
        "orm_imported": orm,
        "openai_imported": sdk,
    }


def table(result: dict[str, Any]) -> str:
    """Render the phases of both contenders as one markdown table."""
    ph = result["phases"][PILOTHOUSE]
    peer = {row["phase"]: row for row in result["phases"][PEER]}
    lines = [
        "| phase | pilothouse CPU ms | model_request CPU ms |",
        "|---|---:|---:|",
    ]
    ours = {row["phase"] for row in ph}
    shared = [row for row in ph if row["phase"] in peer]
    for row in shared:
        lines.append(f"| {row['phase']} | {row['ms']:.0f} | {peer[row['phase']]['ms']:.0f} |")
    for row in ph:
        if row["phase"] not in peer:
            lines.append(f"| {row['phase']} | {row['ms']:.0f} | – |")
    for row in result["phases"][PEER]:
        if row["phase"] not in ours:
            lines.append(f"| {row['phase']} (model_request) | – | {row['ms']:.0f} |")
    ph_total = ph[-1]["total_ms"]
    peer_total = result["phases"][PEER][-1]["total_ms"]
    sqlalchemy = sum(
        row["ms"] for row in ph if row["phase"].startswith(("SQLAlchemy", "catalog and store"))
    )
    orm = result.get("orm_imported", {}).get(PILOTHOUSE)
    sdk = result.get("openai_imported", {}).get(PILOTHOUSE)
    lines += [
        f"| **to the first answer** (median of totals) | **{ph_total:.0f}** |"
        f" **{peer_total:.0f}** |",
        "",
        f"- pilothouse / model_request to the first answer: {ph_total / peer_total:.2f}×"
        f" ({ph_total - peer_total:+.0f} ms).",
        f"- SQLAlchemy's rows (Core, the catalog's and store's tables with the store's"
        f" modules): {sqlalchemy:.0f} ms. SQLAlchemy's ORM imported by pilothouse's first"
        f" answer: {_said(orm)}.",
        f"- The openai SDK imported by pilothouse's first answer (an `openai-compatible`"
        f" provider, served by pilothouse's own Chat Completions client): {_said(sdk)}.",
    ]
    return "\n".join(lines)


def _said(flag: bool | None) -> str:
    return "yes" if flag else "no" if flag is not None else "not recorded"


def section(result: dict[str, Any]) -> str:
    """The benchmark document's section (``bench/report.py`` includes it)."""
    return "\n".join(
        [
            "## Cold start to the first answer, phase by phase (`bench/coldstart_phases.py`)",
            "",
            f"Measured {result['when']}, {result['runs']} interleaved runs of each, medians."
            " Each run is a new process that imports in a fixed order and notes its CPU"
            " time after each phase (interpreter start-up excluded, as in the worker's"
            " clock); the shared stack (pydantic-ai) comes first in both, then what each"
            " needs of its own (model_request: the openai SDK and pydantic-ai's OpenAI"
            " model; pilothouse: SQLAlchemy Core, its own modules), and"
            " the collector is off in both until the imports are done (the rows are the"
            " work itself; `coldstart.py` has the real processes).",
            "",
            table(result),
            "",
        ]
    )


def main() -> None:
    """Parse the arguments, measure, write ``coldstart-phases.json`` and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--runs", type=int, default=9, help="measured runs of each contender")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured runs of each first")
    args = parser.parse_args()
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "coldstart-phases.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "coldstart-phases.md").write_text(section(result))
    print(table(result))


if __name__ == "__main__":
    main()
