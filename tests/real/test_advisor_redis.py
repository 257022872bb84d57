"""The cache advisor against the real Redis server at 127.0.0.1:6379.

Each test run writes under its own key prefix and deletes its keys afterwards.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import AsyncIterator

import anyio
import pytest
from ports import free_port
from pydantic_ai.direct import model_request
from pydantic_ai.messages import ModelRequest, ModelResponse, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.usage import RequestUsage
from redis.asyncio import Redis

from pilothouse.catalog._enums import ProviderKind
from pilothouse.catalog._models import Advisor as AdvisorRow
from pilothouse.providers import ModelSpec, ProviderSpec
from pilothouse.runtime._advisors import AdvisedCall, CacheAdvisor, Next, resolve_advisor
from pilothouse.runtime._cache import RedisCache, RedisClientPool
from pilothouse.testing import Reply, ScriptedModel

pytestmark = [pytest.mark.real, pytest.mark.anyio]

REDIS_URL = "redis://127.0.0.1:6379/0"
SPEC = ModelSpec(
    code="M", provider=ProviderSpec(code="P", kind=ProviderKind.TEST), model_name="scripted"
)


def advised(text: str) -> AdvisedCall:
    return AdvisedCall(
        conversation_uuid="conv-real",
        tenant="t1",
        spec=SPEC,
        messages=[ModelRequest(parts=[UserPromptPart(text)])],
        settings={"max_tokens": 32},
        parameters=ModelRequestParameters(),
    )


def terminal(model: ScriptedModel) -> Next:
    async def call_model(call: AdvisedCall) -> ModelResponse:
        return await model_request(model, call.messages, model_settings=call.settings)

    return call_model


@pytest.fixture
async def prefix() -> AsyncIterator[str]:
    """A key prefix unique to this test; its keys are deleted afterwards."""
    client = Redis.from_url(REDIS_URL, socket_connect_timeout=2)
    try:
        await client.ping()
    except OSError as exc:
        await client.aclose()
        pytest.skip(f"Redis at {REDIS_URL} unreachable: {exc}")
    value = f"pilothouse:test:{uuid.uuid4().hex}:"
    yield value
    keys = [key async for key in client.scan_iter(match=f"{value}*")]
    if keys:
        await client.delete(*keys)
    await client.aclose()


async def test_redis_cache_hit_across_two_advisor_instances(prefix: str) -> None:
    # Two pools stand in for two processes: nothing is shared but Redis.
    pools = RedisClientPool(), RedisClientPool()
    settings = {"backend": "redis", "redis_url": REDIS_URL, "key_prefix": prefix, "ttl_seconds": 60}
    first, second = (
        resolve_advisor(
            AdvisorRow(code="CACHE", implementation="cache", default_order=100, settings=settings),
            redis_factory=pool,
        )
        for pool in pools
    )
    model = ScriptedModel([Reply("from the model", input_tokens=9, output_tokens=3)])
    try:
        miss_call, hit_call = advised("what is 2+2?"), advised("what is 2+2?")
        answered = await first.around(miss_call, terminal(model))
        served = await second.around(hit_call, terminal(model))

        assert answered.text == served.text == "from the model"
        assert (miss_call.notes["cache"], hit_call.notes["cache"]) == ("miss", "hit")
        assert served.usage == RequestUsage()
        assert len(model.requests) == 1

        assert isinstance(second, CacheAdvisor)
        assert isinstance(second.backend, RedisCache)
        [key] = [key async for key in second.backend.client.scan_iter(match=f"{prefix}*")]
        ttl = await second.backend.client.pttl(key)
        assert 0 < ttl <= 60_000
    finally:
        for pool in pools:
            await pool.aclose()


async def test_redis_entry_expires_by_redis_ttl(prefix: str) -> None:
    pool = RedisClientPool()
    advisor = CacheAdvisor(RedisCache(pool(REDIS_URL), prefix=prefix), ttl_seconds=0.2)
    model = ScriptedModel(["one", "two"])
    try:
        assert (await advisor.around(advised("q"), terminal(model))).text == "one"
        assert (await advisor.around(advised("q"), terminal(model))).text == "one"
        await anyio.sleep(0.3)  # let Redis expire the key
        assert (await advisor.around(advised("q"), terminal(model))).text == "two"
    finally:
        await pool.aclose()


async def test_redis_down_the_call_still_succeeds(caplog: pytest.LogCaptureFixture) -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    pool = RedisClientPool(timeout_seconds=0.5)
    advisor = resolve_advisor(
        AdvisorRow(
            code="CACHE",
            implementation="cache",
            default_order=100,
            settings={"backend": "redis", "redis_url": url},
        ),
        redis_factory=pool,
    )
    model = ScriptedModel(["answered anyway", "again"])
    try:
        with caplog.at_level(logging.WARNING, logger="pilothouse.advisor"):
            first = await advisor.around(advised("q"), terminal(model))
            started = time.perf_counter()
            second = await advisor.around(advised("q"), terminal(model))
            bypassed_in = time.perf_counter() - started
    finally:
        await pool.aclose()

    assert (first.text, second.text) == ("answered anyway", "again")
    # One warning for the outage; the second call skips Redis without waiting.
    [warning] = caplog.records
    assert warning.getMessage().startswith(
        "advisor CACHE: cache unavailable, calling the model: redis: ConnectionError"
    )
    assert bypassed_in < 0.2
