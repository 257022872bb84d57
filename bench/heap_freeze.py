"""200 streams at once, with and without a frozen start-up heap.

Each streamed answer's first chunk comes 200 ms after its request (the
scenario-3 stream, ``stream-f200-k64-g20``); 200 are launched at once, three
rounds per process, the first token timed from the launch. What this run
shows is where the tail of that figure goes: a full collection of the
cyclic garbage collector stops the event loop for as long as it walks the
heap, and pilothouse's heap (SQLAlchemy's metadata and mappings beside
pydantic-ai's objects) is larger than ``model_request``'s.

Five variants, each its own process pinned to the contender core, the mock
on the other, in alternating order over ``--runs`` runs:

- ``pilothouse``: the library as it comes (``Settings.freeze_heap`` off);
- ``pilothouse freeze_heap``: ``Settings(freeze_heap=True)``, the heap
  frozen after the first turn (``pilothouse serve``'s default);
- ``pilothouse frozen``: the library as it comes, then ``gc.collect(1);
  gc.freeze()`` after the warm-up, as the frozen peer below;
- ``model_request``: pydantic-ai's direct API, as in ``bench/concurrency.py``;
- ``model_request frozen``: the same after ``gc.collect(1); gc.freeze()``,
  what any application can do, so the frozen pair compares like with like.

Each process warms up with 200 streams first (a connection per stream, the
first turn's builds), then runs the rounds. Per round: time to first token
p50/p99 from the launch, minus the 200 ms the mock waits; CPU per stream;
the full collections and their CPU time (``process_figures.FullCollections``,
as scenario 3 counts them).

Usage (``bench/run.sh`` runs it with bench/.venv)::

    python bench/heap_freeze.py --out bench/results --runs 3
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
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

FIRST_MS = 200
STREAMS = 200
VARIANTS = {
    "pilothouse": ("pilothouse-sqlite", False, False),
    "pilothouse freeze_heap": ("pilothouse-sqlite", True, False),
    "pilothouse frozen": ("pilothouse-sqlite", False, True),
    "model_request": ("pydantic-ai-model_request", False, False),
    "model_request frozen": ("pydantic-ai-model_request", False, True),
}
"""Each variant: the contender, ``Settings.freeze_heap``, and ``gc.freeze()`` after the warm-up."""


async def _child(options: dict[str, Any]) -> dict[str, Any]:
    """Warm up, then run the rounds; return their figures."""
    import contenders
    from process_figures import FullCollections

    contender_name, options["freeze_heap"], frozen = VARIANTS[options["variant"]]
    contender = await contenders.make(contender_name, options["base_url"], "stream", options)
    streams = int(options["streams"])
    # The first turn, then a connection per stream.
    await contender.call()
    await asyncio.gather(*(contender.call() for _ in range(streams - 1)))
    if frozen:
        gc.collect(1)
        gc.freeze()
    heap = len(gc.get_objects())
    rounds: list[dict[str, Any]] = []
    for _ in range(int(options["rounds"])):
        with FullCollections() as collections:
            cpu = time.process_time()
            launch = time.perf_counter()
            facts = await asyncio.gather(*(contender.call() for _ in range(streams)))
            cpu = time.process_time() - cpu
        firsts = [(f["first_at"] - launch) * 1000 - FIRST_MS for f in facts]
        rounds.append(
            {
                "p50_ms": statistics.median(firsts),
                "p99_ms": harness._percentile(firsts, 99),
                "cpu_ms_per_stream": cpu * 1000 / streams,
                "full_collections": collections.count,
                "full_collection_ms": round(sum(collections.cpu_ms), 1),
            }
        )
    await contender.aclose()
    frozen_count = gc.get_freeze_count()
    return {"variant": options["variant"], "heap": heap, "frozen": frozen_count, "rounds": rounds}


def _run_variant(python: str, variant: str, options: dict[str, Any]) -> dict[str, Any]:
    env = child_env(**MOCK_KEY)
    done = subprocess.run(
        [
            *harness._pin(harness.SUT_CORE),
            python,
            __file__,
            "--child",
            json.dumps({**options, "variant": variant}),
        ],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{variant} exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _summary(runs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for variant in VARIANTS:
        rounds = [r for run in runs if run["variant"] == variant for r in run["rounds"]]
        heaps = [run["heap"] for run in runs if run["variant"] == variant]
        if not rounds:
            continue
        out[variant] = {
            "rounds": len(rounds),
            "p50_ms": statistics.median(r["p50_ms"] for r in rounds),
            "p99_ms": statistics.median(r["p99_ms"] for r in rounds),
            "cpu_ms_per_stream": statistics.median(r["cpu_ms_per_stream"] for r in rounds),
            "full_collection_ms_per_round": statistics.median(
                r["full_collection_ms"] for r in rounds
            ),
            "full_collections": sum(r["full_collections"] for r in rounds),
            "tracked_at_start": statistics.median(heaps),
        }
    return out


def _markdown(summary: dict[str, dict[str, Any]], args: argparse.Namespace) -> str:
    lines = [
        "## 200 streams and the start-up heap (bench/heap_freeze.py)",
        "",
        f"{args.streams} streams at once, first chunk {FIRST_MS} ms after the request; "
        f"{args.runs} runs of each variant in alternating order, {args.rounds} rounds each; "
        "medians of the rounds (time to first token from the launch, less the mock's "
        f"{FIRST_MS} ms).",
        "",
        "| variant | TTFT p50 ms | TTFT p99 ms | CPU per stream ms | "
        "full collection ms per round | tracked objects at the start |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for variant, s in summary.items():
        lines.append(
            f"| {variant} | {s['p50_ms']:,.0f} | {s['p99_ms']:,.0f} | "
            f"{s['cpu_ms_per_stream']:.1f} | {s['full_collection_ms_per_round']:,.0f} | "
            f"{s['tracked_at_start']:,.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    """Run the variants in alternating order; write the results."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="results")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=STREAMS)
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asyncio.run(_child(json.loads(args.child)))))
        return
    mock = harness.Mock(args.python)
    runs: list[dict[str, Any]] = []
    try:
        with tempfile.TemporaryDirectory() as folder:
            options = harness._prepare_pilothouse(
                args.python, "pilothouse-sqlite", mock, Path(folder), ""
            )
            options.update(
                {
                    "bench_dir": str(BENCH),
                    "base_url": mock.base_url,
                    "rounds": args.rounds,
                    "streams": args.streams,
                    "stream_model": f"stream-f{FIRST_MS}-k64-g20",
                }
            )
            total = args.runs * len(VARIANTS)
            for run in range(args.runs):
                order = list(VARIANTS) if run % 2 == 0 else list(reversed(VARIANTS))
                for variant in order:
                    result = _run_variant(args.python, variant, options)
                    runs.append(result)
                    figures = [f"{r['p50_ms']:.0f}/{r['p99_ms']:.0f}" for r in result["rounds"]]
                    print(f"[{len(runs)}/{total}] {variant}: {', '.join(figures)}", flush=True)
    finally:
        mock.close()
    summary = _summary(runs)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "heap-freeze.json").write_text(json.dumps({"summary": summary, "runs": runs}, indent=2))
    (out / "heap-freeze.md").write_text(_markdown(summary, args))
    print(_markdown(summary, args))


if __name__ == "__main__":
    main()
