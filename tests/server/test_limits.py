from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest
from pydantic import SecretStr
from server_helpers import auth

from pilothouse.server._app import create_app
from pilothouse.server._limits import RateLimiter
from pilothouse.server._state import ServerSettings, ServerState
from pilothouse.settings import Settings

pytestmark = pytest.mark.anyio


async def serve(state: ServerState) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(state.settings, state=state)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as http,
    ):
        yield http


@pytest.fixture
def server_config() -> ServerSettings:
    return ServerSettings(max_body_bytes=1024, rate_limit_per_minute=3, cors_origins=[])


async def test_declared_oversize_body_is_413(client: httpx.AsyncClient, api_key: str) -> None:
    response = await client.post(
        "/v1/conversations",
        content=b"x" * 2048,
        headers={**auth(api_key), "Content-Type": "application/json"},
    )
    assert response.status_code == 413
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["status"] == 413


async def test_streamed_oversize_body_is_413(client: httpx.AsyncClient, api_key: str) -> None:
    async def chunks() -> AsyncIterator[bytes]:
        for _ in range(4):
            yield b'{"pad": "' + b"x" * 500 + b'"}'

    response = await client.post(
        "/v1/conversations",
        content=chunks(),
        headers={**auth(api_key), "Content-Type": "application/json"},
    )
    assert response.status_code == 413


async def test_rate_limit_is_429_with_retry_after(
    client: httpx.AsyncClient, api_key: str, admin_key: str
) -> None:
    for _ in range(3):
        ok = await client.get("/v1/catalog/actions", headers=auth(api_key))
        assert ok.status_code == 200
    limited = await client.get("/v1/catalog/actions", headers=auth(api_key))
    assert limited.status_code == 429
    assert limited.headers["content-type"] == "application/problem+json"
    assert int(limited.headers["retry-after"]) >= 1
    # Per key: another key still has its own budget.
    other = await client.get("/v1/catalog/actions", headers=auth(admin_key))
    assert other.status_code == 200


def test_token_bucket_refills() -> None:
    now = [0.0]
    limiter = RateLimiter(60, clock=lambda: now[0])
    assert all(limiter.acquire("k") is None for _ in range(60))
    wait = limiter.acquire("k")
    assert wait == pytest.approx(1.0)
    now[0] += 1.0
    assert limiter.acquire("k") is None
    assert RateLimiter(0).acquire("k") is None


async def test_cors_off_by_default(client: httpx.AsyncClient) -> None:
    response = await client.options(
        "/healthz",
        headers={"Origin": "https://evil.example", "Access-Control-Request-Method": "GET"},
    )
    assert "access-control-allow-origin" not in response.headers


async def test_cors_on_for_listed_origins(server_settings: Settings) -> None:
    config = ServerSettings(cors_origins=["https://app.example"])
    state = ServerState(server_settings, server=config)
    try:
        async for http in serve(state):
            response = await http.options(
                "/healthz",
                headers={"Origin": "https://app.example", "Access-Control-Request-Method": "GET"},
            )
            assert response.headers["access-control-allow-origin"] == "https://app.example"
    finally:
        await state.aclose()


async def test_metrics_need_a_key_off_loopback(server_settings: Settings) -> None:
    state = ServerState(server_settings, server=ServerSettings(host="0.0.0.0"))
    try:
        async for http in serve(state):
            assert (await http.get("/metrics")).status_code == 401
    finally:
        await state.aclose()


async def test_metrics_off_loopback_answer_the_scraper_token_never_an_api_key(
    server_settings: Settings,
) -> None:
    config = ServerSettings(host="0.0.0.0", metrics_token=SecretStr("scrape-7f2"))
    state = ServerState(server_settings, server=config)
    try:
        key, _ = await state.pilothouse.keys.create(name="admin", admin=True)
        async for http in serve(state):
            # Its series name every tenant: a tenant's key, admin or not, reads none.
            refused = await http.get("/metrics", headers=auth(key))
            assert refused.status_code == 401
            assert "PILOTHOUSE_SERVER_METRICS_TOKEN" in refused.json()["detail"]
            assert (await http.get("/metrics", headers=auth("scrape-7f3"))).status_code == 401
            scraped = await http.get("/metrics", headers=auth("scrape-7f2"))
            assert scraped.status_code == 200 and "pilothouse_http_requests_total" in scraped.text
    finally:
        await state.aclose()


