"""Reranking: a collection's ``qa_model`` scores the fused candidates and reorders them.

A function model stands in for the chat model: it reads the passages it is
given and scores the one that holds a marked phrase 3, the rest 0, so the
test can tell a reranked order from the fused one. Runs on SQLite and
PostgreSQL (the ``database`` fixture).
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pilothouse.api import Pilothouse
from pilothouse.catalog import validate_paths
from pilothouse.errors import ErrorCategory, PilothouseError
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import CatalogBuilder, ScriptedModel
from pilothouse.types import TextDocument, TimelineKind

pytestmark = pytest.mark.anyio

# Twelve short notes; the question's words favour the decoys, the answer is "lot B".
NOTES = [
    TextDocument(f"note:{n}", f"# Parking note {n}\n\nParking for visitors: see the desk {n}.")
    for n in range(10)
] + [
    TextDocument("note:answer", "# Cars\n\nGuests leave their cars in lot B behind the hall."),
    TextDocument("note:other", "# Canteen\n\nThe canteen opens at noon."),
]
QUESTION = "Where is parking for visitors?"


def _prompt(messages: list[ModelMessage]) -> str:
    return "".join(
        str(part.content)
        for message in messages
        for part in getattr(message, "parts", [])
        if isinstance(part, UserPromptPart)
    )


def judge(phrase: str, calls: list[str]) -> FunctionModel:
    """A model that scores 3 the passages holding ``phrase``, the others 0 (and answers turns)."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        prompt = _prompt(messages)
        if "Passages:\n" not in prompt:  # the turn's own answer
            return ModelResponse(parts=[TextPart("Lot B.")])
        calls.append(prompt)
        passages = re.split(r"\n\n(?=\[\d+\])", prompt.split("Passages:\n", 1)[1])
        scores = [3 if phrase in p else 0 for p in passages]
        return ModelResponse(parts=[TextPart(json.dumps({"scores": scores}))])

    return FunctionModel(answer, model_name="judge")


def _catalog(rerank: bool = True) -> CatalogBuilder:
    return (
        CatalogBuilder()
        .provider("LOCL", kind="local")
        .add("models", code="QWEN", provider="LOCL", model_name="qwen", capabilities=["JM"])
        .add("vector_stores", code="EMBED")
        .add(
            "document_collections",
            code="NOTES",
            store="EMBED",
            collection_name="notes",
            top_k=3,
            similarity_threshold=0.0,
            qa_model="QWEN",
            rerank=rerank,
            rerank_candidates=12,
        )
        .action("ASK", prompt="Answer from the notes.", collections=["NOTES"])
    )


@pytest.fixture
async def calls() -> list[str]:
    return []


@pytest.fixture
async def ph(database: Database, calls: list[str]) -> AsyncIterator[Pilothouse]:
    async with Pilothouse(Settings(), database=database, model=judge("lot B", calls)) as facade:
        await _catalog().import_into(facade)
        await facade.knowledge.ingest("NOTES", NOTES)
        yield facade


async def test_the_model_scores_reorder_the_hits(ph: Pilothouse, calls: list[str]) -> None:
    fused = await ph.knowledge.search("NOTES", QUESTION, rerank=False)
    assert fused.reranked_by is None and not calls
    assert "lot B" not in fused.hits[0].text  # the decoys' words win the fused order

    result = await ph.knowledge.search("NOTES", QUESTION)
    assert result.reranked_by == "QWEN"
    assert result.rerank_candidates == 12 and len(calls) == 1
    assert calls[0].count("\n[") == 12  # twelve passages, numbered, in one call
    assert len(result.hits) == 3 and result.top_k == 3
    assert "lot B" in result.hits[0].text and result.hits[0].rerank_score == 3.0
    # Equal scores keep the fused order.
    assert [h.chunk_id for h in result.hits[1:]] == [
        h.chunk_id for h in fused.hits if "lot B" not in h.text
    ][:2]


async def test_a_turn_records_the_rerank_in_its_retrieval_event(
    database: Database, calls: list[str]
) -> None:
    model = judge("lot B", calls)
    async with Pilothouse(Settings(), database=database, model=model) as run:
        await _catalog().import_into(run)
        await run.knowledge.ingest("NOTES", NOTES)
        result = await run.command.start_and_send(QUESTION, action="ASK")
        transcript = await run.query.get_transcript(result.conversation_uuid)
    (searched, *_) = [e.data for e in transcript.timeline if e.kind is TimelineKind.RETRIEVAL]
    search = searched["searches"][0]
    assert search["rerank"]["model"] == "QWEN" and search["rerank"]["candidates"] == 12
    assert search["rerank"]["ms"] >= 0 and search["rerank"]["input_tokens"] > 0
    assert search["hits"][0]["rerank_score"] == 3.0
    assert "lot B" in str(calls[-1])


