"""Reranking on the packaged local model: Qwen2.5-Coder-0.5B on llama.cpp scores the candidates.

The collection's ``qa_model`` is the packaged model (provider kind
``local``: pilothouse starts llama.cpp itself and holds the answer to the
JSON schema with a grammar). Its scores must parse for every candidate, and
the passage that answers the question must score highest and come first.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder
from pilothouse.types import TextDocument

pytestmark = [pytest.mark.anyio, pytest.mark.real]

# Every decoy shares the question's words ("employees", "year", "days"); one passage answers.
DOCUMENTS = [
    TextDocument("hb:parking", "Employees park in lot B on working days all year."),
    TextDocument("hb:badges", "Employees renew their badges every year at the front desk."),
    TextDocument("hb:canteen", "The canteen serves employees lunch on all working days."),
    TextDocument("hb:vacation", "Each employee is entitled to 25 paid vacation days per year."),
    TextDocument("hb:training", "Employees spend two days a year on safety training."),
]
QUESTION = "How much paid holiday do staff get annually?"


async def test_the_packaged_model_reranks_the_answer_first(tmp_path: Path) -> None:
    catalog = (
        CatalogBuilder(scripted=False)
        .provider("LOCL", kind="local")
        .model(
            "QWEN05", provider="LOCL", model_name="Qwen2.5-Coder-0.5B-Instruct", capabilities=["SR"]
        )
        .add("vector_stores", code="EMBED")
        .add(
            "document_collections",
            code="HANDBOOK",
            store="EMBED",
            collection_name="handbook",
            top_k=3,
            qa_model="QWEN05",
            rerank=True,
            rerank_candidates=5,
        )
    )
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", secrets_file=None)
    async with Pilothouse(settings) as ph:
        await catalog.import_into(ph)
        await ph.knowledge.ingest("HANDBOOK", DOCUMENTS)
        result = await ph.knowledge.search("HANDBOOK", QUESTION)
    print(
        "fused order -> reranked:",
        [(h.source, h.rerank_score) for h in result.hits],
        f"{result.rerank_ms:.0f} ms",
        result.rerank_tokens,
    )
    assert result.reranked_by == "QWEN05" and result.rerank_candidates == 5
    assert len(result.hits) == 3
    assert all(h.rerank_score in (0.0, 1.0, 2.0, 3.0) for h in result.hits)
    assert result.rerank_tokens[0] > 0 and result.rerank_tokens[1] > 0
    assert result.hits[0].source == "hb:vacation"
    assert result.hits[0].rerank_score is not None and result.hits[0].rerank_score >= 2
