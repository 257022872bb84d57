"""Embedding models, vector store kinds and collection chunking in the catalog."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from pilothouse.catalog import (
    DocumentCollection,
    Model,
    SearchMode,
    VectorStore,
    VectorStoreKind,
    export_catalog,
    import_catalog,
    validate_paths,
)
from pilothouse.store import Database

pytestmark = pytest.mark.anyio

CATALOG = """
providers:
  - code: LOCL
    kind: local
  - code: OAI
    kind: openai
    api_key: "@secrets(OPENAI_API_KEY)"
models:
  - code: MINILM
    provider: LOCL
    model_name: all-MiniLM-L6-v2
    capabilities: [EM]
    dimension: 384
    max_input_tokens: 256
  - code: BGE
    provider: OAI
    model_name: bge-small-en-v1.5
    capabilities: [EM]
    dimension: 384
    max_input_tokens: 512
    query_prefix: "Represent this sentence for searching relevant passages: "
    document_prefix: ""
  - code: GPT4O
    provider: OAI
    model_name: gpt-4o-mini
    capabilities: [FC, SR]
vector_stores:
  - code: EMBED
  - code: PGV
    kind: pgvector
    connection: postgresql://postgres@localhost:5432/vectors
    default_collection: langchain4j_embeddings
    settings:
      password: "@secrets(PG_PASSWORD)"
      layout: langchain4j
      m: 24
      ef_construction: 100
      ef_search: 80
document_collections:
  - code: HANDBOOK
    store: EMBED
    collection_name: handbook
    embedding_model: MINILM
    chunk_size: 200
    chunk_overlap: 20
    similarity_threshold: 0.3
    top_k: 5
    search_mode: vector
    qa_model: GPT4O                # the Semantic Index's default Q&A LLM
  - code: BPMN
    store: PGV
    collection_name: langchain4j_embeddings
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "catalog.yaml"
    path.write_text(textwrap.dedent(text).lstrip("\n"), encoding="utf-8")
    return path


def issues_of(tmp_path: Path, text: str) -> list[str]:
    _, issues = validate_paths([write(tmp_path, text)])
    return [f"{i.entity} {i.code} {i.field}: {i.rule}" for i in issues]


def test_the_knowledge_catalog_validates(tmp_path: Path) -> None:
    assert issues_of(tmp_path, CATALOG) == []


async def test_knowledge_fields_round_trip_through_the_database(
    database: Database, tmp_path: Path
) -> None:
    await import_catalog(database, "default", [write(tmp_path, CATALOG)])
    async with database.sessions() as session:
        query = Model.__table__.select().where(Model.code == "MINILM")
        minilm = (await session.execute(query)).one()
        assert (minilm.dimension, minilm.max_input_tokens, minilm.query_prefix) == (384, 256, None)
        text = await export_catalog(session, "default")
    again = tmp_path / "again"
    again.mkdir()
    (again / "c.yaml").write_text(text, encoding="utf-8")
    parsed, issues = validate_paths([again / "c.yaml"])
    assert issues == []
    stores = {e.spec.key: e.spec for e in parsed.entries["vector_stores"]}
    assert stores["PGV"].model_dump()["kind"] == "pgvector"
    assert stores["PGV"].model_dump()["settings"]["ef_search"] == 80
    collections = {e.spec.key: e.spec.model_dump() for e in parsed.entries["document_collections"]}
    assert collections["HANDBOOK"]["embedding_model"] == "MINILM"
    assert collections["HANDBOOK"]["chunk_size"] == 200
    assert collections["HANDBOOK"]["search_mode"] == "vector"
    assert collections["BPMN"]["embedding_model"] is None
    assert collections["HANDBOOK"]["qa_model"] == "GPT4O"
    assert collections["BPMN"]["qa_model"] is None
    assert "qa_model: GPT4O" in text
    assert collections["BPMN"]["chunk_overlap"] == 50
    bge = next(e.spec.model_dump() for e in parsed.entries["models"] if e.spec.key == "BGE")
    assert bge["query_prefix"] == "Represent this sentence for searching relevant passages: "


async def test_stored_rows_carry_the_enums(database: Database, tmp_path: Path) -> None:
    from sqlalchemy import select

    await import_catalog(database, "default", [write(tmp_path, CATALOG)])
    async with database.sessions() as session:
        kind = await session.scalar(select(VectorStore.kind).where(VectorStore.code == "PGV"))
        mode = await session.scalar(
            select(DocumentCollection.search_mode).where(DocumentCollection.code == "BPMN")
        )
    assert kind is VectorStoreKind.PGVECTOR
    assert mode is SearchMode.HYBRID


def test_an_embedding_model_needs_its_dimension_and_limit(tmp_path: Path) -> None:
    text = """
    providers: [{code: P, kind: local}]
    models:
      - {code: E, provider: P, model_name: x, capabilities: [EM]}
    """
    found = issues_of(tmp_path, text)
    assert any("dimension: required for an embedding model" in f for f in found)
    assert any("max_input_tokens: required for an embedding model" in f for f in found)


def test_embedding_fields_on_a_chat_model_are_refused(tmp_path: Path) -> None:
    text = """
    providers: [{code: P, kind: local}]
    models:
      - {code: C, provider: P, model_name: x, capabilities: [FC], dimension: 384}
    """
    assert issues_of(tmp_path, text) == [
        "model C dimension: only for embedding models: add capability EM or remove the field"
    ]


