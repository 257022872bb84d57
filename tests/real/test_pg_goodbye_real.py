"""A pooled PostgreSQL connection the server ends is replaced, never an internal error.

PostgreSQL ends a session (``pg_terminate_backend``, a restart, an idle
timeout) by sending an error message, then closing the socket. asyncpg reads
the two in different event loop turns, and a statement sent in between used
to fail with asyncpg's ``InternalClientError`` (a 500) while the connection
still looked open. The window is a few microseconds on loopback, so the test
holds it open: a loopback proxy in front of the real server sends the exact
goodbye PostgreSQL sends (FATAL, SQLSTATE 57P01) and keeps the socket open.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import AsyncIterator

import pytest
from asgi_service import asgi_client
from sqlalchemy import Connection, text
from sqlalchemy.engine import make_url

from pilothouse.api import Pilothouse
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings
from pilothouse.store._engine import Database

pytestmark = [pytest.mark.real, pytest.mark.postgres, pytest.mark.anyio]


def _goodbye() -> bytes:
    """The ErrorResponse a backend ended by ``pg_terminate_backend`` sends."""
    fields = b"".join(
        code + value.encode() + b"\0"
        for code, value in (
            (b"S", "FATAL"),
            (b"V", "FATAL"),
            (b"C", "57P01"),
            (b"M", "terminating connection due to administrator command"),
        )
    )
    body = fields + b"\0"
    return b"E" + struct.pack("!i", len(body) + 4) + body


class _Proxy:
    """Forwards loopback connections to PostgreSQL; can say goodbye on every open one."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._clients: list[asyncio.StreamWriter] = []
        self._server: asyncio.Server | None = None

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream_reader, upstream_writer = await asyncio.open_connection(*self._target)
        self._clients.append(writer)

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, OSError):
                pass  # the other side went away: the proxy closes both below
            finally:
                sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    def say_goodbye(self) -> None:
        """Send every open client PostgreSQL's goodbye, leaving the sockets open."""
        for writer in self._clients:
            writer.write(_goodbye())
        self._clients.clear()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()


@pytest.fixture
async def proxied(postgres_database_url: str) -> AsyncIterator[tuple[_Proxy, str]]:
    url = make_url(postgres_database_url)
    proxy = _Proxy(url.host or "127.0.0.1", url.port or 5432)
    port = await proxy.start()
    try:
        yield proxy, url.set(port=port).render_as_string(hide_password=False)
    finally:
        await proxy.close()


async def _seen() -> None:
    # The client's event loop must read the goodbye (and only it) before the
    # next statement: the proxy wrote it on this loop's own transport.
    await asyncio.sleep(0.2)


async def test_an_ended_pooled_connection_is_a_503_then_a_new_connection(
    proxied: tuple[_Proxy, str], postgres_database_url: str
) -> None:
    proxy, url = proxied
    async with Pilothouse(Settings(database_url=postgres_database_url)) as operator:
        key, _ = await operator.keys.create(name="goodbye")
    state = ServerState(
        Settings(database_url=url, secrets_file=None),
        server=ServerSettings(host="127.0.0.1", question_sweep_seconds=0, memory_worker_seconds=0),
    )
    async with asgi_client(state) as http:
        headers = {"Authorization": f"Bearer {key}"}
        assert (await http.get("/v1/conversations", headers=headers)).status_code == 200
        proxy.say_goodbye()
        await _seen()
        # Every pooled connection was ended; the request is told to retry,
        # and the pool replaces the connections.
        ended = await http.get("/v1/conversations", headers=headers)
        assert ended.status_code == 503, ended.text
        assert ended.headers["Retry-After"] == "1"
        assert "ended this connection" in ended.json()["detail"]
        again = await http.get("/v1/conversations", headers=headers)
        assert again.status_code == 200, again.text


async def test_a_transaction_on_an_ended_connection_runs_on_a_new_one(
    proxied: tuple[_Proxy, str],
) -> None:
    proxy, url = proxied
    database = Database(url)
    try:

        def backend(connection: Connection) -> int:
            return int(connection.execute(text("SELECT pg_backend_pid()")).scalar_one())

        first = await database.transaction(backend)
        proxy.say_goodbye()
        await _seen()
        # Nothing had run on the ended connection when its BEGIN failed, so
        # the transaction runs again, whole, on a new connection.
        second = await database.transaction(backend)
        assert second != first
    finally:
        await database.dispose()
