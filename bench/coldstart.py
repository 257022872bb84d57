"""Cold start, whole process: pilothouse's first turn beside pydantic-ai's ``model_request``.

Each run is a new process (``bench/worker.py`` with its stdin closed, so it
quits after the first call): interpreter start, imports, set-up, the first
call, and exit. It is timed from outside, as a user of the process sees it:
CPU is the child's user + system time (``getrusage(RUSAGE_CHILDREN)``, the
operating system's own accounting), wall is a monotonic clock around the
child's whole life. The worker's own figures (from the top of its script to
the end of the first call, interpreter start-up and exit excluded) are kept
beside them.

Runs interleave the commands (A B A B ...) after a warm-up run of each, so
drift on a shared machine falls on both; the summary is the median of each
and the median of the pair-by-pair ratios. pilothouse's database is migrated
and holds the benchmark catalog before any run (``prepare_pilothouse``, not
timed), as an application's database does after a restart.

The ``pilothouse`` command's start is measured the same way:
``pilothouse --help`` and ``pilothouse conversations list`` on a migrated,
empty SQLite database.

Usage (``bench/run.sh`` runs it with bench/.venv)::

    python bench/coldstart.py --out bench/results --runs 9
    python bench/coldstart.py --before-src /path/to/other/src   # A/B two trees

``--before-src`` adds the same pilothouse runs with ``PYTHONPATH`` pointing
at another source tree (e.g. the previous commit's), interleaved with the
rest. Results: ``<out>/coldstart.json``, the document's section
``<out>/coldstart.md``, and the table on stdout.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import harness  # noqa: E402
from childenv import MOCK_KEY, child_env  # noqa: E402

PILOTHOUSE = "pilothouse-sqlite"
PEER = "pydantic-ai-model_request"
CLI = "import sys; from pilothouse.cli import main; sys.argv[0] = 'pilothouse'; sys.exit(main())"


def _timed(command: Sequence[str], env: dict[str, str]) -> dict[str, Any]:
    """Run ``command`` to its end; return its wall and CPU seconds and its output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(
        command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if done.returncode != 0:
        raise RuntimeError(f"{command!r} exited {done.returncode}: {done.stderr[-2000:]}")
    return {"wall_s": wall, "cpu_s": cpu, "stdout": done.stdout}


def _worker(python: str, options: dict[str, Any]) -> list[str]:
    return [*harness._pin(harness.SUT_CORE), python, str(BENCH / "worker.py"), json.dumps(options)]


def _env(src: str | None) -> dict[str, str]:
    env = child_env(**MOCK_KEY, PYTHONDONTWRITEBYTECODE="1")
    if src is not None:
        env["PYTHONPATH"] = src
    return env


def _commands(
    args: argparse.Namespace, mock: harness.Mock, workdir: Path
) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Every command of the run: name -> (argv, environment)."""
    python = args.python
    options = {"base_url": mock.base_url, "scenario": "plain-d0", "bench_dir": str(BENCH)}
    database = harness._prepare_pilothouse(python, PILOTHOUSE, mock, workdir, args.pg)
    # An empty database migrated by the CLI itself, for `conversations list`.
    empty = workdir / "cli.db"
    cli_env = {**_env(None), "PILOTHOUSE_DATABASE_URL": f"sqlite+aiosqlite:///{empty}"}
    upgrade = [python, "-c", CLI, "db", "upgrade"]
    subprocess.run(upgrade, env=cli_env, check=True, capture_output=True)
    pilothouse = {**options, "contender": PILOTHOUSE, **database}
    commands = {
        PEER: (_worker(python, {**options, "contender": PEER}), _env(None)),
        PILOTHOUSE: (_worker(python, pilothouse), _env(None)),
        "pilothouse --help": ([python, "-c", CLI, "--help"], cli_env),
        "pilothouse conversations list": (
            [python, "-c", CLI, "conversations", "list", "--json"],
            cli_env,
        ),
    }
    if args.before_src:
        before = str(Path(args.before_src).resolve())
        commands[f"{PILOTHOUSE} (before)"] = (_worker(python, pilothouse), _env(before))
        for name in ("pilothouse --help", "pilothouse conversations list"):
            commands[f"{name} (before)"] = (commands[name][0], {**cli_env, "PYTHONPATH": before})
    return commands


def _summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    def median(key: str) -> float:
        return statistics.median(s[key] for s in samples)

    out: dict[str, Any] = {
        "runs": len(samples),
        "cpu_ms": median("cpu_s") * 1000,
        "wall_ms": median("wall_s") * 1000,
        "cpu_ms_min": min(s["cpu_s"] for s in samples) * 1000,
        "cpu_ms_max": max(s["cpu_s"] for s in samples) * 1000,
    }
    ready = [s["ready"] for s in samples if "ready" in s]
    if ready:
        out["worker_cold_ms"] = statistics.median(r["cold_ms"] for r in ready)
        out["worker_cold_cpu_ms"] = statistics.median(r["cold_cpu_ms"] for r in ready)
    return out


def _ratios(samples: dict[str, list[dict[str, Any]]], a: str, b: str) -> dict[str, float] | None:
    if a not in samples or b not in samples:
        return None
    pairs = list(zip(samples[a], samples[b], strict=False))
    cpu = [x["cpu_s"] / y["cpu_s"] for x, y in pairs]
    wall = [x["wall_s"] / y["wall_s"] for x, y in pairs]
    return {
        "cpu": statistics.median(cpu),
        "cpu_min": min(cpu),
        "cpu_max": max(cpu),
        "wall": statistics.median(wall),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every command ``args.runs`` times, interleaved; return the summary."""
    workdir = Path(tempfile.mkdtemp(prefix="ph-coldstart-"))
    mock = harness.Mock(args.python)
    try:
        commands = _commands(args, mock, workdir)
        samples: dict[str, list[dict[str, Any]]] = {name: [] for name in commands}
        for round_ in range(args.warmup + args.runs):
            for name, (argv, env) in commands.items():
                result = _timed(argv, env)
                if round_ < args.warmup:
                    continue
                sample = {"cpu_s": result["cpu_s"], "wall_s": result["wall_s"]}
                if "worker.py" in " ".join(argv):
                    ready = json.loads(result["stdout"].splitlines()[0])
                    if ready.get("first_error"):
                        raise RuntimeError(f"{name}: {ready['first_error']}")
                    sample["ready"] = ready
                samples[name].append(sample)
            if round_ >= args.warmup:
                print(f"  round {round_ - args.warmup + 1}/{args.runs} done", flush=True)
    finally:
        mock.close()
        shutil.rmtree(workdir, ignore_errors=True)
    result: dict[str, Any] = {
        "when": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
        "commands": {name: _summary(s) for name, s in samples.items()},
        "ratios": {
            f"{PILOTHOUSE} / {PEER}": _ratios(samples, PILOTHOUSE, PEER),
            f"{PILOTHOUSE} (before) / {PEER}": _ratios(samples, f"{PILOTHOUSE} (before)", PEER),
            f"{PILOTHOUSE} / before": _ratios(samples, PILOTHOUSE, f"{PILOTHOUSE} (before)"),
            "pilothouse --help / before": _ratios(
                samples, "pilothouse --help", "pilothouse --help (before)"
            ),
            "pilothouse conversations list / before": _ratios(
                samples, "pilothouse conversations list", "pilothouse conversations list (before)"
            ),
        },
        "samples": samples,
    }
    result["ratios"] = {k: v for k, v in result["ratios"].items() if v is not None}
    return result


def table(result: dict[str, Any]) -> str:
    """Render the summary as a markdown table (and the ratios below it)."""
    lines = [
        "| command | runs | whole-process CPU ms (median; min–max) | wall ms"
        " | worker: to first answer ms / CPU ms |",
        "|---|---:|---:|---:|---:|",
    ]
    for name, s in result["commands"].items():
        worker = (
            f"{s['worker_cold_ms']:.0f} / {s['worker_cold_cpu_ms']:.0f}"
            if "worker_cold_ms" in s
            else "—"
        )
        cpu = f"{s['cpu_ms']:.0f} ({s['cpu_ms_min']:.0f}–{s['cpu_ms_max']:.0f})"
        lines.append(f"| {name} | {s['runs']} | {cpu} | {s['wall_ms']:.0f} | {worker} |")
    lines.append("")
    for name, r in result["ratios"].items():
        lines.append(
            f"- {name}: CPU {r['cpu']:.2f}× (pairs {r['cpu_min']:.2f}–{r['cpu_max']:.2f}),"
            f" wall {r['wall']:.2f}×"
        )
    return "\n".join(lines)


def section(result: dict[str, Any]) -> str:
    """The benchmark document's section (``bench/report.py`` includes it)."""
    return "\n".join(
        [
            "## Cold start, whole process (`bench/coldstart.py`)",
            "",
            f"Measured {result['when']}. Each run is a new process: interpreter start, imports,"
            " set-up, the first call (mock delay 0), exit; CPU is the operating system's"
            " user + system time of the child, runs interleave the commands after a warm-up"
            " run each, figures are medians and ratios are medians of pair-by-pair ratios."
            " The worker's column is its own clock, from the top of its script to the end of"
            " the first call.",
            "",
            table(result),
            "",
        ]
    )


def main() -> None:
    """Parse the arguments, measure, write ``coldstart.json`` and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--runs", type=int, default=9, help="measured runs of each command")
    parser.add_argument("--warmup", type=int, default=1, help="unmeasured runs of each first")
    parser.add_argument("--before-src", help="another pilothouse source tree to compare with")
    parser.add_argument("--pg", default="postgresql+asyncpg://postgres@127.0.0.1:5432")
    args = parser.parse_args()
    result = run(args)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "coldstart.json").write_text(json.dumps(result, indent=1) + "\n")
    (args.out / "coldstart.md").write_text(section(result))
    print(table(result))


if __name__ == "__main__":
    main()
