"""The OpenAI-compatible face's ``user`` as the scoped-memory user, where the deployment allows it.

mem0's proxy maps OpenAI's ``user`` to its memory user. pilothouse does so
when the service's ``openai_user_memory`` is on (any key may name any
``user``, so it is off by default): the turn's SCOPED memory then serves,
and links the session to, that user, as ``runtime_config.user_id`` does.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from server_helpers import auth

from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel

pytestmark = pytest.mark.anyio

CATALOG = (
    CatalogBuilder(scripted=False)
    .memory_strategy("SCPD", kind="SCOPED", settings={"extract": False})
    .action(
        "MEMCHAT",
        model="SCRIPTEDM",
        configuration="DFLT",
        prompt="You are a helpful assistant.",
        memory_strategy="SCPD",
    )
)


@pytest.fixture
async def memory_state(server_state: ServerState) -> AsyncIterator[ServerState]:
    await server_state.pilothouse.catalog.import_text(CATALOG.yaml())
    yield server_state


async def _ask(client: httpx.AsyncClient, key: str, user: str) -> None:
    response = await client.post(
        "/v1/chat/completions",
        json={
            "model": "action:MEMCHAT",
            "user": user,
            "messages": [{"role": "user", "content": "I am vegetarian."}],
        },
        headers=auth(key),
    )
    assert response.status_code == 200, response.text


async def test_user_is_the_memory_user_when_the_deployment_allows_it(
    client: httpx.AsyncClient, memory_state: ServerState, admin_key: str, scripted: ScriptedModel
) -> None:
    memory_state.server = ServerSettings(host="127.0.0.1", openai_user_memory=True)
    scripted.script.steps.append(Reply("Noted."))
    await _ask(client, admin_key, "alice")
    exported = await memory_state.pilothouse.memory.export_user("alice")
    assert len(exported["conversations"]) == 1
    assert exported["sessions"]


async def test_user_is_only_recorded_by_default(
    client: httpx.AsyncClient, memory_state: ServerState, admin_key: str, scripted: ScriptedModel
) -> None:
    scripted.script.steps.append(Reply("Noted."))
    await _ask(client, admin_key, "alice")
    exported = await memory_state.pilothouse.memory.export_user("alice")
    assert exported["conversations"] == []
