"""The cache of verified API keys: what it remembers, and when a revoked key stops working."""

from __future__ import annotations

import httpx
import pytest
from server_helpers import auth

from pilothouse.server._keys import KeyCache
from pilothouse.server._state import ServerSettings, ServerState

pytestmark = pytest.mark.anyio

ROUTE = "/v1/catalog/actions"


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(server_state: ServerState) -> Clock:
    clock = Clock()
    server_state.keys = KeyCache(server_state.pilothouse.keys, 5.0, clock=clock)
    return clock


async def test_key_revoked_elsewhere_works_until_the_ttl_passes(
    client: httpx.AsyncClient, server_state: ServerState, clock: Clock
) -> None:
    key, info = await server_state.pilothouse.keys.create(name="cached")
    assert (await client.get(ROUTE, headers=auth(key))).status_code == 200
    # Revoked in the database, as `pilothouse keys revoke` (another process) does.
    await server_state.pilothouse.keys.revoke(info.prefix)
    clock.now += 4.9
    assert (await client.get(ROUTE, headers=auth(key))).status_code == 200
    clock.now += 0.2
    assert (await client.get(ROUTE, headers=auth(key))).status_code == 401
    # Refusals are not remembered as successes: still refused later.
    clock.now += 60
    assert (await client.get(ROUTE, headers=auth(key))).status_code == 401


async def test_revoking_through_the_cache_refuses_at_once(
    client: httpx.AsyncClient, server_state: ServerState, clock: Clock
) -> None:
    key, info = await server_state.pilothouse.keys.create(name="cached")
    assert (await client.get(ROUTE, headers=auth(key))).status_code == 200
    revoked = await server_state.keys.revoke(info.prefix)
    assert revoked.active is False
    assert (await client.get(ROUTE, headers=auth(key))).status_code == 401


async def test_forget_drops_a_remembered_key(
    client: httpx.AsyncClient, server_state: ServerState, clock: Clock
) -> None:
    key, info = await server_state.pilothouse.keys.create(name="cached")
    other, _ = await server_state.pilothouse.keys.create(name="kept")
    assert (await client.get(ROUTE, headers=auth(key))).status_code == 200
    assert (await client.get(ROUTE, headers=auth(other))).status_code == 200
    await server_state.pilothouse.keys.revoke(info.prefix)
    server_state.keys.forget(info.prefix)
    assert (await client.get(ROUTE, headers=auth(key))).status_code == 401
    assert (await client.get(ROUTE, headers=auth(other))).status_code == 200


async def test_a_wrong_secret_is_refused_while_the_right_key_is_remembered(
    client: httpx.AsyncClient, server_state: ServerState, clock: Clock
) -> None:
    key, info = await server_state.pilothouse.keys.create(name="cached")
    assert (await client.get(ROUTE, headers=auth(key))).status_code == 200
    forged = f"ph_{info.prefix}_{'A' * 43}"
    assert (await client.get(ROUTE, headers=auth(forged))).status_code == 401
    assert (await client.get(ROUTE, headers=auth(key))).status_code == 200


async def test_the_oldest_key_is_dropped_beyond_the_limit(
    client: httpx.AsyncClient, server_state: ServerState, clock: Clock
) -> None:
    server_state.keys = KeyCache(server_state.pilothouse.keys, 5.0, clock=clock, limit=1)
    first, info = await server_state.pilothouse.keys.create(name="first")
    second, _ = await server_state.pilothouse.keys.create(name="second")
    assert (await client.get(ROUTE, headers=auth(first))).status_code == 200
    assert (await client.get(ROUTE, headers=auth(second))).status_code == 200
    await server_state.pilothouse.keys.revoke(info.prefix)
    # The first key was dropped for the second, so it is read again: revoked.
    assert (await client.get(ROUTE, headers=auth(first))).status_code == 401


class TestWithoutCache:
    @pytest.fixture
    def server_config(self) -> ServerSettings:
        return ServerSettings(key_cache_seconds=0)

    async def test_a_revoked_key_is_refused_at_once(
        self, client: httpx.AsyncClient, server_state: ServerState
    ) -> None:
        assert server_state.keys.ttl == 0
        key, info = await server_state.pilothouse.keys.create(name="uncached")
        assert (await client.get(ROUTE, headers=auth(key))).status_code == 200
        await server_state.pilothouse.keys.revoke(info.prefix)
        assert (await client.get(ROUTE, headers=auth(key))).status_code == 401


async def test_the_ttl_is_a_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PILOTHOUSE_SERVER_KEY_CACHE_SECONDS", "2.5")
    assert ServerSettings().key_cache_seconds == 2.5
    assert ServerSettings.model_fields["key_cache_seconds"].default == 5.0
