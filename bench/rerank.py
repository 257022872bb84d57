"""Reranking by the collection's model: recall before and after, and what it costs.

    flock /tmp/ph-heavy.lock .venv/bin/python bench/rerank.py run
    .venv/bin/python bench/rerank.py report

``run`` ingests the checked-in corpus of the retrieval-quality bench
(``tests/knowledge/recall_corpus``: eight frozen guides, 23 questions in
other words than the guides use) into a SQLite file with the packaged
MiniLM, and asks the first ``--questions`` questions in hybrid mode with no
threshold and ``top_k`` 5 twice: once in the fused order, once reranked by
the packaged Qwen2.5-Coder-0.5B (llama.cpp with one thread, the
collection's ``qa_model``), which scores the ``--candidates`` best fused
chunks 0-3 in one call. A reranked search takes minutes on a busy two-core
machine, hence the subset. A question is
answered at rank *k* when the *k*-th hit comes from the labelled file and
holds the labelled phrase (as in ``bench/retrieval_stores.py``). ``ms`` is
the wall time of one ``search()``, the model call included; the tokens are
the model's own count. ``report`` writes ``bench/results/rerank.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).parent
CORPUS = HERE.parent / "tests" / "knowledge" / "recall_corpus"
RESULTS = HERE / "results" / "rerank.json"
REPORT = HERE / "results" / "rerank.md"
CATALOG = """
providers:
  - {{code: LOCL, kind: local}}
models:
  - {{code: QWEN05, provider: LOCL, model_name: Qwen2.5-Coder-0.5B-Instruct, capabilities: [SR]}}
vector_stores:
  - code: EMBED
document_collections:
  - code: GUIDES
    store: EMBED
    collection_name: guides
    top_k: 5
    qa_model: QWEN05
    rerank: true
    rerank_candidates: {candidates}
"""


def _rank(hits: list[Any], item: dict[str, str]) -> int | None:
    for rank, hit in enumerate(hits, start=1):
        text = " ".join(hit.text.split()).lower()
        if Path(hit.source).name == item["doc"] and item["answer"].lower() in text:
            return rank
    return None


async def _run(candidates: int, limit: int) -> dict[str, Any]:
    import yaml

    from pilothouse.api import Pilothouse
    from pilothouse.settings import Settings
    from pilothouse.testing import allow_model_requests

    folder = Path(tempfile.mkdtemp(prefix="ph-rerank-"))
    settings = Settings(database_url=f"sqlite+aiosqlite:///{folder / 'r.db'}", secrets_file=None)
    questions = yaml.safe_load((CORPUS / "questions.yaml").read_text())[:limit]
    out: dict[str, Any] = {"candidates": candidates, "questions": len(questions)}
    with allow_model_requests():
        async with Pilothouse(settings) as ph:
            await ph.catalog.import_text(CATALOG.format(candidates=candidates))
            ingested = await ph.knowledge.ingest("GUIDES", sorted(CORPUS.glob("*.md")))
            out["chunks"] = sum(d.chunks for d in ingested.documents)
            # The first call starts llama.cpp and loads the model: not a search's cost.
            await ph.knowledge.search("GUIDES", "warm up", threshold=-1.0, top_k=2)
            for name, rerank in (("fused", False), ("reranked", True)):
                ranks: list[int | None] = []
                ms: list[float] = []
                tokens: list[int] = []
                for item in questions:
                    started = time.perf_counter()
                    result = await ph.knowledge.search(
                        "GUIDES", item["q"], threshold=-1.0, mode="hybrid", rerank=rerank
                    )
                    ms.append(1000 * (time.perf_counter() - started))
                    tokens.append(sum(result.rerank_tokens))
                    ranks.append(_rank(list(result.hits), item))
                    print(name, len(ranks), ranks[-1], f"{ms[-1]:.0f} ms", flush=True)
                n = len(questions)
                out[name] = {
                    "hit1": sum(r == 1 for r in ranks) / n,
                    "recall5": sum(r is not None and r <= 5 for r in ranks) / n,
                    "ms_p50": statistics.median(ms),
                    "ms_max": max(ms),
                    "tokens_mean": statistics.mean(tokens),
                    "ranks": ranks,
                }
                print(name, {k: v for k, v in out[name].items() if k != "ranks"}, flush=True)
    return out


def report() -> None:
    """Write the table of ``bench/results/rerank.json``."""
    data = json.loads(RESULTS.read_text())
    lines = [
        "### Reranking by the collection's model",
        "",
        f"Corpus: `tests/knowledge/recall_corpus` ({data['chunks']} chunks), "
        f"{data['questions']} of its 23 questions; SQLite, hybrid, no threshold, "
        "`top_k` 5; the "
        f"packaged Qwen2.5-Coder-0.5B scores the {data['candidates']} best fused chunks in "
        "one call. Method in `bench/rerank.py`.",
        "",
        "| order | hit@1 | recall@5 | ms per search (p50) | ms (max) | model tokens per search |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for name, label in (("fused", "fused (no rerank)"), ("reranked", "reranked by Qwen 0.5B")):
        m = data[name]
        lines.append(
            f"| {label} | {m['hit1']:.2f} | {m['recall5']:.2f} "
            f"| {m['ms_p50']:.0f} | {m['ms_max']:.0f} | {m['tokens_mean']:.0f} |"
        )
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"wrote {REPORT}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("step", choices=["run", "report"])
    parser.add_argument("--candidates", type=int, default=8)
    parser.add_argument("--questions", type=int, default=23)
    args = parser.parse_args()
    if args.step == "run":
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps(asyncio.run(_run(args.candidates, args.questions)), indent=2))
    report()


if __name__ == "__main__":
    main()
