"""Knowledge over HTTP: the REST routes, ``/v1/invoke``'s RAG parameters, ``/v1/embeddings``.

The collection is on the embedded store with the packaged MiniLM; the
official ``openai`` client reads ``/v1/embeddings`` through the app.
"""

from __future__ import annotations

import base64
import struct
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from pilothouse.server._state import ServerState
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel
from pilothouse.types import TimelineKind

pytestmark = pytest.mark.anyio


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


CATALOG = (
    CatalogBuilder(scripted=False)
    .add("vector_stores", code="EMBED")
    .add("document_collections", code="HANDBOOK", store="EMBED", collection_name="handbook")
    .provider("LOCL", kind="local")
    .model(
        "MINILM",
        provider="LOCL",
        model_name="all-MiniLM-L6-v2",
        capabilities=["EM"],
        dimension=384,
        max_input_tokens=256,
    )
)

TEXTS = [
    {"source": "hb:travel", "text": "Book trains for trips under four hours.", "format": "text"},
    {
        "source": "hb:badges",
        "text": "# Security\n\nReport lost badges to the front desk at once.",
        "format": "markdown",
        "metadata": {"department": "it"},
    },
]


@pytest.fixture
async def knowledge_state(server_state: ServerState) -> AsyncIterator[ServerState]:
    await server_state.pilothouse.catalog.import_text(CATALOG.yaml())
    yield server_state


async def test_ingest_json_and_multipart_search_list_delete(
    client: httpx.AsyncClient, knowledge_state: ServerState, admin_key: str, api_key: str
) -> None:
    base = "/v1/knowledge/collections/HANDBOOK"
    response = await client.post(
        f"{base}/documents",
        json={"texts": TEXTS, "metadata": {"edition": "2026"}},
        headers=auth(admin_key),
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["counts"]["added"] == 2 and body["model"] == "local:all-MiniLM-L6-v2"
    upload = await client.post(
        f"{base}/documents",
        files=[
            ("files", ("parking.md", b"# Parking\n\nVisitors park in lot B.", "text/markdown")),
            ("files", ("scan.pdf", b"not a pdf at all", "application/pdf")),
        ],
        data={"metadata": '{"site": "hq"}'},
        headers=auth(admin_key),
    )
    assert upload.status_code == 200, upload.text
    statuses = {d["source"]: d["status"] for d in upload.json()["documents"]}
    assert statuses == {"parking.md": "added", "scan.pdf": "failed"}

    found = await client.post(
        f"{base}/search", json={"query": "where do visitors park"}, headers=auth(api_key)
    )
    assert found.status_code == 200, found.text
    hit = found.json()["hits"][0]
    assert hit["source"] == "parking.md" and hit["metadata"]["site"] == "hq"
    assert 0 < hit["similarity"] <= 1 and hit["relevance"] == pytest.approx(
        (1 + hit["similarity"]) / 2
    )
    filtered = await client.post(
        f"{base}/search",
        json={"query": "rules", "filters": {"department": "it"}, "threshold": -1},
        headers=auth(api_key),
    )
    assert [h["source"] for h in filtered.json()["hits"]] == ["hb:badges"]

    listed = await client.get(f"{base}/documents", headers=auth(api_key))
    assert {d["source"] for d in listed.json()["items"]} == {"hb:travel", "hb:badges", "parking.md"}
    (chunk,) = (
        await client.get(f"{base}/chunks", params={"source": "parking.md"}, headers=auth(api_key))
    ).json()["items"]
    assert (chunk["position"], chunk["heading"]) == (0, "Parking")
    assert "lot B" in chunk["text"] and chunk["metadata"]["site"] == "hq"
    assert (
        await client.get(
            f"{base}/chunks", params={"source": "x", "limit": 0}, headers=auth(api_key)
        )
    ).status_code == 422
    deleted = await client.delete(
        f"{base}/documents", params={"source": "hb:travel"}, headers=auth(admin_key)
    )
    assert deleted.status_code == 204
    again = await client.delete(
        f"{base}/documents", params={"source": "hb:travel"}, headers=auth(admin_key)
    )
    assert again.status_code == 404
    assert again.headers["content-type"] == "application/problem+json"


async def test_refusals_are_problems_naming_the_field(
    client: httpx.AsyncClient,
    knowledge_state: ServerState,
    admin_key: str,
    api_key: str,
    other_tenant_key: str,
) -> None:
    base = "/v1/knowledge/collections/HANDBOOK"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"texts": [{"source": "x"}]}, "texts[0].text"),
        ({"urls": ["/etc/passwd"]}, "urls[0]"),
        ({}, "body"),
        ({"paths": ["x"]}, "paths"),
    ]
    for body, field in cases:
        response = await client.post(f"{base}/documents", json=body, headers=auth(admin_key))
        assert response.status_code == 422, (body, response.text)
        assert response.json()["errors"][0]["field"] == field
    plain = await client.post(f"{base}/documents", json={"texts": TEXTS}, headers=auth(api_key))
    assert plain.status_code == 403
    other = await client.post(f"{base}/search", json={"query": "x"}, headers=auth(other_tenant_key))
    assert other.status_code == 404
    wrong = await client.post(
        f"{base}/documents", content=b"x", headers={**auth(admin_key), "content-type": "text/csv"}
    )
    assert wrong.status_code == 415
    bad = await client.post(
        f"{base}/search", json={"query": "x", "top_k": 0}, headers=auth(api_key)
    )
    assert bad.status_code == 422 and bad.json()["errors"][0]["field"] == "top_k"
    private = await client.post(
        f"{base}/documents", json={"urls": ["http://127.0.0.1:9/x.txt"]}, headers=auth(admin_key)
    )
    assert private.json()["documents"][0]["status"] == "failed"
    assert "PILOTHOUSE_EGRESS_ALLOW" in private.json()["documents"][0]["error"]


