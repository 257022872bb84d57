"""A PostgreSQL server that refuses new connections is a 503, not an internal error.

The real server refuses them as it does at ``max_connections``: here a role
of the test's own with ``CONNECTION LIMIT 0`` (SQLSTATE 53300, the state a
full server answers with), so the shared server's other users are never
short of connections. The request is told to come back (``Retry-After``),
and once connections are free again the same request succeeds.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import asyncpg
import pytest
from asgi_service import asgi_client
from sqlalchemy.engine import make_url

from pilothouse.api import Pilothouse
from pilothouse.errors import ServiceUnavailableError
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings

pytestmark = [pytest.mark.real, pytest.mark.postgres, pytest.mark.anyio]


@pytest.fixture
async def limited_url(postgres_database_url: str) -> AsyncIterator[tuple[str, str]]:
    """The test database as a role of its own; yields (its URL, the superuser's URL)."""
    role = f"ph_capacity_{uuid.uuid4().hex[:8]}"
    admin = make_url(postgres_database_url).set(drivername="postgresql")
    connection = await asyncpg.connect(admin.render_as_string(hide_password=False))
    try:
        await connection.execute(f"CREATE ROLE {role} LOGIN")
        await connection.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        await connection.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
        url = make_url(postgres_database_url).set(username=role)
        yield url.render_as_string(hide_password=False), postgres_database_url
    finally:
        await connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role
        )
        await connection.execute(f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}")
        await connection.execute(f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {role}")
        await connection.execute(f"DROP ROLE IF EXISTS {role}")
        await connection.close()


async def _refuse(admin_url: str, role: str, limit: int) -> None:
    """Set the role's connection limit and end its open connections."""
    admin = make_url(admin_url).set(drivername="postgresql")
    connection = await asyncpg.connect(admin.render_as_string(hide_password=False))
    try:
        await connection.execute(f"ALTER ROLE {role} CONNECTION LIMIT {limit}")
        await connection.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role
        )
    finally:
        await connection.close()


async def test_a_full_server_is_a_503_with_retry_after_then_recovers(
    limited_url: tuple[str, str],
) -> None:
    url, admin_url = limited_url
    role = str(make_url(url).username)
    async with Pilothouse(Settings(database_url=admin_url)) as operator:
        key, _ = await operator.keys.create(name="capacity")
    state = ServerState(
        Settings(database_url=url, secrets_file=None), server=ServerSettings(host="127.0.0.1")
    )
    async with asgi_client(state) as http:
        headers = {"Authorization": f"Bearer {key}"}
        assert (await http.get("/v1/conversations", headers=headers)).status_code == 200

        await _refuse(admin_url, role, 0)
        # The pooled connection was ended by the server: the first request
        # may find it so (a 503 of its own, tests/real/test_pg_goodbye_real.py)
        # or may already need a new connection. Either way it is told to come
        # back, and the next one meets the refused new connection.
        answers = [await http.get("/v1/conversations", headers=headers) for _ in range(2)]
        for refused in answers:
            assert refused.status_code == 503, refused.text
            assert refused.headers["Retry-After"] == "1"
            assert refused.headers["content-type"].startswith("application/problem+json")
            assert "Traceback" not in refused.text
        detail = answers[-1].json()["detail"]
        assert "no free connection" in detail and "53300" in detail, detail

        # The library says the same, as a typed error a caller can retry on.
        with pytest.raises(ServiceUnavailableError, match="no free connection") as raised:
            await state.pilothouse.query.list_conversations()
        assert raised.value.retry_after == 1

        await _refuse(admin_url, role, -1)
        again = await http.get("/v1/conversations", headers=headers)
        assert again.status_code == 200, again.text
