"""Full-text retrieval is as good on PostgreSQL as on SQLite, on one shared corpus.

The embedded store ranks its text half by SQLite FTS5's BM25, or on
PostgreSQL by BM25 computed in SQL over its ``tsvector`` (no extension).
Both databases ingest ``recall_corpus/`` (a snapshot of eight of
pilothouse's guides) and answer its questions (``questions.yaml``, written
in other words than the guides use); chunk recall@5 of the text half and of
hybrid search must be the same on both, within one question. PostgreSQL's
former ``ts_rank_cd`` ordering, which has no inverse document frequency,
fell well short of it.

The model's vectors are not what is compared: each distinct text (a chunk, a
question) is embedded once by the packaged MiniLM and the second database
gets the same vectors, as it would from a second run of the model.
"""

from __future__ import annotations

import textwrap
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from pilothouse.catalog import import_catalog
from pilothouse.knowledge import Knowledge, LocalMiniLM
from pilothouse.store import Database

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

CORPUS = Path(__file__).parent / "recall_corpus"
CATALOG = """
vector_stores:
  - code: EMBED
document_collections:
  - code: GUIDES
    store: EMBED
    collection_name: guides
"""


class EmbeddedOnce(LocalMiniLM):
    """The session's packaged MiniLM, each distinct text embedded once.

    Embedding the corpus is most of this test's time, and both databases
    ingest the same chunks.
    """

    def __init__(self, model: LocalMiniLM) -> None:
        super().__init__()
        self._model = model
        self._vectors: dict[str, np.ndarray] = {}
        self._vectors_lock = threading.Lock()

    def encode(self, texts: Sequence[str]) -> Any:
        if not texts:
            return self._model.encode(texts)
        with self._vectors_lock:  # the embedder runs on worker threads
            missing = [text for text in dict.fromkeys(texts) if text not in self._vectors]
            if missing:
                self._vectors.update(zip(missing, self._model.encode(missing), strict=True))
            return np.stack([self._vectors[text] for text in texts])


def _answered(hits: list[Any], item: dict[str, str]) -> bool:
    return any(
        Path(hit.source).name == item["doc"]
        and item["answer"].lower() in " ".join(hit.text.split()).lower()
        for hit in hits
    )


async def _recall(url: str, folder: Path, minilm: LocalMiniLM) -> dict[str, float]:
    database = Database(url)
    await database.ensure_schema()
    path = folder / "catalog.yaml"
    path.write_text(textwrap.dedent(CATALOG), encoding="utf-8")
    await import_catalog(database, "default", [path])
    knowledge = Knowledge(database, local_model=minilm)
    try:
        files = sorted(CORPUS.glob("*.md"))
        ingested = await knowledge.ingest("default", "GUIDES", files)
        assert not ingested.failed
        questions: list[dict[str, str]] = yaml.safe_load(
            (CORPUS / "questions.yaml").read_text(encoding="utf-8")
        )
        recall: dict[str, float] = {}
        for mode in ("text", "hybrid"):
            found = 0
            for item in questions:
                result = await knowledge.search(
                    "default", "GUIDES", item["q"], top_k=5, threshold=-1.0, mode=mode
                )
                found += _answered(list(result.hits), item)
            recall[mode] = found / len(questions)
        recall["questions"] = len(questions)
        return recall
    finally:
        await knowledge.aclose()
        await database.dispose()


async def test_postgresql_text_retrieval_matches_sqlite_fts5_on_a_shared_corpus(
    tmp_path: Path, postgres_database_url: str, minilm: LocalMiniLM
) -> None:
    once = EmbeddedOnce(minilm)
    sqlite = await _recall(f"sqlite+aiosqlite:///{tmp_path / 'lite.db'}", tmp_path, once)
    postgres = await _recall(postgres_database_url, tmp_path, once)
    one = 1 / sqlite["questions"]
    # The text half alone is where the ranking shows: BM25 on both.
    assert postgres["text"] >= sqlite["text"] - one, (sqlite, postgres)
    assert postgres["hybrid"] >= sqlite["hybrid"] - one, (sqlite, postgres)
    # And it is good on its own, not only equally poor.
    assert sqlite["text"] >= 0.5 and postgres["text"] >= 0.5, (sqlite, postgres)
