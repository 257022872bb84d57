"""A new conversation's start record and its first request, on real PostgreSQL and HTTP.

On PostgreSQL pilothouse sends the statement that records a new conversation
with its first message, builds the model request while the server commits
it, and lets the request leave only once it has committed. These tests
watch from the model's side: a loopback Chat Completions server that, as
each request arrives, reads the database on a connection of its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from uuid import uuid4

import anyio
import asyncpg
import pytest
from fault_upstream import Reply, Upstream, completion, running_upstream
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy.engine import make_url

from pilothouse.api import Pilothouse
from pilothouse.catalog import ProcessStatus, TimelineKind
from pilothouse.errors import PilothouseError
from pilothouse.runtime import TurnResult
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder

pytestmark = [pytest.mark.anyio, pytest.mark.real, pytest.mark.postgres]


def catalog(base_url: str, prompt: str = "Answer briefly.") -> CatalogBuilder:
    """An action on the loopback server that runs nothing but its model call."""
    return (
        CatalogBuilder()
        .provider("LOOP", kind="openai-compatible", base_url=base_url)
        .model("LOOPM", provider="LOOP", model_name="mock")
        .configuration("LOPC", max_tokens=16, retry_count=0)
        .action("ASK", prompt=prompt, model="LOOPM", configuration="LOPC", ask_user=False)
    )


def asyncpg_dsn(url: str) -> str:
    """The test database's URL as asyncpg takes it."""
    return make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)


def settings(url: str) -> Settings:
    return Settings(database_url=url, egress_allow=["127.0.0.1"])


def watch_commits(upstream: Upstream, url: str) -> list[tuple[str, int]]:
    """On each request: how many committed user messages carry its question."""
    seen: list[tuple[str, int]] = []

    async def check(body: dict[str, Any]) -> None:
        question = body["messages"][-1]["content"]
        connection = await asyncpg.connect(asyncpg_dsn(url))
        try:
            count = await connection.fetchval(
                "SELECT count(*) FROM message WHERE role = 'US' AND content = $1", question
            )
        finally:
            await connection.close()
        seen.append((question, int(count)))

    upstream.on_request = check
    return seen


async def one_turn_while_held(
    ph: Pilothouse, url: str, count: Callable[[], int]
) -> tuple[int, list[TurnResult]]:
    """Run one turn while another session holds the messages table against inserts.

    Returns what ``count`` said a second into the hold (the turn's start
    statement still waiting for the lock), and the turn's result.
    """
    blocker = await asyncpg.connect(asyncpg_dsn(url))
    held = blocker.transaction()
    await held.start()
    await blocker.execute("LOCK TABLE message IN SHARE MODE")
    results: list[TurnResult] = []
    during = -1
    try:
        async with anyio.create_task_group() as tasks:

            async def turn() -> None:
                results.append(await ph.command.start_and_send("the question", action="ASK"))

            tasks.start_soon(turn)
            await anyio.sleep(1.0)
            during = count()
            await held.commit()
    finally:
        await blocker.close()
    return during, results


async def test_every_request_arrives_after_its_conversation_is_committed(
    postgres_database_url: str,
) -> None:
    with running_upstream() as upstream:
        upstream.script(Reply(body=completion("ok")))
        seen = watch_commits(upstream, postgres_database_url)
        async with Pilothouse(settings(postgres_database_url)) as ph:
            await catalog(upstream.base_url).import_into(ph)
            await ph.command.start_and_send("warm up", action="ASK")
            # The turn's start statement waits for the lock, its request built meanwhile.
            sent_while_held, results = await one_turn_while_held(
                ph, postgres_database_url, lambda: len(upstream.requests)
            )
    assert sent_while_held == 1  # the warm-up only
    assert [(r.error, r.text) for r in results] == [(None, "ok")]
    assert seen == [("warm up", 1), ("the question", 1)]


