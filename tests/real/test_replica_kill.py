"""A replica killed (kill -9) under load loses no acknowledged turn.

Two ``pilothouse serve`` replicas (two workers each) share one PostgreSQL
database and one Redis, as docs/operations.md describes. Clients send turns
to both in turn; once the first replica has answered a number of turns it is
killed with SIGKILL (its whole process group: no shutdown code runs), while
turns are in flight on it. The clients go on against the other replica.
Every turn a client was answered for (HTTP 200, status ``CO``) must then be
in the database as it was answered: completed, with the user's message and
the answer. Turns cut off by the kill were never acknowledged; what happens
to them is crash recovery's (docs/operations.md).
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx
import pytest
from fault_upstream import Reply, Upstream, completion, running_upstream
from live_serve import ServeProcess, prepare_database
from ports import free_port
from sqlalchemy import select

from pilothouse.catalog._enums import MessageRole, ProcessStatus
from pilothouse.store import Conversation, Database, Message

pytestmark = [pytest.mark.real, pytest.mark.postgres]

REDIS_URL = "redis://127.0.0.1:6379/0"
CLIENTS = 6
KILL_AFTER = 12
"""Turns the first replica answers before it is killed."""
AFTER_KILL = 12
"""Turns the second replica answers after the kill before the clients stop."""

CATALOG = """\
providers:
  - code: RPLP
    kind: openai-compatible
    base_url: {base_url}
models:
  - code: RPLMODEL
    provider: RPLP
    model_name: mock
configurations:
  - code: RPLC
    max_tokens: 64
    retry_count: 0
actions:
  - code: RPLTALK
    name: Talk
    model: RPLMODEL
    configuration: RPLC
    prompt: Answer.
    ask_user: false
"""


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        up.script(Reply(body=completion("the answer")))
        yield up


class Load:
    """Clients sending turns round-robin to the replicas still up."""

    def __init__(self, key: str, replicas: list[ServeProcess]) -> None:
        self.key = key
        self.replicas = replicas
        self.up = list(replicas)
        self.lock = threading.Lock()
        self.acknowledged: list[tuple[str, str, int]] = []
        """(conversation uuid, the user's text, the replica's port) of each answered turn."""
        self.failures = 0
        self.turn = 0
        self.stop = threading.Event()
        self.first_done = threading.Event()

    def _next(self) -> ServeProcess:
        with self.lock:
            self.turn += 1
            return self.up[self.turn % len(self.up)]

    def answered(self, port: int) -> int:
        with self.lock:
            return sum(1 for _, _, p in self.acknowledged if p == port)

    def client(self) -> None:
        headers = {"Authorization": f"Bearer {self.key}"}
        with httpx.Client(timeout=60, headers=headers) as http:
            while not self.stop.is_set():
                replica = self._next()
                text = f"question {uuid.uuid4().hex}"
                try:
                    started = http.post(
                        f"{replica.root}/v1/conversations", json={"action": "RPLTALK"}
                    )
                    started.raise_for_status()
                    conversation = started.json()["uuid"]
                    answer = http.post(
                        f"{replica.root}/v1/conversations/{conversation}/messages",
                        json={"text": text},
                    )
                except httpx.TransportError:
                    with self.lock:
                        self.failures += 1
                    continue
                body = answer.json()
                if answer.status_code == 200 and body["status"] == "CO":
                    assert body["output"] == "the answer"
                    with self.lock:
                        self.acknowledged.append((conversation, text, replica.port))


async def _stored(database_url: str, uuids: list[str]) -> dict[str, tuple[str, list[str]]]:
    database = Database(database_url)
    try:
        async with database.sessions() as session:
            rows = (
                await session.execute(
                    select(Conversation.uuid, Conversation.status, Message.role, Message.content)
                    .join(Message, Message.conversation_id == Conversation.id)
                    .where(Conversation.uuid.in_(uuids))
                    .order_by(Conversation.uuid, Message.sequence)
                )
            ).all()
    finally:
        await database.dispose()
    stored: dict[str, tuple[str, list[str]]] = {}
    for conversation, status, role, content in rows:
        entry = stored.setdefault(conversation, (ProcessStatus(status).value, []))
        if role in (MessageRole.USER, MessageRole.ASSISTANT):
            entry[1].append(content)
    return stored


def test_a_replica_killed_under_load_loses_no_acknowledged_turn(
    tmp_path: Path, upstream: Upstream, postgres_database_url: str
) -> None:
    database_url = postgres_database_url
    key = prepare_database(database_url, tmp_path, CATALOG.format(base_url=upstream.base_url))
    env = {
        "PILOTHOUSE_EGRESS_ALLOW": "127.0.0.1",
        "PILOTHOUSE_REDIS_URL": REDIS_URL,
        "PILOTHOUSE_REDIS_PREFIX": f"ph-test-{uuid.uuid4().hex}:",
        "PILOTHOUSE_SERVER_RATE_LIMIT_PER_MINUTE": "0",
    }
    replicas = []
    for _ in range(2):
        port = free_port()
        replicas.append(
            ServeProcess(
                database_url, tmp_path / f"serve-{port}.log", port, workers=2, env=dict(env)
            )
        )
    load = Load(key, replicas)
    threads = [threading.Thread(target=load.client) for _ in range(CLIENTS)]
    try:
        for replica in replicas:
            replica.start()
        for thread in threads:
            thread.start()
        doomed, survivor = replicas
        while load.answered(doomed.port) < KILL_AFTER:
            assert all(t.is_alive() for t in threads), "a client stopped"
            threading.Event().wait(0.05)
        with load.lock:
            load.up = [survivor]
        doomed.kill9()
        killed_with = load.answered(doomed.port)
        before = load.answered(survivor.port)
        while load.answered(survivor.port) < before + AFTER_KILL:
            assert all(t.is_alive() for t in threads), "a client stopped"
            threading.Event().wait(0.05)
    finally:
        load.stop.set()
        for thread in threads:
            thread.join(60)
        for replica in replicas:
            replica.stop()
    acknowledged = list(load.acknowledged)
    assert killed_with >= KILL_AFTER
    stored = anyio.run(_stored, database_url, [uuid for uuid, _, _ in acknowledged])
    lost = [
        (conversation, port)
        for conversation, text, port in acknowledged
        if stored.get(conversation) != ("CO", [text, "the answer"])
    ]
    assert lost == [], f"{len(lost)} of {len(acknowledged)} answered turns not stored as answered"
