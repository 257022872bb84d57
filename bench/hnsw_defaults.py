"""The embedded store's HNSW defaults, measured again: recall@10 and queries per core by ef_search.

    flock /tmp/ph-heavy.lock .venv/bin/python bench/hnsw_defaults.py run --size 100000
    .venv/bin/python bench/hnsw_defaults.py report

The vectors are ``bench/knowledge.py``'s clustered set (unit vectors around
1,000 random centres, 384 dimensions) and its 1,000 held-out queries; the
graph is built with the store's defaults (m 16, ef_construction 128) through
pilothouse's own ``VectorIndex``. Recall@10 is against exact search; speed
is this process's CPU per query, one query at a time on one thread (so
"per core", whatever else the machine runs). The build is timed in CPU and
wall seconds. The size is an argument: 100k vectors take one to several minutes to build
on a loaded two-core machine, so the committed figures say which size they
are. ``report`` writes ``bench/results/hnsw-defaults.md``.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).parent
RESULTS = HERE / "results" / "hnsw-defaults.json"
REPORT = HERE / "results" / "hnsw-defaults.md"
EF_SEARCH = [32, 64, 96, 128]


def run(size: int) -> dict[str, object]:
    sys.path.insert(0, str(HERE))
    from knowledge import clustered, clustered_queries, exact_top, hnsw

    base, queries = clustered(size), clustered_queries()
    truth, exact_ms = exact_top(base, queries)
    measured = hnsw(base, queries, truth, EF_SEARCH)
    return {"size": size, "exact_cpu_ms_per_query": exact_ms, **measured}


def report() -> None:
    """Write the table of ``bench/results/hnsw-defaults.json``."""
    data = json.loads(RESULTS.read_text())
    size = f"{data['size']:,}"
    lines = [
        "### HNSW defaults of the embedded store, measured again",
        "",
        f"Clustered {size} × 384 (`bench/knowledge.py`'s generator, 1,000 held-out queries), "
        "usearch HNSW built with the defaults (m 16, ef_construction 128) through pilothouse's "
        "`VectorIndex`; CPU of one thread per query. Method in `bench/hnsw_defaults.py`.",
        "",
        "| ef_search | recall@10 | CPU ms per query | queries/s per core |",
        "|---:|---:|---:|---:|",
    ]
    for ef, m in data["by_ef_search"].items():
        lines.append(
            f"| {ef} | {m['recall_at_10']:.4f} | {m['cpu_ms_per_query']:.3f} "
            f"| {m['qps_per_core']:,.0f} |"
        )
    lines += [
        "",
        f"Build: {data['build_cpu_s']:.1f} CPU s ({data['build_wall_s']:.1f} s wall), graph file "
        f"{data['file_mb']:.1f} MB; exact search {data['exact_cpu_ms_per_query']:.2f} CPU ms per "
        "query.",
    ]
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"wrote {REPORT}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("step", choices=["run", "report"])
    parser.add_argument("--size", type=int, default=100_000)
    args = parser.parse_args()
    if args.step == "run":
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(run(args.size), indent=2, default=float))
    report()


if __name__ == "__main__":
    main()