def test_a_misspelt_store_setting_is_refused(tmp_path: Path) -> None:
    text = """
    vector_stores:
      - code: S
        kind: pgvector
        connection: postgresql://u@h:5432/d
        settings: {ef_serach: 80}
      - code: T
        settings: {index: hnsw, hnsw_m: 1}
    """
    found = issues_of(tmp_path, text)
    assert (
        "vector store S settings.ef_serach: unknown setting for a pgvector vector store; it "
        "knows: ef_construction, ef_search, layout, m, password, text_search_config"
    ) in found
    assert any(f.startswith("vector store T settings.hnsw_m:") for f in found)


def test_pgvector_connection_rules(tmp_path: Path) -> None:
    text = """
    vector_stores:
      - {code: A, kind: pgvector}
      - {code: B, kind: pgvector, connection: "postgresql://u:pw@h:5432/d"}
      - {code: C, kind: pgvector, connection: "postgresql://u@h/d", settings: {password: pw}}
      - {code: D, connection: "postgresql://u@h/d"}
    """
    found = issues_of(tmp_path, text)
    assert "vector store A connection: required: postgresql://USER@HOST:PORT/DATABASE" in found
    assert any(f.startswith("vector store B connection: must not hold a password") for f in found)
    assert any(f.startswith("vector store C settings.password: must be a @secrets") for f in found)
    assert any(
        f.startswith("vector store D connection: an embedded store") and "kind: pgvector" in f
        for f in found
    )


def test_a_collection_must_use_an_embedding_model_and_fit_its_limit(tmp_path: Path) -> None:
    text = """
    providers: [{code: P, kind: local}]
    models:
      - {code: CHAT, provider: P, model_name: x}
      - {code: E, provider: P, model_name: m, capabilities: [EM], dimension: 384,
         max_input_tokens: 256}
    vector_stores: [{code: S}]
    document_collections:
      - {code: A, store: S, collection_name: a, embedding_model: CHAT}
      - {code: B, store: S, collection_name: b, embedding_model: E, chunk_size: 512}
      - {code: C, store: S, collection_name: c, chunk_size: 40, chunk_overlap: 40}
    """
    found = issues_of(tmp_path, text)
    assert (
        "document collection A embedding_model: model 'CHAT' is not an embedding model "
        "(it lacks capability EM)" in found
    )
    assert (
        "document collection B chunk_size: 512 tokens is more than model 'E' reads (256): "
        "chunks would be cut short" in found
    )
    assert "document collection C chunk_overlap: must be smaller than chunk_size" in found


def test_a_collections_qa_model_must_be_a_chat_model(tmp_path: Path) -> None:
    text = """
    providers: [{code: P, kind: local}]
    models:
      - {code: E, provider: P, model_name: m, capabilities: [EM], dimension: 384,
         max_input_tokens: 256}
      - {code: CHAT, provider: P, model_name: x}
    vector_stores: [{code: S}]
    document_collections:
      - {code: A, store: S, collection_name: a, qa_model: E}
      - {code: B, store: S, collection_name: b, qa_model: CHAT}
      - {code: C, store: S, collection_name: c, qa_model: NOPE}
    """
    assert issues_of(tmp_path, text) == [
        "document collection A qa_model: model 'E' is an embedding model (capability EM) "
        "and cannot answer: name a chat model",
        "document collection C qa_model: unknown model 'NOPE'",
    ]


async def test_a_stored_embedding_model_is_refused_as_qa_model(
    database: Database, tmp_path: Path
) -> None:
    from pilothouse.api import Pilothouse
    from pilothouse.errors import CatalogValidationError
    from pilothouse.settings import Settings

    await import_catalog(database, "default", [write(tmp_path, CATALOG)])
    later = tmp_path / "later"
    later.mkdir()
    (later / "c.yaml").write_text(
        "document_collections:\n"
        "  - {code: LATER, store: EMBED, collection_name: later, qa_model: MINILM}\n",
        encoding="utf-8",
    )
    with pytest.raises(CatalogValidationError, match="model 'MINILM' is an embedding model"):
        await import_catalog(database, "default", [later / "c.yaml"])
    async with Pilothouse(Settings(), database=database) as ph:
        document = {"code": "REST", "store": "EMBED", "collection_name": "rest"}
        with pytest.raises(CatalogValidationError, match="qa_model: model 'BGE' is an embedding"):
            await ph.catalog.create("document_collections", {**document, "qa_model": "BGE"})
        created = await ph.catalog.create("document_collections", {**document, "qa_model": "GPT4O"})
        assert created.document["qa_model"] == "GPT4O"
        entry = await ph.catalog.update(
            "document_collections",
            "REST",
            {**document, "qa_model": None},
            expected_version=created.version,
        )
        assert "qa_model" not in entry.document


def test_a_misspelt_setting_names_its_owner_and_what_it_knows(tmp_path: Path) -> None:
    # Event tools and SCOPED strategies once said "this kind of vector store".
    text = """
    tools:
      - code: LOOKUP
        name: lookup_order
        kind: event
        description: Look up an order.
        input_schema: {type: object}
        settings: {topic: agent-commands, replyto: agent-events}
    memory_strategies:
      - code: SCOP
        kind: SCOPED
        settings: {session_ttl: 60}
    """
    found = issues_of(tmp_path, text)
    (tool,) = [f for f in found if f.startswith("tool LOOKUP settings.replyto:")]
    assert tool.startswith("tool LOOKUP settings.replyto: unknown setting for an event tool; ")
    assert "reply_to" in tool.split("it knows: ")[1].split(", ")
    (scope,) = [f for f in found if f.startswith("memory strategy SCOP settings.session_ttl:")]
    assert "unknown setting for a SCOPED memory strategy; it knows: " in scope
    assert "vector store" not in tool + scope
