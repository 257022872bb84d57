"""Fixtures of the HTTP service tests.

- ``scripted``: the :class:`~pilothouse.testing.ScriptedModel` every turn of
  the app uses; a test appends answers before it sends a message
  (``scripted.script.steps.append(Reply("hi"))``).
- ``server_config``: the :class:`ServerSettings` (override the fixture in a
  module, or build a state yourself, for other limits).
- ``server_state``: a :class:`ServerState` on a fresh SQLite file, with the
  example catalog (``examples/catalog``) imported for tenants ``default``
  and ``other``, plus the plain action ``ECHO`` (no skills, no input data
  needed); closed after the test.
- ``app``: the FastAPI app serving ``server_state``.
- ``client``: an ``httpx.AsyncClient`` over ``httpx.ASGITransport(app)``,
  with the app's lifespan running (so shutdown draining is exercised).
- ``api_key`` / ``admin_key`` / ``other_tenant_key``: keys (strings) of
  tenant ``default`` (plain and admin) and of tenant ``other`` (admin).
``server_helpers.auth(key)`` gives the request headers carrying a key.
"""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import anyio
import httpx
import pytest
from fastapi import FastAPI

from pilothouse.catalog import import_catalog
from pilothouse.server._app import create_app
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import ScriptedModel

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "catalog"
# A plain action beside the examples: no skills, no placeholders besides the
# message, so route tests exercise the service rather than prompt assembly.
# Its model is not the local one: llama.cpp cannot stream while tools are
# offered, so the runtime does not stream local models; the scripted model
# replaces this one anyway and streams.
ECHO_ACTION = """
providers:
  - code: SCRIPTED
    kind: openai
    base_url: http://127.0.0.1:9/v1
models:
  - code: SCRIPTEDM
    provider: SCRIPTED
    model_name: scripted
    capabilities: [FC, SR]
    input_price: 0
    output_price: 0
actions:
  - code: ECHO
    name: Echo
    model: SCRIPTEDM
    configuration: DEFAULT
    prompt: "Answer the user: {input}"
"""


@pytest.fixture
def scripted() -> ScriptedModel:
    return ScriptedModel([])


@pytest.fixture
def server_config() -> ServerSettings:
    return ServerSettings(host="127.0.0.1", shutdown_grace_seconds=2.0)


def _sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


@pytest.fixture(scope="session")
def template_database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite file with the examples imported, built once and copied per test."""
    path = tmp_path_factory.mktemp("template") / "server.db"

    async def build() -> None:
        database = Database(_sqlite_url(path))
        try:
            await database.ensure_schema()
            extra = path.parent / "echo.yaml"
            extra.write_text(ECHO_ACTION, encoding="utf-8")
            for tenant in ("default", "other"):
                await import_catalog(database, tenant, [EXAMPLES, extra])
        finally:
            await database.dispose()

    anyio.run(build)
    return path


@pytest.fixture
def server_settings(tmp_path: Path, template_database: Path) -> Settings:
    path = tmp_path / "server.db"
    shutil.copyfile(template_database, path)
    return Settings(database_url=_sqlite_url(path), secrets_file=None)


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
