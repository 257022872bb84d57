"""Fixtures of the HTTP service tests.

- ``scripted``: the :class:`~pilothouse.testing.ScriptedModel` every turn of
  the app uses; a test appends answers before it sends a message
  (``scripted.script.steps.append(Reply("hi"))``).
- ``server_config``: the :class:`ServerSettings` (override the fixture in a
  module, or build a state yourself, for other limits).
- ``server_state``: a :class:`ServerState` on a fresh SQLite file, with the
  example catalog (``examples/catalog``) imported for tenants ``default``
  and ``other``, plus the plain action ``ECHO`` (no skills, no input data
  needed); closed after the test. The file is a copy of a template seeded
  once per session by ``database_seed`` (``seed_examples`` here; a module
  that needs more overrides the fixture with a seed that calls it first).
- ``app``: the FastAPI app serving ``server_state``.
- ``client``: an ``httpx.AsyncClient`` over ``httpx.ASGITransport(app)``,
  with the app's lifespan running (so shutdown draining is exercised).
- ``api_key`` / ``admin_key`` / ``other_tenant_key``: keys (strings) of
  tenant ``default`` (plain and admin) and of tenant ``other`` (admin).
``server_helpers.auth(key)`` gives the request headers carrying a key.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from server_helpers import seed_examples

from database_templates import Seed, SqliteTemplates
from pilothouse.server._app import create_app
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings
from pilothouse.testing import ScriptedModel


@pytest.fixture
def scripted() -> ScriptedModel:
    return ScriptedModel([])


@pytest.fixture
def server_config() -> ServerSettings:
    return ServerSettings(host="127.0.0.1", shutdown_grace_seconds=2.0)


@pytest.fixture
def database_seed() -> Seed:
    return seed_examples


@pytest.fixture
def server_settings(
    tmp_path: Path, sqlite_templates: SqliteTemplates, database_seed: Seed
) -> Settings:
    url = sqlite_templates.fresh(tmp_path / "server.db", database_seed)
    return Settings(database_url=url, secrets_file=None)


@pytest.fixture
async def server_state(
    server_settings: Settings, scripted: ScriptedModel, server_config: ServerSettings
) -> AsyncIterator[ServerState]:
    state = ServerState(server_settings, model=scripted, server=server_config)
    await state.open()
    yield state
    await state.aclose()


@pytest.fixture
def app(server_state: ServerState) -> FastAPI:
    return create_app(server_state.settings, state=server_state)


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://testserver") as http,
    ):
        yield http


@pytest.fixture
async def api_key(server_state: ServerState) -> str:
    key, _ = await server_state.pilothouse.keys.create(name="test")
    return key


@pytest.fixture
async def admin_key(server_state: ServerState) -> str:
    key, _ = await server_state.pilothouse.keys.create(name="admin", admin=True)
    return key


@pytest.fixture
async def other_tenant_key(server_state: ServerState) -> str:
    key, _ = await server_state.pilothouse.keys.create(tenant="other", name="other", admin=True)
    return key
