"""The provider HTTP client's connection limit, against a real loopback server."""

from __future__ import annotations

import asyncio
import json

import anyio
import httpx2
import pytest
from provider_helpers import chat_completion, model_spec
from pydantic_ai.direct import model_request
from pydantic_ai.messages import ModelRequest, UserPromptPart

from pilothouse.catalog._enums import ProviderKind
from pilothouse.providers import ModelFactory
from pilothouse.providers._pool import ShardedTransport, provider_transport
from pilothouse.settings import Settings

pytestmark = pytest.mark.anyio

_ANSWER = json.dumps(chat_completion("hi", "m")).encode()


class _SlowServer:
    """Answers every chat completion after 150 ms; counts connections open at once."""

    def __init__(self) -> None:
        self.open = 0
        self.most = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.most = max(self.most, self.open)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                )
                await reader.readexactly(length)
                await asyncio.sleep(0.15)
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    + f"content-length: {len(_ANSWER)}\r\n\r\n".encode()
                    + _ANSWER
                )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            self.open -= 1
            writer.close()


@pytest.mark.parametrize(("limit", "expected"), [(2, 2), (10, 6)])
async def test_calls_in_flight_per_provider_follow_the_connection_limit(
    limit: int, expected: int
) -> None:
    server = _SlowServer()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    factory = ModelFactory(max_connections=limit)
    try:
        spec = model_spec(
            ProviderKind.OPENAI_COMPATIBLE, "m", base_url=f"http://127.0.0.1:{port}/v1"
        )
        model = await factory.model(spec)
        answers: list[str] = []

        async def call() -> None:
            response = await model_request(model, [ModelRequest(parts=[UserPromptPart("x")])])
            answers.append(response.text or "")

        async with anyio.create_task_group() as group:
            for _ in range(6):
                group.start_soon(call)
    finally:
        await factory.aclose()
        listener.close()
    assert answers == ["hi"] * 6
    assert server.most == expected


def test_pool_settings_are_validated_and_reach_the_database(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PILOTHOUSE_PROVIDER_MAX_CONNECTIONS", "0")
    with pytest.raises(ValueError, match="provider_max_connections"):
        Settings()
    monkeypatch.delenv("PILOTHOUSE_PROVIDER_MAX_CONNECTIONS")
    settings = Settings(
        database_url="postgresql+asyncpg://u@127.0.0.1:1/x",
        database_pool_size=7,
        database_max_overflow=3,
    )
    database = settings.open_database()
    pool = database.engine.sync_engine.pool
    assert (pool.size(), pool._max_overflow) == (7, 3)  # type: ignore[attr-defined]


class _CountingServer(_SlowServer):
    """_SlowServer that also counts every connection it accepted."""

    def __init__(self) -> None:
        super().__init__()
        self.accepted = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.accepted += 1
        await super().handle(reader, writer)


def test_small_limits_keep_one_pool_and_large_ones_are_split() -> None:
    assert isinstance(provider_transport(63), httpx2.AsyncHTTPTransport)
    sharded = provider_transport(1000)
    assert isinstance(sharded, ShardedTransport)
    assert len(sharded.in_flight) == 15
    with pytest.raises(ValueError, match="one connection per pool"):
        ShardedTransport(max_connections=3, shards=4)


async def test_sharded_pools_keep_the_limit_and_one_pool_at_low_load() -> None:
    server = _CountingServer()
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    transport = ShardedTransport(max_connections=12, shards=4)
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        async with httpx2.AsyncClient(transport=transport) as client:
            # One at a time: always the first pool, one connection kept warm.
            for _ in range(3):
                assert (await client.post(url, content=b"{}")).status_code == 200
            assert server.accepted == 1

            # Twenty at once: spread over the pools, never above the limit.
            async def post() -> None:
                assert (await client.post(url, content=b"{}")).status_code == 200

            async with anyio.create_task_group() as group:
                for _ in range(20):
                    group.start_soon(post)
                await anyio.sleep(0.05)
                # 20 over 4 pools of 3 connections: 3 sent and 2 waiting each.
                assert transport.in_flight == [5, 5, 5, 5]
            assert server.most == 12
            # A streamed answer holds its pool until it is closed.
            async with client.stream("POST", url, content=b"{}") as response:
                assert transport.in_flight == [1, 0, 0, 0]
                await response.aread()
            assert transport.in_flight == [0, 0, 0, 0]
            # A failed request gives its place back.
            with pytest.raises(httpx2.ConnectError):
                await client.post("http://127.0.0.1:1/v1/chat/completions", content=b"{}")
            assert transport.in_flight == [0, 0, 0, 0]
    finally:
        listener.close()