async def test_an_answer_that_is_not_the_scores_fails_the_search(database: Database) -> None:
    async with Pilothouse(Settings(), database=database, model=ScriptedModel(["3, 1, 0"])) as ph:
        await _catalog().import_into(ph)
        await ph.knowledge.ingest("NOTES", NOTES)
        with pytest.raises(PilothouseError, match="not \\{'scores'") as caught:
            await ph.knowledge.search("NOTES", QUESTION)
    assert caught.value.category is ErrorCategory.UPSTREAM


async def test_asking_for_a_rerank_a_collection_does_not_do_is_refused(
    database: Database, calls: list[str]
) -> None:
    async with Pilothouse(Settings(), database=database, model=judge("x", calls)) as ph:
        await _catalog(rerank=False).import_into(ph)
        await ph.knowledge.ingest("NOTES", NOTES[:2])
        with pytest.raises(PilothouseError, match="does not rerank: set rerank: true"):
            await ph.knowledge.search("NOTES", QUESTION, rerank=True)
        assert (await ph.knowledge.search("NOTES", QUESTION)).reranked_by is None
    assert not calls


def _issues(tmp_path: Path, collection: str) -> list[str]:
    text = textwrap.dedent(
        """
        providers:
          - {code: LOCL, kind: local}
        models:
          - {code: QWEN, provider: LOCL, model_name: qwen, capabilities: [JM]}
        vector_stores:
          - code: EMBED
        document_collections:
        """
    ) + textwrap.indent(textwrap.dedent(collection), "  ")
    path = tmp_path / "catalog.yaml"
    path.write_text(text)
    _, issues = validate_paths([path])
    return [f"{i.code} {i.field}: {i.rule}" for i in issues]


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        (
            "- {code: C, store: EMBED, collection_name: c, rerank: true}",
            "C rerank: reranking scores the candidates with the collection's qa_model",
        ),
        (
            "- {code: C, store: EMBED, collection_name: c, rerank: true, qa_model: QWEN, "
            "top_k: 8, rerank_candidates: 5}",
            "C rerank_candidates: must be at least top_k (8)",
        ),
        (
            "- {code: C, store: EMBED, collection_name: c, qa_model: QWEN, reranker: QWEN}",
            "C reranker: ",
        ),
        (
            "- {code: C, store: EMBED, collection_name: c, rerank_candidates: 500}",
            "C rerank_candidates: ",
        ),
    ],
)
def test_the_catalog_refuses_a_rerank_it_cannot_run(
    tmp_path: Path, entry: str, expected: str
) -> None:
    found = _issues(tmp_path, entry)
    assert any(issue.startswith(expected) for issue in found), found


def test_a_good_rerank_entry_validates(tmp_path: Path) -> None:
    entry = "- {code: C, store: EMBED, collection_name: c, qa_model: QWEN, rerank: true}"
    assert _issues(tmp_path, entry) == []


async def test_the_rerank_settings_round_trip_through_export(ph: Pilothouse) -> None:
    exported: Any = await ph.catalog.export()
    assert "rerank: true" in str(exported) and "rerank_candidates: 12" in str(exported)


async def test_a_turn_may_skip_the_rerank_and_a_bad_switch_is_refused(
    database: Database, calls: list[str]
) -> None:
    async with Pilothouse(Settings(), database=database, model=judge("lot B", calls)) as run:
        await _catalog().import_into(run)
        await run.knowledge.ingest("NOTES", NOTES)
        result = await run.command.start_and_send(
            QUESTION, action="ASK", runtime_config={"retrieval": {"rerank": False}}
        )
        transcript = await run.query.get_transcript(result.conversation_uuid)
        with pytest.raises(PilothouseError, match="'rerank' must be true or false"):
            await run.command.start_and_send(
                QUESTION, action="ASK", runtime_config={"retrieval": {"rerank": "no"}}
            )
    (searched, *_) = [e.data for e in transcript.timeline if e.kind is TimelineKind.RETRIEVAL]
    assert "rerank" not in searched["searches"][0] and not calls