async def test_metrics_off_loopback_without_a_token_refuse_every_key(
    server_settings: Settings,
) -> None:
    state = ServerState(server_settings, server=ServerSettings(host="0.0.0.0"))
    try:
        key, _ = await state.pilothouse.keys.create(name="admin", admin=True)
        async for http in serve(state):
            refused = await http.get("/metrics", headers=auth(key))
            assert refused.status_code == 401
            assert "PILOTHOUSE_SERVER_METRICS_TOKEN" in refused.json()["detail"]
    finally:
        await state.aclose()


async def test_revoked_key_is_refused(client: httpx.AsyncClient, server_state: ServerState) -> None:
    key, info = await server_state.pilothouse.keys.create(name="short-lived")
    assert (await client.get("/v1/catalog/actions", headers=auth(key))).status_code == 200
    listed = {k.prefix: k for k in await server_state.pilothouse.keys.list_keys(tenant="default")}
    assert listed[info.prefix].last_used_at is not None
    # Revoked through the server's own key cache: refused at once.
    await server_state.keys.revoke(info.prefix)
    assert (await client.get("/v1/catalog/actions", headers=auth(key))).status_code == 401


async def test_a_jsonrpc_batch_counts_each_call_against_the_rate_limit(
    client: httpx.AsyncClient, api_key: str, server_state: ServerState
) -> None:
    start = {"jsonrpc": "2.0", "method": "pilothouse/command/startConversation/v1"}
    batch = [{**start, "id": n, "params": {"action": "SUMBRAND"}} for n in range(4)]
    # The limit is 3 a minute: four calls in one request are refused whole.
    limited = await client.post("/jsonrpc", json=batch, headers=auth(api_key))
    assert limited.status_code == 429
    assert "each call counts" in limited.json()["detail"]
    page = await server_state.facade("default").query.list_conversations()
    assert page.total == 0
    # The refused request took its own token; two calls fit what is left and run.
    done = await client.post("/jsonrpc", json=batch[:2], headers=auth(api_key))
    assert done.status_code == 200
    assert all("result" in answer for answer in done.json())
    again = await client.get("/v1/catalog/actions", headers=auth(api_key))
    assert again.status_code == 429


async def test_a_jsonrpc_batch_larger_than_allowed_is_refused(
    server_settings: Settings,
) -> None:
    state = ServerState(server_settings, server=ServerSettings(jsonrpc_max_batch=2))
    await state.open()
    try:
        key, _ = await state.pilothouse.keys.create(name="batch")
        async for http in serve(state):
            calls = [
                {"jsonrpc": "2.0", "id": n, "method": "pilothouse/query/listConversations/v1"}
                for n in range(3)
            ]
            response = await http.post("/jsonrpc", json=calls, headers=auth(key))
            assert response.status_code == 200
            error = response.json()["error"]
            assert error["code"] == -32600
            assert "at most 2 calls" in error["data"]["detail"]
    finally:
        await state.aclose()


async def test_requests_with_invalid_keys_are_limited_per_address(
    server_settings: Settings,
) -> None:
    state = ServerState(server_settings, server=ServerSettings(auth_failures_per_minute=3))
    await state.open()
    try:
        good, _ = await state.pilothouse.keys.create(name="good")
        async for http in serve(state):
            for _ in range(3):
                refused = await http.get("/v1/catalog/actions", headers=auth("ph_guess_wrong"))
                assert refused.status_code == 401
            limited = await http.get("/v1/catalog/actions", headers=auth("ph_guess_again"))
            assert limited.status_code == 429
            assert int(limited.headers["retry-after"]) >= 1
            missing = await http.get("/v1/catalog/actions")
            assert missing.status_code == 429
            # A valid key is not held back by the failures.
            ok = await http.get("/v1/catalog/actions", headers=auth(good))
            assert ok.status_code == 200
    finally:
        await state.aclose()


async def test_a_shared_limit_falls_back_to_the_process_bucket_while_redis_is_unreachable(
    caplog: pytest.LogCaptureFixture,
) -> None:
    import socket

    from pilothouse.api import Coordination
    from pilothouse.server._limits import SharedRateLimiter

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # Nothing listens on the port: every Redis call fails to connect.
    coordination = Coordination(f"redis://127.0.0.1:{port}/0", "ph-test-down:")
    try:
        limiter = SharedRateLimiter(RateLimiter(2), coordination, "key")
        assert await limiter.acquire("k") is None
        assert await limiter.acquire("k") is None
        wait = await limiter.acquire("k")
        assert wait is not None and wait > 0
    finally:
        await coordination.aclose()
    warnings = [r for r in caplog.records if "counted per process" in r.getMessage()]
    assert len(warnings) == 1
