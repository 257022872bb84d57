"""The knowledge and memory pages of the browser UI, through the app.

Collections with the packaged MiniLM on the embedded store: an upload
streams its progress and its result, the documents list shows it, its
chunks come in document order a page at a time, a search shows each hit's
similarity and score. The memory page (admin keys only) browses, edits,
forgets, exports and erases one user's memory, and nobody else's.
"""

from __future__ import annotations

import json

import httpx
import pytest
from server_helpers import ExamplesAnd, parse_sse

from database_templates import Seed
from pilothouse.server._state import ServerState
from pilothouse.types import MemoryScope

pytestmark = pytest.mark.anyio

EXTRA = """
vector_stores:
  - code: EMBED
document_collections:
  - code: HANDBOOK
    name: Staff handbook
    store: EMBED
    collection_name: handbook
    similarity_threshold: 0.1
    chunk_size: 32
    chunk_overlap: 0
  - code: OLD
    store: EMBED
    collection_name: old
    active: false
"""

HANDBOOK = "# Handbook\n\n" + "\n\n".join(
    f"## Rule {i}\n\nRule number {i} says: keep the office plant number {i} watered daily."
    for i in range(30)
)


@pytest.fixture
def database_seed() -> Seed:
    return ExamplesAnd(EXTRA)


async def _login(client: httpx.AsyncClient, key: str) -> None:
    client.headers["Origin"] = "http://testserver"
    response = await client.post("/login", data={"api_key": key})
    assert response.status_code == 303, response.text


async def _upload(client: httpx.AsyncClient, files: list[tuple[str, bytes]]) -> httpx.Response:
    return await client.post(
        "/ui/knowledge/HANDBOOK/upload",
        files=[("files", (name, data, "text/markdown")) for name, data in files],
    )


