"""Background ingestion over REST: 202 with a job id, progress to read, failure said honestly.

The collection is on the embedded store with the packaged MiniLM. A job
whose process is gone (its lease row removed, as a stopped service leaves
it) reads ``failed`` with why instead of ``running`` for ever.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from pilothouse.server._state import ServerState
from pilothouse.store import Database
from pilothouse.testing import CatalogBuilder

pytestmark = pytest.mark.anyio

BASE = "/v1/knowledge/collections/HANDBOOK"
CATALOG = (
    CatalogBuilder(scripted=False)
    .add("vector_stores", code="EMBED")
    .add(
        "document_collections",
        code="HANDBOOK",
        store="EMBED",
        collection_name="handbook",
        chunk_size=40,
        chunk_overlap=0,
    )
)
# One long document cut into many chunks, and two short ones.
LONG = " ".join(f"Rule {n}: visitors sign in at desk {n} before noon." for n in range(120))
TEXTS = [
    {"source": "hb:rules", "text": LONG},
    {"source": "hb:travel", "text": "Book trains for trips under four hours."},
    {"source": "hb:badges", "text": "Report lost badges to the front desk at once."},
]


def auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.fixture
async def knowledge_state(server_state: ServerState) -> AsyncIterator[ServerState]:
    await server_state.pilothouse.catalog.import_text(CATALOG.yaml())
    yield server_state


async def _until_finished(client: httpx.AsyncClient, url: str, key: str) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    for _ in range(600):
        response = await client.get(url, headers=auth(key))
        assert response.status_code == 200, response.text
        seen.append(response.json())
        if seen[-1]["status"] != "running":
            return seen
        await asyncio.sleep(0.05)
    raise AssertionError(f"the job did not finish: {seen[-1]}")


async def test_a_job_answers_202_at_once_and_reports_chunks_embedded(
    client: httpx.AsyncClient, knowledge_state: ServerState, admin_key: str, api_key: str
) -> None:
    started = await client.post(f"{BASE}/jobs", json={"texts": TEXTS}, headers=auth(admin_key))
    assert started.status_code == 202, started.text
    job = started.json()
    assert job["status"] == "running" and job["progress"]["documents_total"] == 3
    url = f"{BASE}/jobs/{job['job_id']}"
    assert started.headers["location"] == url
    # A read-only key of the tenant may follow the job.
    seen = await _until_finished(client, url, api_key)
    final = seen[-1]
    assert final["status"] == "done", final
    assert final["result"]["counts"]["added"] == 3
    chunks = sum(d["chunks"] for d in final["result"]["documents"])
    assert chunks > 10
    assert final["progress"] == {
        "documents_total": 3,
        "documents_done": 3,
        "chunks_total": chunks,
        "chunks_embedded": chunks,
    }
    assert final["finished_at"] is not None
    listed = await client.get(f"{BASE}/documents", headers=auth(api_key))
    assert {d["source"] for d in listed.json()["items"]} == {t["source"] for t in TEXTS}


async def test_a_job_of_another_tenant_or_collection_is_not_found(
    client: httpx.AsyncClient, knowledge_state: ServerState, admin_key: str
) -> None:
    started = await client.post(f"{BASE}/jobs", json={"texts": TEXTS[1:]}, headers=auth(admin_key))
    job_id = started.json()["job_id"]
    other, _ = await knowledge_state.pilothouse.keys.create(tenant="acme", name="acme")
    response = await client.get(f"{BASE}/jobs/{job_id}", headers=auth(other))
    assert response.status_code == 404
    wrong = await client.get(
        f"/v1/knowledge/collections/OTHER/jobs/{job_id}", headers=auth(admin_key)
    )
    assert wrong.status_code == 404
    await _until_finished(client, f"{BASE}/jobs/{job_id}", admin_key)


async def test_bad_requests_are_refused_before_a_job_starts(
    client: httpx.AsyncClient, knowledge_state: ServerState, admin_key: str, api_key: str
) -> None:
    missing = await client.post(
        "/v1/knowledge/collections/NOPE/jobs", json={"texts": TEXTS}, headers=auth(admin_key)
    )
    assert missing.status_code == 404
    unknown = await client.post(
        f"{BASE}/jobs", json={"texts": TEXTS, "wait": True}, headers=auth(admin_key)
    )
    assert unknown.status_code == 422 and "wait" in unknown.text
    reader = await client.post(f"{BASE}/jobs", json={"texts": TEXTS}, headers=auth(api_key))
    assert reader.status_code == 403


async def test_a_job_whose_process_is_gone_reads_failed_with_why(
    client: httpx.AsyncClient, knowledge_state: ServerState, admin_key: str
) -> None:
    from pilothouse.knowledge._tables import IngestJob

    started = await client.post(f"{BASE}/jobs", json={"texts": TEXTS[1:]}, headers=auth(admin_key))
    job_id = started.json()["job_id"]
    await _until_finished(client, f"{BASE}/jobs/{job_id}", admin_key)
    # As a restarted service finds it: running, under a process that stopped.
    database = Database(knowledge_state.pilothouse.settings.database_url)
    async with database.sessions() as session, session.begin():
        await session.execute(
            update(IngestJob)
            .where(IngestJob.job_id == job_id)
            .values(status="running", owner="a-process-that-stopped", finished_at=None)
        )
    await database.dispose()
    final = (await client.get(f"{BASE}/jobs/{job_id}", headers=auth(admin_key))).json()
    assert final["status"] == "failed"
    assert "gone (its process stopped) before the job finished" in final["error"]
    assert "ingest the same sources again" in final["error"]


async def test_a_tenant_runs_a_bounded_number_of_jobs_at_once(
    client: httpx.AsyncClient,
    knowledge_state: ServerState,
    admin_key: str,
    other_tenant_key: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each running job holds its documents in memory: one tenant cannot start them without end.

    The jobs are held in their cutting step until the test lets them go.
    """
    import threading

    from pilothouse.knowledge._tokenizers import WordPieceTokenizer

    release = threading.Event()
    real_spans = WordPieceTokenizer.spans

    def held_spans(self: WordPieceTokenizer, text: str) -> Any:
        release.wait(timeout=30)
        return real_spans(self, text)

    monkeypatch.setattr(WordPieceTokenizer, "spans", held_spans)
    body = {"texts": [TEXTS[1]]}
    other_catalog = CATALOG.yaml()
    other = {"Authorization": f"Bearer {other_tenant_key}", "Content-Type": "application/yaml"}
    assert (await client.put("/v1/catalog", content=other_catalog, headers=other)).is_success
    try:
        started = [
            await client.post(f"{BASE}/jobs", json=body, headers=auth(admin_key)) for _ in range(4)
        ]
        assert [r.status_code for r in started] == [202] * 4, [r.text for r in started]
        refused = await client.post(f"{BASE}/jobs", json=body, headers=auth(admin_key))
        assert refused.status_code == 429, refused.text
        assert refused.headers["retry-after"] == "5"
        assert "4 ingestions of this tenant are running" in refused.json()["detail"]
        # Another tenant's jobs are its own.
        theirs = await client.post(f"{BASE}/jobs", json=body, headers=auth(other_tenant_key))
        assert theirs.status_code == 202, theirs.text
    finally:
        release.set()
    for response in started:
        seen = await _until_finished(client, f"{BASE}/jobs/{response.json()['job_id']}", admin_key)
        assert seen[-1]["status"] == "done", seen[-1]
    # With the jobs done, the tenant starts another.
    again = await client.post(f"{BASE}/jobs", json=body, headers=auth(admin_key))
    assert again.status_code == 202, again.text
    await _until_finished(client, f"{BASE}/jobs/{again.json()['job_id']}", admin_key)