async def test_embeddings_with_the_official_openai_client(
    app: Any, knowledge_state: ServerState, api_key: str
) -> None:
    import httpx2
    from openai import AsyncOpenAI, BadRequestError, NotFoundError

    # The official client is built on httpx2; its transport calls the app in-process.
    sdk_http = httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app))
    transport = httpx.ASGITransport(app=app)
    async with (
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as http,
        AsyncOpenAI(
            api_key=api_key, base_url="http://testserver/v1", http_client=sdk_http, max_retries=0
        ) as client,
    ):
        # The client asks for base64 by default and decodes it.
        result = await client.embeddings.create(model="MINILM", input=["hello world", "goodbye"])
        assert [d.index for d in result.data] == [0, 1]
        assert len(result.data[0].embedding) == 384
        assert sum(x * x for x in result.data[0].embedding) == pytest.approx(1.0, abs=1e-4)
        assert result.usage.prompt_tokens == 3 and result.model == "MINILM"
        floats = await client.embeddings.create(
            model="MINILM", input="hello world", encoding_format="float"
        )
        assert floats.data[0].embedding == pytest.approx(result.data[0].embedding, abs=1e-6)
        with pytest.raises(NotFoundError):
            await client.embeddings.create(model="NOPE", input="x")
        with pytest.raises(BadRequestError, match="dimensions"):
            await client.embeddings.create(model="MINILM", input="x", dimensions=256)
        with pytest.raises(BadRequestError, match="token ids"):
            await client.embeddings.create(model="MINILM", input=[["a"]])  # type: ignore[list-item]
        raw = await http.post(
            "/v1/embeddings",
            json={"model": "MINILM", "input": "hi", "encoding_format": "base64"},
            headers=auth(api_key),
        )
        packed = base64.b64decode(raw.json()["data"][0]["embedding"])
        assert len(struct.unpack(f"<{len(packed) // 4}f", packed)) == 384
        unknown = await http.post(
            "/v1/embeddings",
            json={"model": "MINILM", "input": "hi", "echo": True},
            headers=auth(api_key),
        )
        assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "echo"


