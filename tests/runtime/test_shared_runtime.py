"""One runtime per process, a runner per tenant: tenants share the parts, never the turns."""

from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest

from pilothouse.catalog._enums import ProcessStatus
from pilothouse.errors import NotFoundError
from pilothouse.providers import ModelFactory, SecretResolver
from pilothouse.runtime import (
    ActionCompiler,
    Runtime,
    StatusChanged,
    TextDelta,
    TurnEvent,
    TurnFinished,
)
from pilothouse.store import Database
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


@pytest.fixture
async def runtime(catalog: Database) -> AsyncIterator[Runtime]:
    factory = ModelFactory()
    shared = Runtime(
        database=catalog,
        models=factory,
        compiler=ActionCompiler(catalog, SecretResolver(env={}, secrets_file=None)),
        model_override=ScriptedModel([Reply("word " * 40, chunk_delay=0.01), "second"]),
    )
    yield shared
    await shared.aclose()
    await factory.aclose()


async def test_runners_are_views_over_the_shared_parts(runtime: Runtime) -> None:
    acme, globex = runtime.runner("default"), runtime.runner("globex")
    assert (acme.tenant, globex.tenant) == ("default", "globex")
    assert acme.compiler is globex.compiler is runtime.compiler
    assert acme.store is globex.store is runtime.store
    assert acme.hub is globex.hub is runtime.hub
    assert acme.tool_source is globex.tool_source


async def test_another_tenant_can_neither_cancel_nor_continue_a_turn(runtime: Runtime) -> None:
    acme, globex = runtime.runner("default"), runtime.runner("globex")
    started = anyio.Event()
    outcomes: list[ProcessStatus] = []
    uuid = "3f0c7c1e-0000-4000-8000-000000000001"

    async def listen(event: TurnEvent) -> None:
        if isinstance(event, TextDelta):
            started.set()

    async def run() -> None:
        result = await acme.start_and_send(
            "SUMBRAND", "ANALYST", "go", on_event=listen, conversation_uuid=uuid
        )
        outcomes.append(result.status)

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await started.wait()
        # Globex's cancel does not reach acme's running turn: the uuid is
        # unknown to globex, so it is not found.
        with pytest.raises(NotFoundError):
            await globex.cancel(uuid)
    assert outcomes == [ProcessStatus.COMPLETED]
    # Nor does acme's remembered action leak: globex cannot send to it.
    with pytest.raises(NotFoundError):
        await globex.send_message(uuid, "mine now")
    assert (await acme.send_message(uuid, "again")).output == "second"


async def test_subscribers_may_keep_to_one_tenant(runtime: Runtime) -> None:
    mine: list[TurnEvent] = []
    theirs: list[TurnEvent] = []
    everyone: list[TurnEvent] = []
    runtime.hub.subscribe(mine.append, tenant="default", deltas=False)
    runtime.hub.subscribe(theirs.append, tenant="globex", deltas=False)
    runtime.hub.subscribe(everyone.append, deltas=False)
    result = await runtime.runner("default").start_and_send("SUMBRAND", "ANALYST", "go")
    assert result.status is ProcessStatus.COMPLETED
    assert [type(e) for e in mine] == [StatusChanged, StatusChanged, TurnFinished]
    assert everyone == mine
    assert theirs == []
    # Only a tenant's listeners that want deltas make its calls stream.
    assert not runtime.hub.wants_deltas("any", "default")
    runtime.hub.subscribe(theirs.append, tenant="globex")
    assert runtime.hub.wants_deltas("any", "globex")
    assert not runtime.hub.wants_deltas("any", "default")
    runtime.hub.unsubscribe(theirs.append)
    runtime.hub.unsubscribe(theirs.append)
    with pytest.raises(ValueError, match="not subscribed"):
        runtime.hub.unsubscribe(theirs.append)
