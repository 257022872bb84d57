"""Retrieval quality per store: SQLite FTS5 against PostgreSQL's text ranking.

    flock /tmp/ph-heavy.lock .venv/bin/python bench/retrieval_stores.py run
    .venv/bin/python bench/retrieval_stores.py report

``run`` ingests the checked-in corpus of the store-equality test
(``tests/knowledge/recall_corpus``: eight of pilothouse's guides, frozen,
with 23 questions in other words than the guides use) into a SQLite file
and into a new database on the local PostgreSQL (``PILOTHOUSE_BENCH_PG``,
default ``postgresql://postgres@127.0.0.1:5432``), with the packaged
MiniLM, and asks every question in each search mode with ``top_k`` 10 and
no threshold (the ranking is measured, not the threshold). On PostgreSQL it
asks twice: ranked by BM25 (pilothouse's), and by ``ts_rank_cd`` (the
ordering before it, kept here only to measure against). A question is
answered at rank *k* when the *k*-th hit comes from the labelled file and
holds the labelled phrase; ``doc@5`` counts the right file among the first
five. ``ms`` is this process's CPU per ``search()`` (the database server's
CPU is not in it). ``report`` writes ``bench/results/retrieval-stores.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
CORPUS = HERE.parent / "tests" / "knowledge" / "recall_corpus"
RESULTS = HERE / "results" / "retrieval-stores.json"
REPORT = HERE / "results" / "retrieval-stores.md"
PG_SERVER = os.environ.get("PILOTHOUSE_BENCH_PG", "postgresql://postgres@127.0.0.1:5432")
CATALOG = (
    "vector_stores:\n  - code: EMBED\ndocument_collections:\n"
    "  - code: GUIDES\n    store: EMBED\n    collection_name: guides\n"
)


def _old_text_search(
    self: Any, connection: Any, collection_id: int, words: list[str], k: int, filters: Any
) -> list[int]:
    """PostgreSQL's former ordering: an OR ``to_tsquery`` ranked by ``ts_rank_cd``."""
    from sqlalchemy import func, select

    from pilothouse.knowledge import _embedded

    if connection.dialect.name == "sqlite":
        return _embedded._fts5_search(connection, collection_id, words, k, filters)
    chunks = _embedded._chunks
    vector = func.to_tsvector("english", chunks.c.heading + " " + chunks.c.text)
    query = func.to_tsquery("english", " | ".join(words))
    statement = (
        select(chunks.c.id)
        .where(chunks.c.collection_id == collection_id, vector.op("@@")(query))
        .order_by(func.ts_rank_cd(vector, query).desc())
        .limit(k)
    )
    return list(connection.execute(statement).scalars())


def _rank(hits: list[Any], item: dict[str, str]) -> int | None:
    for rank, hit in enumerate(hits, start=1):
        text = " ".join(hit.text.split()).lower()
        if Path(hit.source).name == item["doc"] and item["answer"].lower() in text:
            return rank
    return None


async def _measure(url: str, rankings: list[tuple[str, Any]], folder: Path) -> dict[str, Any]:
    import yaml  # pyright: ignore[reportMissingModuleSource]

    from pilothouse.catalog import import_catalog
    from pilothouse.knowledge import Knowledge, LocalMiniLM, _embedded
    from pilothouse.store import Database

    database = Database(url)
    await database.ensure_schema()
    catalog = folder / "catalog.yaml"
    catalog.write_text(CATALOG)
    await import_catalog(database, "default", [catalog])
    knowledge = Knowledge(database, local_model=LocalMiniLM())
    ingested = await knowledge.ingest("default", "GUIDES", sorted(CORPUS.glob("*.md")))
    questions = yaml.safe_load((CORPUS / "questions.yaml").read_text())
    out: dict[str, Any] = {"chunks": sum(d.chunks for d in ingested.documents)}
    kept = _embedded.EmbeddedBackend._text_search
    for name, ranking in rankings:
        _embedded.EmbeddedBackend._text_search = ranking or kept
        for mode in ("text", "hybrid", "vector"):
            first = five = document = 0
            cpu = time.process_time()
            for item in questions:
                result = await knowledge.search(
                    "default", "GUIDES", item["q"], top_k=10, threshold=-1.0, mode=mode
                )
                rank = _rank(list(result.hits), item)
                first += rank == 1
                five += rank is not None and rank <= 5
                document += any(Path(h.source).name == item["doc"] for h in result.hits[:5])
            n = len(questions)
            out[f"{name}/{mode}"] = {
                "hit1": first / n,
                "hit5": five / n,
                "doc5": document / n,
                "ms": 1000 * (time.process_time() - cpu) / n,
            }
            print(name, mode, out[f"{name}/{mode}"], flush=True)
    _embedded.EmbeddedBackend._text_search = kept
    await knowledge.aclose()
    await database.dispose()
    return out


async def _run() -> dict[str, Any]:
    import asyncpg  # pyright: ignore[reportMissingTypeStubs]

    folder = Path(tempfile.mkdtemp(prefix="ph-retrieval-stores-"))
    name = f"ph_retrieval_stores_{os.getpid()}"
    admin = await asyncpg.connect(f"{PG_SERVER}/postgres")
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    pg = f"{PG_SERVER.replace('postgresql://', 'postgresql+asyncpg://')}/{name}"
    return {
        "sqlite": await _measure(
            f"sqlite+aiosqlite:///{folder / 'r.db'}", [("fts5", None)], folder
        ),
        "postgres": await _measure(pg, [("bm25", None), ("ts_rank_cd", _old_text_search)], folder),
    }


def report() -> None:
    """Write the table of ``bench/results/retrieval-stores.json``."""
    data = json.loads(RESULTS.read_text())
    rows = [
        ("SQLite", "FTS5 BM25", data["sqlite"], "fts5"),
        ("PostgreSQL", "BM25 in SQL (pilothouse)", data["postgres"], "bm25"),
        ("PostgreSQL", "ts_rank_cd (before)", data["postgres"], "ts_rank_cd"),
    ]
    lines = [
        "### Retrieval quality per store (SQLite and PostgreSQL)",
        "",
        f"Corpus: `tests/knowledge/recall_corpus` ({data['sqlite']['chunks']} chunks of eight "
        "frozen guides), 23 questions; packaged MiniLM; `top_k` 10, no threshold. Method in "
        "`bench/retrieval_stores.py`.",
        "",
        "| store | text ranking | mode | hit@1 | recall@5 | right file @5 | CPU ms per search |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for store, ranking, results, key in rows:
        for mode in ("text", "hybrid", "vector"):
            m = results[f"{key}/{mode}"]
            lines.append(
                f"| {store} | {ranking} | {mode} | {m['hit1']:.2f} | {m['hit5']:.2f} "
                f"| {m['doc5']:.2f} | {m['ms']:.1f} |"
            )
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"wrote {REPORT}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("step", choices=["run", "report"])
    args = parser.parse_args()
    if args.step == "run":
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(asyncio.run(_run()), indent=2))
    report()


if __name__ == "__main__":
    main()