async def test_embeddings_take_user_token_ids_and_opt_in_truncation(
    client: httpx.AsyncClient, knowledge_state: ServerState, api_key: str
) -> None:
    async def embed(**body: Any) -> httpx.Response:
        return await client.post(
            "/v1/embeddings", json={"model": "MINILM", **body}, headers=auth(api_key)
        )

    text = await embed(input=["hello world"], user="user-42")
    assert text.status_code == 200, text.text
    vector = text.json()["data"][0]["embedding"]
    # LangChain's default: the text as cl100k_base token ids ("hello world").
    hello_world = [15339, 1917]
    for tokens in ([hello_world], hello_world):
        ids = await embed(input=tokens)
        assert ids.status_code == 200, ids.text
        assert ids.json()["data"][0]["embedding"] == pytest.approx(vector, abs=1e-6)
    long = "word " * 400  # more than MiniLM's 256 tokens
    refused = await embed(input=long)
    assert refused.status_code == 400 and "256" in refused.json()["error"]["message"]
    cut = await embed(input=[long, "hello world"], truncate=True)
    assert cut.status_code == 200, cut.text
    assert cut.json()["usage"]["prompt_tokens"] <= 256 + 2
    assert cut.json()["data"][1]["embedding"] == pytest.approx(vector, abs=1e-6)
    bad = await embed(input="x", truncate="yes")
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "truncate"


async def test_invoke_retrieves_from_a_named_collection(
    client: httpx.AsyncClient,
    knowledge_state: ServerState,
    admin_key: str,
    scripted: ScriptedModel,
) -> None:
    await client.post(
        "/v1/knowledge/collections/HANDBOOK/documents",
        json={"texts": TEXTS},
        headers=auth(admin_key),
    )
    scripted.script.steps.append(Reply("Report it at the front desk [1]."))
    response = await client.post(
        "/v1/invoke",
        json={
            "agentName": "Helpdesk",
            "model": "SMOLLM2",
            "message": "I lost my badge, what now?",
            "collection": "HANDBOOK",
            "maxRagResults": 1,
        },
        headers=auth(admin_key),
    )
    assert response.status_code == 200, response.text
    assert response.json()["warnings"] == []
    system = str(getattr(scripted.requests[-1].messages[0].parts[0], "content", ""))
    assert "[1] Security (hb:badges; Security)" in system
    view = await knowledge_state.pilothouse.query.get_transcript(
        response.json()["conversationUuid"]
    )
    events = [e.data for e in view.timeline if e.kind is TimelineKind.RETRIEVAL]
    assert events[0]["searches"][0]["top_k"] == 1
    assert events[1]["citations"][0]["source"] == "hb:badges"


async def test_invoke_rag_parameters_are_checked(
    client: httpx.AsyncClient, knowledge_state: ServerState, api_key: str
) -> None:
    base = {"agentName": "Bot", "model": "SMOLLM2", "message": "hi"}
    cases: list[tuple[dict[str, Any], str, str]] = [
        ({"pgPort": 5433}, "pgPort", "need pgHost"),
        ({"maxRagResults": 3}, "maxRagResults", "need pgHost or collection"),
        # The default egress policy refuses loopback for what a caller names.
        ({"pgHost": "127.0.0.1"}, "pgHost", "private, local or reserved"),
        ({"pgHost": "db.invalid", "pgTable": "x; drop"}, "pgTable", "pattern"),
    ]
    for extra, field, rule in cases:
        response = await client.post("/v1/invoke", json={**base, **extra}, headers=auth(api_key))
        assert response.status_code == 400, (extra, response.text)
        error = response.json()["errors"][0]
        assert error["field"] == field and rule in error["rule"], (extra, error)


