"""A crashed service, and a cancel across workers, on real ``pilothouse serve`` processes.

A slow OpenAI-compatible upstream (``fault_upstream``, a real HTTP server on
loopback) keeps turns running while the test acts:

- kill -9 of the service mid-turn leaves conversations ``RU``; the next
  ``pilothouse serve`` marks them ``ST`` with the reason at start-up, and
  ``pilothouse conversations recover`` retries or fails them;
- with ``serve --workers 2``, cancels sent on fresh connections (the kernel
  hands them to either worker) end the turn ``TE``, recorded by the worker
  that runs it, with a clean timeline and a proper answer for its client.

SQLite and PostgreSQL both.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fault_upstream import Reply, Upstream, completion, running_upstream, text_stream
from live_serve import ServeProcess, cli, prepare_database
from ports import free_port
from sqlalchemy import select

from pilothouse.catalog._enums import ProcessStatus, TimelineKind
from pilothouse.store import Conversation, Database, TimelineEvent
from pilothouse.store._records import TurnOwner

pytestmark = [pytest.mark.real]

CATALOG = """\
providers:
  - code: SLWP
    kind: openai-compatible
    base_url: {base_url}
models:
  - code: SLOWMODEL
    provider: SLWP
    model_name: mock
    capabilities: [SR]
configurations:
  - code: SLWC
    max_tokens: 64
    retry_count: 0
actions:
  - code: SLOWTALK
    name: Talk to a slow upstream
    model: SLOWMODEL
    configuration: SLWC
    prompt: Answer.
    ask_user: false
