"""Scenario 1 CPU per call of two pilothouse trees and ``model_request``, side by side.

Usage (with bench/.venv)::

    python bench/compare.py --before /path/to/old/src --after src --rounds 14 --calls 400

One worker process per contender (``bench/worker.py``, pinned as the
harness pins them: mock on core 0, workers on core 1); "before" and "after"
are the same pilothouse contender (``pilothouse-sqlite``) importing
pilothouse from two source trees through ``PYTHONPATH``. Rounds interleave
the three, in alternating order, so drift on a shared machine spreads over
all of them; the ratios are taken round by round, then their median.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

import harness as H  # noqa: E402


def main() -> None:
    """Run the rounds and print CPU per call and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="pilothouse source tree (its src/)")
    parser.add_argument("--after", required=True, help="pilothouse source tree (its src/)")
    parser.add_argument("--rounds", type=int, default=14)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--scenario", default="plain-d0")
    parser.add_argument("--python", default=sys.executable)
    args = parser.parse_args()
    trees = {"before": str(Path(args.before).resolve()), "after": str(Path(args.after).resolve())}
    mock = H.Mock(args.python)
    work = Path(tempfile.mkdtemp())
    workers: dict[str, H.Worker] = {}
    try:
        for label in ("model_request", "before", "after"):
            os.environ["PYTHONPATH"] = trees.get(label, trees["after"])
            contender = (
                "pydantic-ai-model_request" if label == "model_request" else "pilothouse-sqlite"
            )
            options = {
                "contender": contender,
                "scenario": args.scenario,
                "base_url": mock.base_url,
                "bench_dir": str(BENCH),
            }
            if label != "model_request":
                (work / label).mkdir()
                options.update(
                    H._prepare_pilothouse(args.python, contender, mock, work / label, "")
                )
            workers[label] = H.Worker(args.python, options)
            if workers[label].ready.get("first_error"):
                raise RuntimeError(workers[label].ready["first_error"])
        for worker in workers.values():
            worker.ask({"op": "round", "n": 50})  # warm-up
        cpu: dict[str, list[float]] = {label: [] for label in workers}
        for index in range(args.rounds):
            order = list(workers) if index % 2 == 0 else list(reversed(workers))
            for label in order:
                result = workers[label].ask({"op": "round", "n": args.calls})
                if result["errors"]:
                    raise RuntimeError(result["errors"][:2])
                cpu[label].append(result["cpu_s"] / args.calls * 1000)
            print(f"round {index}: " + "  ".join(f"{k} {v[-1]:.3f} ms" for k, v in cpu.items()))
        print(
            "median CPU ms per call: "
            + "  ".join(f"{k} {statistics.median(v):.3f}" for k, v in cpu.items())
        )
        pairs = {
            "before / model_request": ("before", "model_request"),
            "after / model_request": ("after", "model_request"),
            "after / before": ("after", "before"),
        }
        for name, (a, b) in pairs.items():
            ratios = [x / y for x, y in zip(cpu[a], cpu[b], strict=True)]
            print(
                f"{name}: median {statistics.median(ratios):.3f} "
                f"(rounds {min(ratios):.3f}-{max(ratios):.3f})"
            )
    finally:
        for worker in workers.values():
            worker.close()
        mock.close()


if __name__ == "__main__":
    main()
