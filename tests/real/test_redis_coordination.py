"""Two ``pilothouse serve`` processes sharing the real Redis on 127.0.0.1:6379.

With ``PILOTHOUSE_REDIS_URL`` the processes (replicas on one database; the
same holds for the workers of ``serve --workers N``, which are processes
alike) behave as one service:

- a key's rate limit is counted once across both;
- a key revoked by another process (``pilothouse keys revoke``) is refused
  by both at once, though each cached it for five minutes;
- a cancel sent to one reaches the turn the other runs through Redis, while
  the database poll is set to a minute and so cannot be what delivers it.

Each test uses a Redis key prefix of its own (``PILOTHOUSE_REDIS_PREFIX``),
deleted at the end, so parallel runs never share a bucket or a channel.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from fault_upstream import Reply, Upstream, running_upstream, text_stream
from live_serve import PILOTHOUSE, ServeProcess, prepare_database
from ports import free_port
from sqlalchemy import select

from pilothouse.catalog._enums import TimelineKind
from pilothouse.store import Conversation, Database, TimelineEvent

pytestmark = [pytest.mark.real]

REDIS_URL = "redis://127.0.0.1:6379/0"

CATALOG = """\
providers:
  - code: RDSP
    kind: openai-compatible
    base_url: {base_url}
models:
  - code: RDSMODEL
    provider: RDSP
    model_name: mock
    capabilities: [SR]
configurations:
  - code: RDSC
    max_tokens: 64
    retry_count: 0
actions:
  - code: RDSTALK
    name: Talk slowly
    model: RDSMODEL
    configuration: RDSC
    prompt: Answer.
    ask_user: false
"""
SLOW = Reply(events=text_stream(*[f"w{i} " for i in range(300)]), delay=0.1)


@pytest.fixture
def prefix() -> Iterator[str]:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    try:
        client.ping()
    except redis.ConnectionError:
        pytest.fail("Redis must run on 127.0.0.1:6379 for the coordination tests")
    name = f"ph-test-{uuid.uuid4().hex}:"
    yield name
    for key in client.scan_iter(match=f"{name}*"):
        client.delete(key)
    client.close()


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        yield up


def _pair(
    tmp_path: Path, upstream: Upstream, prefix: str, **server: str
) -> tuple[str, str, ServeProcess, ServeProcess]:
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'shared.db'}"
    key = prepare_database(database_url, tmp_path, CATALOG.format(base_url=upstream.base_url))
    env = {
        "PILOTHOUSE_EGRESS_ALLOW": "127.0.0.1",
        "PILOTHOUSE_REDIS_URL": REDIS_URL,
        "PILOTHOUSE_REDIS_PREFIX": prefix,
        **{f"PILOTHOUSE_SERVER_{name.upper()}": value for name, value in server.items()},
    }
    processes = []
    for _ in range(2):
        port = free_port()
        processes.append(
            ServeProcess(database_url, tmp_path / f"serve-{port}.log", port, env=dict(env))
        )
    for process in processes:
        process.start()
    return database_url, key, processes[0], processes[1]


def _get(server: ServeProcess, key: str) -> int:
    with httpx.Client(base_url=f"{server.root}/v1", timeout=30) as http:
        return http.get("/conversations", headers={"Authorization": f"Bearer {key}"}).status_code


def test_a_key_s_rate_limit_is_counted_once_across_two_processes(
    tmp_path: Path, upstream: Upstream, prefix: str
) -> None:
    _, key, first, second = _pair(tmp_path, upstream, prefix, rate_limit_per_minute="6")
    try:
        answers = [_get(first if i % 2 == 0 else second, key) for i in range(6)]
        assert answers == [200] * 6
        # Per process each would still have 3 left; together the 6 are spent.
        assert _get(first, key) == 429
        assert _get(second, key) == 429
    finally:
        first.stop()
        second.stop()


def test_a_key_revoked_by_another_process_is_refused_by_both_at_once(
    tmp_path: Path, upstream: Upstream, prefix: str
) -> None:
    # Each process would trust a verified key for five minutes without Redis.
    database_url, key, first, second = _pair(tmp_path, upstream, prefix, key_cache_seconds="300")
    try:
        assert _get(first, key) == 200 and _get(second, key) == 200
        key_prefix = key.split("_")[1]
        # The revoking CLI is a process of the deployment: it has its Redis too.
        done = subprocess.run(
            [PILOTHOUSE, "--database-url", database_url, "keys", "revoke", key_prefix],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env={
                **os.environ,
                "PILOTHOUSE_REDIS_URL": REDIS_URL,
                "PILOTHOUSE_REDIS_PREFIX": prefix,
            },
        )
        assert done.returncode == 0, done.stderr
        # The published revocation is handled as it arrives; the loop only
        # covers the instant between the CLI's exit and its delivery.
        for server in (first, second):
            deadline = time.monotonic() + 5
            while (status := _get(server, key)) == 200 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert status == 401
    finally:
        first.stop()
        second.stop()


def _stream_turn(root: str, key: str, started: threading.Event, out: dict[str, Any]) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"{root}/v1", headers=headers, timeout=60) as http:
        created = http.post("/conversations", json={"action": "RDSTALK"})
        out["uuid"] = uuid_ = created.json()["uuid"]
        try:
            with http.stream(
                "POST", f"/conversations/{uuid_}/messages?stream=true", json={"text": "go"}
            ) as response:
                events: list[str] = []
                for line in response.iter_lines():
                    if line.startswith("event:"):
                        events.append(line.removeprefix("event:").strip())
                        if events[-1] == "delta":
                            started.set()
                out["events"] = events
        finally:
            started.set()


async def _timeline(database_url: str, uuid_: str) -> list[TimelineEvent]:
    db = Database(database_url)
    try:
        async with db.sessions() as session:
            conversation = await session.scalar(
                select(Conversation.id).where(Conversation.uuid == uuid_)
            )
            rows = await session.scalars(
                select(TimelineEvent)
                .where(TimelineEvent.conversation_id == conversation)
                .order_by(TimelineEvent.sequence)
            )
            return list(rows)
    finally:
        await db.dispose()


def test_a_cancel_published_in_one_process_reaches_the_turn_running_in_the_other(
    tmp_path: Path, upstream: Upstream, prefix: str
) -> None:
    upstream.script(SLOW)
    # The database poll comes once a minute: only Redis can deliver the
    # cancel within the cancel call's ten-second wait.
    database_url, key, runner, canceller = _pair(
        tmp_path, upstream, prefix, cancel_poll_seconds="60"
    )
    try:
        out: dict[str, Any] = {}
        started = threading.Event()
        thread = threading.Thread(
            target=_stream_turn, args=(runner.root, key, started, out), daemon=True
        )
        thread.start()
        assert started.wait(30)
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.Client(base_url=f"{canceller.root}/v1", headers=headers, timeout=60) as http:
            answer = http.post(f"/conversations/{out['uuid']}/cancel")
        assert answer.status_code == 200, answer.text
        assert answer.json()["cancelled_running_turn"] is True
        assert answer.json()["conversation"]["status"] == "TE"
        thread.join(30)
        assert out["events"][-1] == "finished", out
        timeline = anyio.run(_timeline, database_url, out["uuid"])
        (cancel,) = [e for e in timeline if e.kind is TimelineKind.CANCEL]
        assert cancel.data.get("requested_by") == "another process"
        # The stream was cut well before its 300 words (30 s at 0.1 s each).
        assert len(upstream.requests) == 1
    finally:
        runner.stop()
        canceller.stop()
