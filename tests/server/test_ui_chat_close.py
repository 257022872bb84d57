"""A browser that leaves the playground's chat mid-answer stops its turn at once.

The chat's response streams from nested generators (the guard, the turn's
or the ad-hoc run's, the facade's event stream). Closing the outer one must
close each under it in the same task, so the turn is cancelled and recorded
before the close returns, not whenever the garbage collector finalizes them
(from another task, which anyio's cancel scopes refuse).
"""

from __future__ import annotations

import json

import pytest

from pilothouse.server._state import ServerState
from pilothouse.server._ui._chat import ChatRequest, _guarded, _turn
from pilothouse.testing import Reply, ScriptedModel
from pilothouse.types import ProcessStatus

pytestmark = pytest.mark.anyio


@pytest.fixture
def scripted() -> ScriptedModel:
    # Still streaming when the reader leaves: a delta every 50 ms, 100 of them.
    return ScriptedModel([Reply(" ".join(["tick"] * 100), chunk_delay=0.05)])


async def _close_after_first_delta(server_state: ServerState, target: str) -> str:
    stream = _guarded(_turn(server_state.pilothouse, ChatRequest(target=target, text="go")))
    uuid = ""
    async for chunk in stream:
        name, _, data = chunk.decode().partition("\ndata: ")
        if name == "event: delta":
            uuid = json.loads(data)["conversation_uuid"]
            break
    await stream.aclose()
    assert uuid, "no delta arrived"
    return uuid


@pytest.mark.parametrize("target", ["action:ECHO", "model:SCRIPTEDM"])
async def test_closing_the_chat_stream_records_its_turn_terminated_before_the_close_returns(
    server_state: ServerState, target: str
) -> None:
    uuid = await _close_after_first_delta(server_state, target)
    stopped = await server_state.pilothouse.query.get_conversation(uuid)
    assert stopped.status is ProcessStatus.TERMINATED