async def test_upload_streams_progress_then_documents_chunks_and_search(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    await _login(client, admin_key)
    listing = await client.get("/knowledge")
    assert listing.status_code == 200
    assert 'href="/knowledge/HANDBOOK"' in listing.text and "/knowledge/OLD" not in listing.text
    page = await client.get("/knowledge/HANDBOOK")
    assert page.status_code == 200 and "No documents yet." in page.text
    assert 'id="upload-files"' in page.text

    response = await _upload(
        client, [("handbook.md", HANDBOOK.encode()), ("notes.md", b"# Notes\n\nLunch at noon.")]
    )
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    events = parse_sse(response.text)
    steps = [(d["event"], d["source"]) for name, d in events if name == "progress"]
    assert ("started", "handbook.md") in steps and ("done", "handbook.md") in steps
    assert ("done", "notes.md") in steps
    assert events[-1][0] == "result"
    documents = {d["source"]: d for d in events[-1][1]["documents"]}
    assert documents["handbook.md"]["status"] == "added"
    chunk_count = int(documents["handbook.md"]["chunks"])
    assert chunk_count > 20  # more than one page of chunks

    listed = await client.get("/ui/knowledge/HANDBOOK/documents")
    assert "handbook.md" in listed.text and "notes.md" in listed.text
    first = await client.get("/ui/knowledge/HANDBOOK/chunks", params={"source": "handbook.md"})
    assert first.status_code == 200
    assert "Rule number 0 says" in first.text and "Rule number 29 says" not in first.text
    assert "Next chunks" in first.text and "Previous chunks" not in first.text
    second = await client.get(
        "/ui/knowledge/HANDBOOK/chunks", params={"source": "handbook.md", "offset": 20}
    )
    assert "Rule number 29 says" in second.text and "Rule number 0 says" not in second.text
    assert "Previous chunks" in second.text
    assert f"Chunk {chunk_count} " in second.text

    hits = await client.get(
        "/ui/knowledge/HANDBOOK/search", params={"q": "when is lunch", "top_k": 3}
    )
    assert hits.status_code == 200
    assert "notes.md" in hits.text and 'class="similarity">0.' in hits.text
    assert 'class="score">' in hits.text and "mode hybrid" in hits.text


async def test_knowledge_refusals_are_clear(
    client: httpx.AsyncClient, admin_key: str, api_key: str
) -> None:
    await _login(client, admin_key)
    assert (await client.post("/ui/knowledge/HANDBOOK/upload", files=[])).status_code == 422
    odd = await client.post(
        "/ui/knowledge/HANDBOOK/upload",
        data={"colour": "red"},
        files=[("files", ("a.md", b"# A", "text/markdown"))],
    )
    assert odd.status_code == 422 and "colour" in odd.text
    inactive = await client.get("/knowledge/OLD", headers={"Accept": "text/html"})
    assert inactive.status_code == 404 and "text/html" in inactive.headers["content-type"]
    assert (await client.get("/ui/knowledge/HANDBOOK/search", params={"q": " "})).status_code == 422
    for top_k in ("0", "x", "51"):
        bad = await client.get("/ui/knowledge/HANDBOOK/search", params={"q": "a", "top_k": top_k})
        assert bad.status_code == 422 and "top_k" in bad.text
    # The form's untouched fields: the collection's own top_k and mode.
    own = await client.get(
        "/ui/knowledge/HANDBOOK/search", params={"q": "lunch", "top_k": "", "mode": ""}
    )
    assert own.status_code == 200 and "mode hybrid" in own.text
    paged = await client.get("/ui/knowledge/HANDBOOK/chunks", params={"source": "x", "offset": -1})
    assert paged.status_code == 422
    # A key without the admin scope reads, and may not upload.
    await client.post("/logout")
    await _login(client, api_key)
    assert (await client.get("/knowledge/HANDBOOK")).status_code == 200
    refused = await _upload(client, [("a.md", b"# A")])
    assert refused.status_code == 403


async def test_the_memory_page_browses_edits_forgets_exports_and_erases_one_user(
    client: httpx.AsyncClient, admin_key: str, api_key: str, server_state: ServerState
) -> None:
    ph = server_state.pilothouse
    alice = MemoryScope("user", user_id="alice")
    tea = await ph.memory.add("Alice drinks green tea.", alice)
    await ph.memory.add("Alice lives in Lyon.", alice)
    await ph.memory.add("Bob likes chess.", MemoryScope("user", user_id="bob"))
    await _login(client, admin_key)
    empty = await client.get("/memory")
    assert empty.status_code == 200 and 'id="memory-user"' in empty.text
    page = await client.get("/memory", params={"user": "alice"})
    assert "Alice drinks green tea." in page.text and "Alice lives in Lyon." in page.text
    assert "Bob likes chess." not in page.text

    edited = await client.post(
        f"/ui/memory/alice/records/{tea.id}",
        data={"content": "Alice drinks black tea.", "importance": "0.5"},
    )
    assert edited.status_code == 200 and "Alice drinks black tea." in edited.text
    stored = await ph.memory.get(tea.id, alice)
    assert (stored.content, stored.importance) == ("Alice drinks black tea.", 0.5)
    # Another user's record is not found through alice's page.
    bob_item = (await ph.memory.list(MemoryScope("user", user_id="bob")))[0]
    crossed = await client.post(f"/ui/memory/alice/records/{bob_item.id}/forget")
    assert crossed.status_code == 404
    assert (await ph.memory.get(bob_item.id, MemoryScope("user", user_id="bob"))).content

    forgot = await client.post(f"/ui/memory/alice/records/{tea.id}/forget")
    assert forgot.status_code == 200 and "black tea" not in forgot.text
    assert "Alice lives in Lyon." in forgot.text

    exported = await client.get("/ui/memory/alice/export")
    assert exported.status_code == 200
    assert 'filename="user-alice.json"' in exported.headers["content-disposition"]
    document = json.loads(exported.text)
    assert (
        document["user_id"] == "alice" and "Lyon" in exported.text and "chess" not in exported.text
    )

    wrong = await client.post("/ui/memory/alice/erase", data={"confirm": "alicia"})
    assert wrong.status_code == 422 and "nothing was erased" in wrong.text
    assert len(await ph.memory.list(alice)) == 1
    erased = await client.post(
        "/ui/memory/alice/erase", data={"confirm": "alice", "reason": "asked by alice"}
    )
    assert erased.status_code == 200 and "Erased: 1 memory records" in erased.text
    assert await ph.memory.list(alice) == []
    assert len(await ph.memory.list(MemoryScope("user", user_id="bob"))) == 1
    (event,) = await ph.memory.erasures("alice")
    assert "asked by alice" in json.dumps(event)

    # Only admin keys see anyone's memory.
    await client.post("/logout")
    await _login(client, api_key)
    assert (await client.get("/memory", params={"user": "bob"})).status_code == 403
    assert (await client.get("/ui/memory/bob/export")).status_code == 403