async def test_synchronous_ingestions_count_with_the_tenants_jobs(
    client: httpx.AsyncClient,
    knowledge_state: ServerState,
    admin_key: str,
    other_tenant_key: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A synchronous ingestion holds its documents as a job does: both share one bound.

    Two jobs and two synchronous ingestions are held in their cutting step;
    the test waits until all four are there, so each request it sends after
    meets four running ingestions of the tenant.
    """
    import threading

    from pilothouse.knowledge._tokenizers import WordPieceTokenizer

    release = threading.Event()
    arrived = threading.Semaphore(0)
    real_spans = WordPieceTokenizer.spans

    def held_spans(self: WordPieceTokenizer, text: str) -> Any:
        arrived.release()
        release.wait(timeout=30)
        return real_spans(self, text)

    async def until_held(count: int) -> None:
        for _ in range(count):
            assert await asyncio.to_thread(arrived.acquire, timeout=30)

    monkeypatch.setattr(WordPieceTokenizer, "spans", held_spans)
    body = {"texts": [TEXTS[1]]}
    other_catalog = CATALOG.yaml()
    other = {"Authorization": f"Bearer {other_tenant_key}", "Content-Type": "application/yaml"}
    assert (await client.put("/v1/catalog", content=other_catalog, headers=other)).is_success
    jobs: list[httpx.Response] = []
    synchronous: list[asyncio.Task[httpx.Response]] = []
    try:
        jobs = [
            await client.post(f"{BASE}/jobs", json=body, headers=auth(admin_key)) for _ in range(2)
        ]
        assert [r.status_code for r in jobs] == [202] * 2, [r.text for r in jobs]
        synchronous = [
            asyncio.create_task(
                client.post(f"{BASE}/documents", json=body, headers=auth(admin_key))
            )
            for _ in range(2)
        ]
        await until_held(4)
        refused = await client.post(f"{BASE}/documents", json=body, headers=auth(admin_key))
        assert refused.status_code == 429, refused.text
        assert refused.headers["retry-after"] == "5"
        detail = refused.json()["detail"]
        assert "4 ingestions of this tenant are running (2 of them background jobs)" in detail
        assert "send this one again" in detail
        # A reingestion is an ingestion too, and so is a job.
        again = {**body, "reingest": True}
        refused = await client.post(f"{BASE}/documents", json=again, headers=auth(admin_key))
        assert refused.status_code == 429, refused.text
        refused = await client.post(f"{BASE}/jobs", json=body, headers=auth(admin_key))
        assert refused.status_code == 429, refused.text
        # Another tenant's ingestions are its own.
        synchronous.append(
            asyncio.create_task(
                client.post(f"{BASE}/documents", json=body, headers=auth(other_tenant_key))
            )
        )
        await until_held(1)
    finally:
        release.set()
    done = await asyncio.gather(*synchronous)
    assert [r.status_code for r in done] == [200] * 3, [r.text for r in done]
    for response in jobs:
        seen = await _until_finished(client, f"{BASE}/jobs/{response.json()['job_id']}", admin_key)
        assert seen[-1]["status"] == "done", seen[-1]
    # With the ingestions finished, the tenant ingests again, synchronously.
    after = await client.post(f"{BASE}/documents", json=body, headers=auth(admin_key))
    assert after.status_code == 200, after.text
    assert after.json()["documents"][0]["status"] == "unchanged"
