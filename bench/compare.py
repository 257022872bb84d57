"""Scenario 1 CPU per call of two pilothouse trees and ``model_request``, side by side.

Usage (with bench/.venv)::

    python bench/compare.py --before /path/to/old/src --after src --rounds 14 --calls 400

One worker process per contender (``bench/worker.py``, pinned as the
harness pins them: mock on core 0, workers on core 1); "before" and "after"
are the same pilothouse contender (``pilothouse-sqlite``) importing
pilothouse from two source trees through ``PYTHONPATH``. Rounds interleave
the three, in alternating order, so drift on a shared machine spreads over
all of them; the ratios are taken round by round, then their median.

``--peers model_request,langchain,httpx`` adds more peers (each its own
worker, in the same rounds). With ``--scenario stream`` each round's time
to first chunk (median of its calls) is printed too, with every contender's
lead over ``httpx`` when it runs, as the harness reports it::

    python bench/compare.py --before old/src --after src --scenario stream \\
        --peers model_request,langchain,httpx --rounds 8 --calls 4
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

PEERS = {
    "model_request": "pydantic-ai-model_request",
    "langchain": "langchain",
    "httpx": "httpx",
}
"""Peers a run may add beside the two pilothouse trees: label -> bench contender."""


def _ttft_line(values: dict[str, float]) -> str:
    """Each contender's time to first chunk, and its lead over httpx when httpx ran."""
    floor = values.get("httpx")
    return "  ".join(
        f"{k} {v:.2f} ms" + (f" ({v - floor:+.2f})" if floor is not None and k != "httpx" else "")
        for k, v in values.items()
    )


def main() -> None:
    """Run the rounds and print CPU per call and the ratios."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="pilothouse source tree (its src/)")
    parser.add_argument("--after", required=True, help="pilothouse source tree (its src/)")
    parser.add_argument("--rounds", type=int, default=14)
    parser.add_argument("--calls", type=int, default=400)
    parser.add_argument("--scenario", default="plain-d0")
    parser.add_argument("--python", default=sys.executable)
    parser.add_argument("--peers", default="model_request", help="of: " + ", ".join(PEERS))
    args = parser.parse_args()
    peers = [p for p in args.peers.split(",") if p]
    unknown = sorted(set(peers) - set(PEERS))
    if unknown:
        parser.error(f"unknown peer(s) {', '.join(unknown)}; known: {', '.join(PEERS)}")
    trees = {"before": str(Path(args.before).resolve()), "after": str(Path(args.after).resolve())}
    mock = H.Mock(args.python)
    work = Path(tempfile.mkdtemp())
    workers: dict[str, H.Worker] = {}
    try:
        for label in (*peers, "before", "after"):
            os.environ["PYTHONPATH"] = trees.get(label, trees["after"])
            contender = PEERS.get(label, "pilothouse-sqlite")
            options = {
                "contender": contender,
                "scenario": args.scenario,
                "base_url": mock.base_url,
                "bench_dir": str(BENCH),
            }
            if label in trees:
                (work / label).mkdir()
                options.update(
                    H._prepare_pilothouse(args.python, contender, mock, work / label, "")
                )
            workers[label] = H.Worker(args.python, options)
            if workers[label].ready.get("first_error"):
                raise RuntimeError(workers[label].ready["first_error"])
        stream = args.scenario == "stream"
        for worker in workers.values():
            worker.ask({"op": "round", "n": 3 if stream else 50})  # warm-up
        cpu: dict[str, list[float]] = {label: [] for label in workers}
        ttft: dict[str, list[float]] = {label: [] for label in workers}
        for index in range(args.rounds):
            order = list(workers) if index % 2 == 0 else list(reversed(workers))
            for label in order:
                result = workers[label].ask({"op": "round", "n": args.calls})
                if result["errors"]:
                    raise RuntimeError(result["errors"][:2])
                cpu[label].append(result["cpu_s"] / args.calls * 1000)
                if stream:
                    ttft[label].append(statistics.median(f["ttft_ms"] for f in result["facts"]))
            print(f"round {index}: " + "  ".join(f"{k} {v[-1]:.3f} ms" for k, v in cpu.items()))
            if stream:
                print("  time to first chunk: " + _ttft_line({k: v[-1] for k, v in ttft.items()}))
        print(
            "median CPU ms per call: "
            + "  ".join(f"{k} {statistics.median(v):.3f}" for k, v in cpu.items())
        )
        pairs = {f"{tree} / {peer}": (tree, peer) for peer in peers for tree in trees}
        pairs["after / before"] = ("after", "before")
        if stream:
            medians = {k: statistics.median(v) for k, v in ttft.items()}
            print("median time to first chunk: " + _ttft_line(medians))
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