"""

SLOW = Reply(events=text_stream(*[f"w{i} " for i in range(200)]), delay=0.1)
# A retry from the CLI is not streamed: a plain completion.
QUICK = Reply(completion("recovered answer"))


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        yield up


def _serve(
    database_url: str, folder: Path, upstream: Upstream, workers: int = 1, grace: float = 5
) -> ServeProcess:
    port = free_port()
    return ServeProcess(
        database_url,
        folder / f"serve-{port}.log",
        port,
        workers=workers,
        env={"PILOTHOUSE_EGRESS_ALLOW": "127.0.0.1"},
        grace=grace,
    )


def _stream_turn(root: str, key: str, started: threading.Event, out: dict[str, Any]) -> None:
    """Start a conversation and stream a turn; note its uuid and what the client saw."""
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"{root}/v1", headers=headers, timeout=60) as http:
        created = http.post("/conversations", json={"action": "SLOWTALK"})
        assert created.status_code == 201, created.text
        out["uuid"] = uuid = created.json()["uuid"]
        try:
            with http.stream(
                "POST", f"/conversations/{uuid}/messages?stream=true", json={"text": "go"}
            ) as response:
                out["status"] = response.status_code
                events: list[str] = []
                for line in response.iter_lines():
                    if line.startswith("event:"):
                        events.append(line.removeprefix("event:").strip())
                        if events[-1] == "delta":
                            started.set()
                    elif (
                        line.startswith("data:") and events and events[-1] in ("finished", "error")
                    ):
                        out["final"] = (events[-1], json.loads(line.removeprefix("data:")))
                out["events"] = events
        except httpx.TransportError as exc:
            out["cut"] = type(exc).__name__
        finally:
            started.set()


async def _rows(database_url: str, uuids: list[str]) -> dict[str, Conversation]:
    db = Database(database_url)
    try:
        async with db.sessions() as session:
            rows = await session.scalars(select(Conversation).where(Conversation.uuid.in_(uuids)))
            return {row.uuid: row for row in rows}
    finally:
        await db.dispose()


async def _timeline(database_url: str, uuid: str) -> list[TimelineEvent]:
    db = Database(database_url)
    try:
        async with db.sessions() as session:
            conversation = await session.scalar(
                select(Conversation.id).where(Conversation.uuid == uuid)
            )
            rows = await session.scalars(
                select(TimelineEvent)
                .where(TimelineEvent.conversation_id == conversation)
                .order_by(TimelineEvent.sequence)
            )
            return list(rows)
    finally:
        await db.dispose()


def test_kill_9_mid_turn_then_restart_marks_the_turns_stuck_and_recover_ends_them(
    database_url: str, tmp_path: Path, upstream: Upstream
) -> None:
    key = prepare_database(database_url, tmp_path, CATALOG.format(base_url=upstream.base_url))
    upstream.script(SLOW)
    server = _serve(database_url, tmp_path, upstream)
    server.start()
    try:
        outs: list[dict[str, Any]] = [{} for _ in range(3)]
        starts = [threading.Event() for _ in outs]
        threads = [
            threading.Thread(target=_stream_turn, args=(server.root, key, s, o), daemon=True)
            for s, o in zip(starts, outs, strict=True)
        ]
        for thread in threads:
            thread.start()
        for started in starts:
            assert started.wait(30)
        server.kill9()
        for thread in threads:
            thread.join(30)
        uuids = [out["uuid"] for out in outs]
        before = anyio.run(_rows, database_url, uuids)
        assert {row.status for row in before.values()} == {ProcessStatus.RUNNING}

        server.start()
        after = anyio.run(_rows, database_url, uuids)
        for uuid in uuids:
            assert after[uuid].status is ProcessStatus.STUCK, uuid
            detail = after[uuid].error_detail or ""
            assert "is gone" in detail and "conversations recover" in detail
        # The dead process's turns are marked once, by the new process's sweep.
        last = anyio.run(_timeline, database_url, uuids[0])[-1]
        assert (last.kind, last.data["to"]) == (TimelineKind.STATUS_CHANGE, "ST")

        # Recovery, from the CLI while the service runs: one failed, the rest retried.
        upstream.script(QUICK)
        failed = cli(database_url, "conversations", "recover", uuids[0], "--fail")
        assert f"{uuids[0]}: recorded FA" in failed
        retried = cli(database_url, "conversations", "recover", "--all", "--retry")
        for uuid in uuids[1:]:
            assert f"{uuid}: retried, now CO" in retried
        final = anyio.run(_rows, database_url, uuids)
        assert final[uuids[0]].status is ProcessStatus.FAILED
        assert {final[u].status for u in uuids[1:]} == {ProcessStatus.COMPLETED}
    finally:
        server.stop()


def test_a_cancel_on_another_worker_or_replica_ends_the_turn_te_with_a_proper_answer(
    database_url: str, tmp_path: Path, upstream: Upstream
) -> None:
    """Turns run on ``serve --workers 2``; cancels come to it (either worker) or to a replica.

    The kernel tends to hand an idle service's connections to one worker, so
    a second service on the same database (a replica) makes sure a cancel
    reaches a turn another process runs.
    """
    key = prepare_database(database_url, tmp_path, CATALOG.format(base_url=upstream.base_url))
    upstream.script(SLOW)
    server = _serve(database_url, tmp_path, upstream, workers=2)
    replica = _serve(database_url, tmp_path, upstream)
    server.start()
    replica.start()
    headers = {"Authorization": f"Bearer {key}"}
    crossed = 0
    try:
        for cancel_at in (server, replica, server, replica):
            out: dict[str, Any] = {}
            started = threading.Event()
            thread = threading.Thread(
                target=_stream_turn, args=(server.root, key, started, out), daemon=True
            )
            thread.start()
            assert started.wait(30)
            # A fresh connection: either worker of the service may accept it.
            with httpx.Client(base_url=f"{cancel_at.root}/v1", headers=headers, timeout=60) as c:
                answer = c.post(f"/conversations/{out['uuid']}/cancel")
            assert answer.status_code == 200, answer.text
            assert answer.json()["cancelled_running_turn"] is True
            assert answer.json()["conversation"]["status"] == "TE"
            thread.join(30)
            # The streaming client got its final event, not a cut stream.
            assert "cut" not in out, out
            assert out["final"][0] == "finished", out
            assert out["final"][1]["status"] == "TE"
            timeline = anyio.run(_timeline, database_url, out["uuid"])
            sequences = [event.sequence for event in timeline]
            assert sequences == list(range(1, len(sequences) + 1))
            cancels = [e for e in timeline if e.kind is TimelineKind.CANCEL]
            assert len(cancels) == 1
            if cancels[0].data.get("requested_by") == "another process":
                crossed += 1
            elif cancel_at is replica:
                raise AssertionError("a replica's cancel was not handed to the turn's owner")
        assert crossed >= 2
        # Two workers and the replica hold leases.
        assert len(anyio.run(_owners, database_url)) == 3
    finally:
        replica.stop()
        server.stop()


async def _owners(database_url: str) -> list[TurnOwner]:
    db = Database(database_url)
    try:
        async with db.sessions() as session:
            return list(await session.scalars(select(TurnOwner)))
    finally:
        await db.dispose()


def test_a_stopped_service_gives_its_lease_up(
    database_url: str, tmp_path: Path, upstream: Upstream
) -> None:
    prepare_database(database_url, tmp_path, CATALOG.format(base_url=upstream.base_url))
    server = _serve(database_url, tmp_path, upstream)
    server.start()
    time.sleep(0.5)
    assert len(anyio.run(_owners, database_url)) == 1
    assert server.terminate() == 0
    assert anyio.run(_owners, database_url) == []


def test_sigterm_mid_turn_answers_503_with_retry_after_and_records_te(
    database_url: str, tmp_path: Path, upstream: Upstream
) -> None:
    """SIGTERM while a JSON turn and a streamed turn wait on a slow upstream."""
    key = prepare_database(database_url, tmp_path, CATALOG.format(base_url=upstream.base_url))
    upstream.script(SLOW)
    # The slow turns outlast any grace: a short one stops them sooner, as a long one would.
    server = _serve(database_url, tmp_path, upstream, grace=1)
    server.start()
    headers = {"Authorization": f"Bearer {key}"}
    streamed: dict[str, Any] = {}
    started = threading.Event()
    plain: dict[str, Any] = {}

    def plain_turn() -> None:
        with httpx.Client(base_url=f"{server.root}/v1", headers=headers, timeout=60) as http:
            uuid = http.post("/conversations", json={"action": "SLOWTALK"}).json()["uuid"]
            plain["uuid"] = uuid
            try:
                plain["response"] = http.post(
                    f"/conversations/{uuid}/messages", json={"text": "go"}
                )
            except httpx.TransportError as exc:
                plain["cut"] = type(exc).__name__

    try:
        stream_thread = threading.Thread(
            target=_stream_turn, args=(server.root, key, started, streamed), daemon=True
        )
        plain_thread = threading.Thread(target=plain_turn, daemon=True)
        stream_thread.start()
        plain_thread.start()
        assert started.wait(30)
        time.sleep(0.5)
        assert server.terminate() == 0
        stream_thread.join(30)
        plain_thread.join(30)
    finally:
        server.stop()
    # The JSON request: 503 with Retry-After, not a 500 or a cut connection.
    assert "cut" not in plain, plain
    response: httpx.Response = plain["response"]
    assert response.status_code == 503, response.text
    assert int(response.headers["Retry-After"]) >= 1
    assert "shutting down" in response.json()["detail"]
    # The stream: a final error event, not a cut stream.
    assert "cut" not in streamed, streamed
    assert streamed["final"][0] == "error", streamed
    assert streamed["final"][1]["status"] == 503
    rows = anyio.run(_rows, database_url, [plain["uuid"], streamed["uuid"]])
    assert {row.status for row in rows.values()} == {ProcessStatus.TERMINATED}
    cancels = [
        e
        for e in anyio.run(_timeline, database_url, plain["uuid"])
        if e.kind is TimelineKind.CANCEL
    ]
    assert cancels[0].data["requested_by"] == "shutdown"
