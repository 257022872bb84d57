from __future__ import annotations

from collections.abc import AsyncIterator

import anyio
import pytest
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pilothouse.catalog import ProcessStatus
from pilothouse.errors import ServiceUnavailableError
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio


async def _slow(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    # Far longer than the grace period drain() is given.
    await anyio.sleep(30)
    return ModelResponse(parts=[TextPart("too late")])


async def _slow_stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    yield "too "
    await anyio.sleep(30)
    yield "late"


async def test_drain_cancels_running_turns_and_records_te(server_settings: Settings) -> None:
    state = ServerState(server_settings, model=FunctionModel(_slow, stream_function=_slow_stream))
    try:
        ph = state.facade("default")
        conversation = await ph.command.start_conversation(action="ECHO")
        refused: list[ServiceUnavailableError] = []

        async def turn() -> None:
            with pytest.raises(ServiceUnavailableError) as caught:
                await ph.command.send_message(conversation.uuid, "go")
            refused.append(caught.value)

        async with anyio.create_task_group() as group:
            group.start_soon(turn)
            with anyio.fail_after(5):
                while not state.running_turns:
                    await anyio.sleep(0.01)
            with anyio.fail_after(10):
                await state.drain(grace=0.2)
        assert state.running_turns == []
        # Its caller is told to come back (503 + Retry-After on the faces).
        assert refused[0].retry_after > 0
        stored = await ph.query.get_conversation(conversation.uuid)
        assert stored.status is ProcessStatus.TERMINATED
    finally:
        await state.aclose()


async def test_drain_lets_short_turns_finish(
    server_state: ServerState, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Reply("quick answer", chunk_delay=0.05))
    ph = server_state.facade("default")
    conversation = await ph.command.start_conversation(action="ECHO")

    async def turn() -> None:
        # Streamed, so the chunk delays keep the turn running a little while.
        await ph.command.send_message(conversation.uuid, "go", runtime_config={"stream": True})

    async with anyio.create_task_group() as group:
        group.start_soon(turn)
        with anyio.fail_after(5):
            while not server_state.running_turns:
                await anyio.sleep(0.01)
        await server_state.drain(grace=5)
    stored = await ph.query.get_conversation(conversation.uuid)
    assert stored.status is ProcessStatus.COMPLETED


async def test_sigterm_starts_the_drain_at_once_and_restores_the_handler(
    server_settings: Settings,
) -> None:
    import signal

    seen: list[int] = []

    def uvicorns(signum: int, frame: object) -> None:
        # Stands for uvicorn's handler, which must still run.
        seen.append(signum)

    before = signal.signal(signal.SIGTERM, uvicorns)
    state = ServerState(
        server_settings,
        model=FunctionModel(_slow, stream_function=_slow_stream),
        server=ServerSettings(shutdown_grace_seconds=0.1),
    )
    try:
        ph = state.facade("default")
        conversation = await ph.command.start_conversation(action="ECHO")
        refused: list[ServiceUnavailableError] = []

        async def turn() -> None:
            with pytest.raises(ServiceUnavailableError) as caught:
                await ph.command.send_message(conversation.uuid, "go")
            refused.append(caught.value)

        async with anyio.create_task_group() as group:
            group.start_soon(turn)
            group.start_soon(state.drain_on_signal)
            with anyio.fail_after(5):
                while not state.running_turns:
                    await anyio.sleep(0.01)
            signal.raise_signal(signal.SIGTERM)
        assert seen == [signal.SIGTERM]
        assert refused and refused[0].retry_after > 0
        stored = await ph.query.get_conversation(conversation.uuid)
        assert stored.status is ProcessStatus.TERMINATED
        assert signal.getsignal(signal.SIGTERM) is uvicorns
    finally:
        signal.signal(signal.SIGTERM, before)
        await state.aclose()