async def test_a_start_that_is_refused_sends_nothing(postgres_database_url: str) -> None:
    with running_upstream() as upstream:
        upstream.script(Reply(body=completion("ok")))
        async with Pilothouse(settings(postgres_database_url)) as ph:
            await catalog(upstream.base_url).import_into(ph)
            first = await ph.command.start_and_send("first", action="ASK")
            assert len(upstream.requests) == 1
            with pytest.raises(PilothouseError, match=first.conversation_uuid):
                # The uuid is taken: the start statement fails, after the
                # request for the model was built.
                await ph.command.start_and_send(
                    "again", action="ASK", conversation_uuid=first.conversation_uuid
                )
            assert len(upstream.requests) == 1
            # The failed turn left nothing behind: the next one runs.
            assert (await ph.command.start_and_send("next", action="ASK")).text == "ok"
        assert [r["messages"][-1]["content"] for r in upstream.requests] == ["first", "next"]


async def test_a_catalog_changed_by_another_process_is_what_the_request_carries(
    postgres_database_url: str,
) -> None:
    with running_upstream() as upstream:
        upstream.script(Reply(body=completion("ok")))
        async with (
            Pilothouse(settings(postgres_database_url)) as ph,
            Pilothouse(settings(postgres_database_url)) as other,
        ):
            await catalog(upstream.base_url, "Old prompt.").import_into(ph)
            # Compiled and cached by this process at the old revision.
            await ph.command.start_and_send("before", action="ASK")
            # Another process (an operator's import) changes the action.
            await catalog(upstream.base_url, "New prompt.").import_into(other)
            result = await ph.command.start_and_send("after", action="ASK")
            assert (result.error, result.text) == (None, "ok")
            view = await ph.query.get_transcript(result.conversation_uuid)
        systems = [r["messages"][0]["content"] for r in upstream.requests]
        assert [s.rsplit("\n\n", 1)[-1] for s in systems] == ["Old prompt.", "New prompt."]
        # The request built on the old compilation never left, nor is it recorded.
        assert [e.kind for e in view.timeline].count(TimelineKind.REQUEST) == 1


async def test_a_model_that_does_not_wait_itself_is_called_after_the_commit(
    postgres_database_url: str,
) -> None:
    calls: list[str] = []

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        calls.append(str(messages[-1]))
        return ModelResponse(parts=[TextPart("ok")])

    # Any model but pilothouse's own Chat Completions client waits before the
    # request is made, not after it is built.
    async with Pilothouse(settings(postgres_database_url), model=FunctionModel(answer)) as ph:
        await catalog("http://127.0.0.1:9/v1").import_into(ph)
        await ph.command.start_and_send("warm up", action="ASK")
        called_while_held, results = await one_turn_while_held(
            ph, postgres_database_url, lambda: len(calls)
        )
    assert called_while_held == 1
    assert [(r.error, r.text) for r in results] == [(None, "ok")]


async def test_a_turn_cancelled_while_its_start_waits_sends_nothing_and_is_recorded(
    postgres_database_url: str,
) -> None:
    with running_upstream() as upstream:
        upstream.script(Reply(body=completion("ok")))
        async with Pilothouse(settings(postgres_database_url)) as ph:
            await catalog(upstream.base_url).import_into(ph)
            await ph.command.start_and_send("warm up", action="ASK")
            uuid = str(uuid4())
            blocker = await asyncpg.connect(asyncpg_dsn(postgres_database_url))
            held = blocker.transaction()
            await held.start()
            await blocker.execute("LOCK TABLE message IN SHARE MODE")
            outcome: list[object] = []
            try:
                async with anyio.create_task_group() as tasks:

                    async def turn() -> None:
                        try:
                            outcome.append(
                                await ph.command.start_and_send(
                                    "the question", action="ASK", conversation_uuid=uuid
                                )
                            )
                        except PilothouseError as exc:
                            outcome.append(exc)

                    tasks.start_soon(turn)
                    await anyio.sleep(0.5)
                    # The start statement waits for the lock, the request built.
                    tasks.start_soon(ph.command.cancel, uuid)
                    await anyio.sleep(0.5)
                    await held.commit()
            finally:
                await blocker.close()
            conversation = await ph.query.get_conversation(uuid)
            view = await ph.query.get_transcript(uuid)
        # Only the warm-up reached the model; the cancelled turn is on record,
        # with no call and no usage, since none was made.
        assert [r["messages"][-1]["content"] for r in upstream.requests] == ["warm up"]
        assert conversation.status == ProcessStatus.TERMINATED, outcome
        assert (conversation.input_tokens, conversation.output_tokens) == (0, 0)
        assert TimelineKind.REQUEST not in [e.kind for e in view.timeline]