async def test_an_upload_may_be_larger_than_the_json_body_limit(
    client: httpx.AsyncClient, knowledge_state: ServerState, admin_key: str
) -> None:
    # Files up to 50 MiB are read: the upload route has its own limit
    # (max_upload_bytes), far above the 1 MiB every other body gets. A
    # large file that is no PDF at all is read and refused for what it is,
    # not for its size (and costs no embedding).
    big = b"%PDF-1.4\n" + b"\x00not really a pdf\n" * (2 * 1024 * 1024 // 18)
    assert len(big) > knowledge_state.server.max_body_bytes
    response = await client.post(
        "/v1/knowledge/collections/HANDBOOK/documents",
        files=[("files", ("scan.pdf", big, "application/pdf"))],
        headers=auth(admin_key),
    )
    assert response.status_code == 200, response.text[:300]
    assert response.json()["documents"][0]["status"] == "failed"
    # Any other route keeps the body limit.
    refused = await client.post(
        "/v1/knowledge/collections/HANDBOOK/search",
        json={"query": "x" * (2 * 1024 * 1024)},
        headers=auth(admin_key),
    )
    assert refused.status_code == 413


async def test_an_upload_over_its_own_limit_is_413_naming_it(
    knowledge_state: ServerState, admin_key: str
) -> None:
    from pilothouse.server._app import create_app
    from pilothouse.server._state import ServerSettings

    knowledge_state.server = ServerSettings(host="127.0.0.1", max_upload_bytes=64 * 1024)
    app = create_app(knowledge_state.settings, state=knowledge_state)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://testserver"
    ) as client:
        response = await client.post(
            "/v1/knowledge/collections/HANDBOOK/documents",
            files=[("files", ("big.txt", b"a" * (100 * 1024), "text/plain"))],
            headers=auth(admin_key),
        )
    assert response.status_code == 413
    assert "65536 bytes" in response.json()["detail"]


async def test_a_source_too_long_for_a_file_name_is_looked_up_as_given(
    client: httpx.AsyncClient, knowledge_state: ServerState, admin_key: str
) -> None:
    # A source is checked against the file system first (a file's source is
    # its resolved path); a name the OS refuses (ENAMETOOLONG) answered 500.
    base = "/v1/knowledge/collections/HANDBOOK"
    source = {"source": "x" * 5000}
    listed = await client.get(f"{base}/chunks", params=source, headers=auth(admin_key))
    assert (listed.status_code, listed.json()) == (200, {"items": []})
    deleted = await client.delete(f"{base}/documents", params=source, headers=auth(admin_key))
    assert deleted.status_code == 404, deleted.text
    assert "has no document" in deleted.json()["detail"]


async def test_a_source_over_the_service_is_taken_as_given_never_as_a_server_path(
    client: httpx.AsyncClient,
    knowledge_state: ServerState,
    admin_key: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A client's source names a document, not a file of the server: looking
    # it up there would tell the client which server paths exist, and find
    # another document than the one the client named.
    (tmp_path / "sub").mkdir()
    (tmp_path / "notes.md").write_text("the server's own file")
    sources = ["~/x", f"{tmp_path}/sub/../notes.md"]
    base = "/v1/knowledge/collections/HANDBOOK"
    texts = [{"source": s, "text": f"Document {s}.", "format": "text"} for s in sources]
    added = await client.post(f"{base}/documents", json={"texts": texts}, headers=auth(admin_key))
    assert added.status_code == 200, added.text
    looked_up: list[str] = []
    expanduser, stat = Path.expanduser, Path.stat

    def recording_expanduser(self: Path) -> Path:
        looked_up.append(str(self))
        return expanduser(self)

    def recording_stat(self: Path, **kwargs: Any) -> Any:
        looked_up.append(str(self))
        return stat(self, **kwargs)

    monkeypatch.setattr(Path, "expanduser", recording_expanduser)
    monkeypatch.setattr(Path, "stat", recording_stat)

    for source in sources:
        listed = await client.get(
            f"{base}/chunks", params={"source": source}, headers=auth(admin_key)
        )
        assert [c["text"] for c in listed.json()["items"]] == [f"Document {source}."]
        deleted = await client.delete(
            f"{base}/documents", params={"source": source}, headers=auth(admin_key)
        )
        assert deleted.status_code == 204, deleted.text

    assert [p for p in looked_up if "~" in p or "notes.md" in p] == []
