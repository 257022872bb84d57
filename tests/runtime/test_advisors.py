"""Advisors: chain order, short-circuits, the cache, the content filter, resolution."""

from __future__ import annotations

import logging
import sys
import time
import types
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from uuid import uuid4

import pytest
from pydantic_ai.direct import model_request
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.usage import RequestUsage

from pilothouse.catalog._enums import ProviderKind
from pilothouse.catalog._models import Advisor as AdvisorRow
from pilothouse.errors import PilothouseError
from pilothouse.providers import ModelSpec, ProviderSpec
from pilothouse.runtime._advisors import (
    AdvisedCall,
    Advisor,
    AdvisorChain,
    AdvisorConfigError,
    CacheAdvisor,
    ContentBlocked,
    ContentFilterAdvisor,
    LoggingAdvisor,
    Next,
    cache_key,
    resolve_advisor,
)
from pilothouse.runtime._cache import CacheUnavailable, MemoryCache, RedisCache
from pilothouse.testing import Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio

SECRET_KEY = "sk-test-0123456789abcdef"
SPEC = ModelSpec(
    code="M",
    provider=ProviderSpec(code="P", kind=ProviderKind.TEST, api_key=SECRET_KEY),
    model_name="scripted",
)


def messages(text: str = "hello", *, at: datetime | None = None) -> list[ModelMessage]:
    stamp = at or datetime.now(UTC)
    return [
        ModelRequest(
            parts=[
                SystemPromptPart("be brief", timestamp=stamp),
                UserPromptPart(text, timestamp=stamp),
            ],
            timestamp=stamp,
        )
    ]


def advised(
    text: str = "hello",
    *,
    streaming: bool = False,
    settings: dict[str, Any] | None = None,
    parameters: ModelRequestParameters | None = None,
    tenant: str = "t1",
    spec: ModelSpec = SPEC,
    history: list[ModelMessage] | None = None,
) -> AdvisedCall:
    return AdvisedCall(
        conversation_uuid="conv-1",
        tenant=tenant,
        spec=spec,
        messages=history if history is not None else messages(text),
        settings=settings if settings is not None else {"temperature": 0.0, "max_tokens": 64},  # type: ignore[typeddict-item]
        parameters=parameters or ModelRequestParameters(),
        streaming=streaming,
    )


def terminal(model: ScriptedModel) -> Next:
    async def call_model(call: AdvisedCall) -> ModelResponse:
        return await model_request(
            model,
            call.messages,
            model_settings=call.settings,
            model_request_parameters=call.parameters,
        )

    return call_model


class Recorder:
    """An advisor that records when it is entered and left."""

    def __init__(self, name: str, order: int, log: list[str]) -> None:
        self.name = name
        self.order = order
        self.log = log

    async def around(self, call: AdvisedCall, next: Next) -> ModelResponse:
        self.log.append(f"enter {self.name}")
        response = await next(call)
        self.log.append(f"exit {self.name}")
        return response


# --- the chain ---------------------------------------------------------------


async def test_chain_runs_highest_order_outermost_and_keeps_ties_in_given_order() -> None:
    log: list[str] = []
    chain = AdvisorChain(
        [
            Recorder("low", 10, log),
            Recorder("high", 100, log),
            Recorder("mid-a", 50, log),
            Recorder("mid-b", 50, log),
        ]
    )
    model = ScriptedModel(["done"])

    response = await chain.call(advised(), terminal(model))

    assert response.text == "done"
    assert [a.name for a in chain.advisors] == ["high", "mid-a", "mid-b", "low"]
    assert log == [
        "enter high",
        "enter mid-a",
        "enter mid-b",
        "enter low",
        "exit low",
        "exit mid-b",
        "exit mid-a",
        "exit high",
    ]


async def test_empty_chain_is_falsy_so_the_runner_can_skip_it() -> None:
    assert not AdvisorChain([])
    assert AdvisorChain([Recorder("a", 0, [])])
    response = await AdvisorChain([]).call(advised(), terminal(ScriptedModel(["direct"])))
    assert response.text == "direct"


async def test_short_circuiting_advisor_skips_inner_advisors_and_the_model() -> None:
    log: list[str] = []

    class Canned:
        name = "canned"
        order = 20

        async def around(self, call: AdvisedCall, next: Next) -> ModelResponse:
            log.append("canned")
            return ModelResponse(parts=[TextPart("from the advisor")])

    model = ScriptedModel([])
    chain = AdvisorChain([Recorder("outer", 30, log), Canned(), Recorder("inner", 10, log)])

    response = await chain.call(advised(), terminal(model))

    assert response.text == "from the advisor"
    assert log == ["enter outer", "canned", "exit outer"]
    assert model.requests == []


async def test_advisor_can_replace_the_messages_the_model_sees() -> None:
    class Rewriter:
        name = "rewriter"
        order = 0

        async def around(self, call: AdvisedCall, next: Next) -> ModelResponse:
            call.messages = messages("rewritten")
            return await next(call)

    model = ScriptedModel(["ok"])
    await AdvisorChain([Rewriter()]).call(advised("original"), terminal(model))

    sent = model.requests[0].messages[-1]
    assert isinstance(sent, ModelRequest)
    assert isinstance(sent.parts[-1], UserPromptPart)
    assert sent.parts[-1].content == "rewritten"


def test_builtins_satisfy_the_advisor_protocol() -> None:
    built: list[Any] = [
        LoggingAdvisor(),
        CacheAdvisor(MemoryCache()),
        ContentFilterAdvisor(["x"]),
    ]
    assert all(isinstance(a, Advisor) for a in built)


# --- the cache ---------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_cache_miss_calls_the_model_then_hit_returns_stored_response_with_zero_usage() -> (
    None
):
    model = ScriptedModel([Reply("cached answer", input_tokens=12, output_tokens=3)])
    cache = CacheAdvisor(MemoryCache())
    first_call, second_call = advised(), advised()

    first = await cache.around(first_call, terminal(model))
    second = await cache.around(second_call, terminal(model))

    assert first_call.notes == {"cache": "miss"}
    assert first.usage.input_tokens == 12
    assert second.text == "cached answer"
    assert second.usage == RequestUsage()
    assert second.finish_reason == first.finish_reason
    assert second_call.notes == {
        "cache": "hit",
        "cache_saved": {"input_tokens": 12, "output_tokens": 3},
    }
    assert len(model.requests) == 1


async def test_cache_entry_expires_after_ttl() -> None:
    clock = Clock()
    model = ScriptedModel(["first", "second"])
    cache = CacheAdvisor(MemoryCache(clock=clock), ttl_seconds=60)

    assert (await cache.around(advised(), terminal(model))).text == "first"
    clock.now += 59.9
    assert (await cache.around(advised(), terminal(model))).text == "first"
    clock.now += 0.1
    assert (await cache.around(advised(), terminal(model))).text == "second"
    assert len(model.requests) == 2


async def test_memory_cache_evicts_least_recently_used() -> None:
    cache = MemoryCache(max_entries=2)
    await cache.set("a", b"1", 60)
    await cache.set("b", b"2", 60)
    assert await cache.get("a") == b"1"  # "a" is now the most recently used
    await cache.set("c", b"3", 60)

    assert len(cache) == 2
    assert await cache.get("b") is None
    assert await cache.get("a") == b"1"
    assert await cache.get("c") == b"3"


def test_cache_key_is_stable_across_timestamps_and_generated_ids() -> None:
    def history(at: datetime) -> list[ModelMessage]:
        # Tool-call ids left out: pydantic-ai generates a random one per part.
        call = ToolCallPart("lookup", {"id": 7, "q": "x"})
        return [
            *messages("find x", at=at),
            ModelResponse(parts=[call], timestamp=at, provider_response_id=f"resp-{at}"),
            ModelRequest(
                parts=[ToolReturnPart("lookup", "found", call.tool_call_id, timestamp=at)]
            ),
        ]

    early = history(datetime(2024, 1, 1, tzinfo=UTC))
    late = history(datetime(2025, 6, 30, 12, tzinfo=UTC))
    assert early[1].parts[0].tool_call_id != late[1].parts[0].tool_call_id  # type: ignore[union-attr]

    assert cache_key(advised(history=early)) == cache_key(advised(history=late))


def test_cache_key_changes_with_what_the_model_sees() -> None:
    base = cache_key(advised())
    tool = ToolDefinition(name="lookup", parameters_json_schema={"type": "object"})
    other_spec = ModelSpec(code="M2", provider=SPEC.provider, model_name="other")
    variants = {
        "text": advised("hello!"),
        "settings": advised(settings={"temperature": 0.5, "max_tokens": 64}),
        "tools": advised(parameters=ModelRequestParameters(function_tools=[tool])),
        "output mode": advised(parameters=ModelRequestParameters(output_mode="native")),
        "model": advised(spec=other_spec),
        "tenant": advised(tenant="t2"),
    }
    keys = {name: cache_key(call) for name, call in variants.items()}
    assert all(key != base for key in keys.values()), keys
    assert len(set(keys.values())) == len(keys)


def test_cache_key_keeps_tool_call_pairing() -> None:
    # Two calls answered in swapped order are different conversations.
    def history(first: str, second: str) -> list[ModelMessage]:
        return [
            *messages("go"),
            ModelResponse(
                parts=[
                    ToolCallPart("a", {}, tool_call_id="c1"),
                    ToolCallPart("b", {}, tool_call_id="c2"),
                ]
            ),
            ModelRequest(
                parts=[
                    ToolReturnPart("a", "A", first),
                    ToolReturnPart("b", "B", second),
                ]
            ),
        ]

    assert cache_key(advised(history=history("c1", "c2"))) != cache_key(
        advised(history=history("c2", "c1"))
    )


async def test_streaming_miss_is_not_stored_but_streaming_hit_is_served() -> None:
    model = ScriptedModel(["streamed", "plain", "never"])
    cache = CacheAdvisor(MemoryCache())

    await cache.around(advised(streaming=True), terminal(model))
    plain = await cache.around(advised(streaming=False), terminal(model))
    hit_call = advised(streaming=True)
    hit = await cache.around(hit_call, terminal(model))

    assert plain.text == "plain"
    assert hit.text == "plain"
    assert hit_call.notes["cache"] == "hit"
    assert len(model.requests) == 2


async def test_response_stopped_by_provider_content_filter_is_not_stored() -> None:
    model = ScriptedModel(
        [Reply("", finish_reason="content_filter"), Reply("fine", finish_reason="stop")]
    )
    cache = CacheAdvisor(MemoryCache())

    await cache.around(advised(), terminal(model))
    second = await cache.around(advised(), terminal(model))

    assert second.text == "fine"
    assert len(model.requests) == 2


async def test_cache_backend_outage_calls_the_model_and_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Down:
        async def get(self, key: str) -> bytes | None:
            raise CacheUnavailable("redis: ConnectionError: refused")

        async def set(self, key: str, value: bytes, ttl_seconds: float) -> None:
            raise CacheUnavailable("redis: ConnectionError: refused")

    model = ScriptedModel(["still answered"])
    with caplog.at_level(logging.WARNING, logger="pilothouse.advisor"):
        response = await CacheAdvisor(Down(), name="CACHE").around(advised(), terminal(model))

    assert response.text == "still answered"
    assert [r.getMessage() for r in caplog.records] == [
        "advisor CACHE: cache unavailable, calling the model: redis: ConnectionError: refused",
        "advisor CACHE: cache unavailable, response not stored: redis: ConnectionError: refused",
    ]


async def test_unreadable_cache_entry_is_a_miss() -> None:
    backend = MemoryCache()
    call = advised()
    await backend.set(cache_key(call), b"not json", 60)
    model = ScriptedModel(["fresh"])

    response = await CacheAdvisor(backend).around(call, terminal(model))

    assert response.text == "fresh"


async def test_redis_cache_stops_asking_a_failed_server_for_a_while() -> None:
    from redis.exceptions import ConnectionError as RedisConnectionError

    class FailingClient:
        calls = 0

        async def get(self, key: str) -> bytes | None:
            FailingClient.calls += 1
            raise RedisConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    clock = Clock()
    cache = RedisCache(FailingClient(), retry_after=5, clock=clock)  # type: ignore[arg-type]

    with pytest.raises(CacheUnavailable, match="ConnectionError"):
        await cache.get("k")
    assert await cache.get("k") is None  # bypassed: no second connect attempt
    assert FailingClient.calls == 1
    clock.now += 5
    with pytest.raises(CacheUnavailable):
        await cache.get("k")
    assert FailingClient.calls == 2


# --- the content filter ------------------------------------------------------


async def test_content_filter_blocks_input_by_term_case_insensitively_before_the_call() -> None:
    model = ScriptedModel([])
    flt = ContentFilterAdvisor(["project falcon"], [r"\d{3}-\d{2}-\d{4}"])
    call = advised("Tell me about PROJECT Falcon, my friend")

    with pytest.raises(ContentBlocked) as caught:
        await flt.around(call, terminal(model))

    assert (caught.value.where, caught.value.rule) == ("input", "term 'project falcon'")
    assert str(caught.value) == "content blocked (input): term 'project falcon'"
    assert call.notes == {"content_filter": {"where": "input", "rule": "term 'project falcon'"}}
    assert model.requests == []


async def test_content_filter_terms_match_whole_words_only() -> None:
    flt = ContentFilterAdvisor(["ass", "c++"])
    assert flt.match("a class of its own") is None
    assert flt.match("I like C++.") == "term 'c++'"
    assert flt.match("ass!") == "term 'ass'"


async def test_content_filter_blocks_output_by_pattern() -> None:
    model = ScriptedModel(["Her number is 123-45-6789."])
    flt = ContentFilterAdvisor(["falcon"], [r"\d{3}-\d{2}-\d{4}"])

    with pytest.raises(ContentBlocked) as caught:
        await flt.around(advised("what is her number?"), terminal(model))

    assert (caught.value.where, caught.value.rule) == ("output", r"pattern '\d{3}-\d{2}-\d{4}'")
    assert "Her number" not in str(caught.value)


def test_a_pattern_that_backtracks_without_end_blocks_within_its_time_bound() -> None:
    # A tenant's pattern is searched in the server's process: one that
    # backtracks exponentially would hold it (every tenant's turns) for
    # seconds at 35 characters, for ever at a few hundred.
    flt = ContentFilterAdvisor(blocked_patterns=["(a|aa)+$"])
    started = time.monotonic()

    rule = flt.match("a" * 35 + "!")

    assert time.monotonic() - started < 2
    assert rule == (
        "pattern '(a|aa)+$' (it ran past its time bound on this text and blocks it; "
        "write one without nested or overlapping repetition)"
    )


def test_a_pattern_that_ran_past_its_bound_is_not_searched_again_and_still_blocks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Without a memory of it, a slow pattern would cost the event loop its
    # whole bound on every message of every turn.
    from pilothouse.runtime import _advisors, _bounded_search

    searched: list[str] = []
    compile_pattern = _bounded_search.compile_pattern

    class Counting:
        """A compiled pattern that counts its searches."""

        def __init__(self, found: Any) -> None:
            self.found = found
            self.pattern = found.pattern
            self.flags = found.flags

        def search(self, text: str, **options: Any) -> Any:
            searched.append(self.pattern)
            return self.found.search(text, **options)

    def counting(pattern: str, flags: int = 0) -> Any:
        return Counting(compile_pattern(pattern, flags))

    monkeypatch.setattr(_advisors, "compile_pattern", counting)
    monkeypatch.setattr(_bounded_search, "_SLOW", set[tuple[str, int]]())
    flt = ContentFilterAdvisor(["falcon"], ["(b|bb)+$"])

    first = flt.match("b" * 35 + "!")
    second = flt.match("a short and harmless message")

    assert searched.count("(b|bb)+$") == 1
    assert first == (
        "pattern '(b|bb)+$' (it ran past its time bound on this text and blocks it; "
        "write one without nested or overlapping repetition)"
    )
    assert second == (
        "pattern '(b|bb)+$' (it ran past its time bound on an earlier text and blocks "
        "every text; write one without nested or overlapping repetition)"
    )
    # The terms before it are still searched, and still name themselves.
    assert flt.match("falcon") == "term 'falcon'"


def test_a_filter_with_more_rules_than_the_shared_cache_compiles_each_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The process's shared cache of compiled patterns holds 1,024: a filter
    # with more terms and patterns, compiled through it, would compile every
    # one of them again on every text it checks.
    from pilothouse.runtime import _bounded_search

    compiles: Counter[str] = Counter()
    compile = _bounded_search.regex.compile

    def counting(pattern: str, flags: int = 0) -> Any:
        compiles[pattern] += 1
        return compile(pattern, flags)

    monkeypatch.setattr(_bounded_search.regex, "compile", counting)
    token = uuid4().hex  # rules no other test compiled
    terms = [f"t{token}n{i}" for i in range(600)]
    patterns = [f"p{token}n{i}x[0-9]+" for i in range(600)]
    flt = ContentFilterAdvisor(terms, patterns)

    for _ in range(3):
        assert flt.match("a short and harmless message") is None
    assert flt.match(f"it says p{token}n599x42") == f"pattern 'p{token}n599x[0-9]+'"

    ours = {pattern: count for pattern, count in compiles.items() if token in pattern}
    assert len(ours) == 1200
    assert set(ours.values()) == {1}


async def test_content_filter_checks_tool_call_arguments_in_the_output() -> None:
    model = ScriptedModel([ToolCall("send", {"to": "x", "body": {"lines": ["hi FALCON"]}})])
    flt = ContentFilterAdvisor(["falcon"])

    with pytest.raises(ContentBlocked, match=r"output\): term 'falcon'"):
        await flt.around(advised(), terminal(model))


async def test_content_filter_checks_only_the_latest_user_message() -> None:
    history = [
        *messages("falcon"),
        ModelResponse(parts=[TextPart("noted")]),
        ModelRequest(parts=[UserPromptPart(["something else", "entirely"])]),
    ]
    model = ScriptedModel(["fine"])

    response = await ContentFilterAdvisor(["falcon"]).around(
        advised(history=history), terminal(model)
    )

    assert response.text == "fine"


async def test_content_filter_switches_off_input_or_output_checks() -> None:
    model = ScriptedModel(["falcon back"])
    flt = ContentFilterAdvisor(["falcon"], check_input=False, check_output=False)

    response = await flt.around(advised("falcon"), terminal(model))

    assert response.text == "falcon back"


def test_content_blocked_is_a_pilothouse_error() -> None:
    assert isinstance(ContentBlocked("input", "term 'x'"), PilothouseError)


# --- logging -----------------------------------------------------------------


async def test_logging_advisor_logs_the_call_without_content_or_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    model = ScriptedModel([Reply("the private answer", input_tokens=7, output_tokens=3)])
    call = advised("my private question", settings={"extra_headers": {"x-key": SECRET_KEY}})

    with caplog.at_level(logging.INFO, logger="pilothouse.advisor"):
        await LoggingAdvisor().around(call, terminal(model))

    [record] = caplog.records
    line = record.getMessage()
    assert record.levelno == logging.INFO
    assert "model=scripted provider=P messages=1 stream=False" in line
    assert "input_tokens=7 output_tokens=3 finish_reason=stop" in line
    assert "private" not in line
    assert SECRET_KEY not in caplog.text


async def test_logging_advisor_logs_content_when_asked(caplog: pytest.LogCaptureFixture) -> None:
    model = ScriptedModel(["an answer"])

    with caplog.at_level(logging.DEBUG, logger="audit.calls"):
        await LoggingAdvisor("audit.calls", "DEBUG", log_content=True).around(
            advised("a question"), terminal(model)
        )

    assert [r.name for r in caplog.records] == ["audit.calls", "audit.calls"]
    assert caplog.records[1].getMessage() == (
        "model call content: conversation=conv-1 input='a question' output='an answer'"
    )


async def test_logging_advisor_logs_failures_and_reraises(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def failing(call: AdvisedCall) -> ModelResponse:
        raise ContentBlocked("output", "term 'x'")

    with caplog.at_level(logging.INFO, logger="pilothouse.advisor"):
        with pytest.raises(ContentBlocked):
            await LoggingAdvisor().around(advised(), failing)

    assert "model call failed" in caplog.text
    assert "error=ContentBlocked" in caplog.text


# --- resolution --------------------------------------------------------------


def row(
    implementation: str,
    settings: dict[str, Any] | None = None,
    *,
    code: str = "ADV",
    default_order: int = 10,
) -> AdvisorRow:
    return AdvisorRow(
        code=code,
        implementation=implementation,
        default_order=default_order,
        settings=settings or {},
    )


def test_resolve_builtins_by_name_with_settings_and_effective_order() -> None:
    logging_advisor = resolve_advisor(
        row("logging", {"level": "debug", "log_content": True}, code="LOG")
    )
    cache = resolve_advisor(row("cache", {"ttl_seconds": 600, "max_entries": 5}), 50)
    flt = resolve_advisor(
        row("content-filter", {"blocked_terms": ["x"], "check_output": False}), None
    )

    assert isinstance(logging_advisor, LoggingAdvisor)
    assert (logging_advisor.name, logging_advisor.order) == ("LOG", 10)
    assert (logging_advisor.level, logging_advisor.log_content) == (logging.DEBUG, True)
    assert isinstance(cache, CacheAdvisor)
    assert (cache.order, cache.ttl_seconds) == (50, 600)
    assert isinstance(cache.backend, MemoryCache)
    assert cache.backend.max_entries == 5
    assert isinstance(flt, ContentFilterAdvisor)
    assert (flt.order, flt.check_input, flt.check_output) == (10, True, False)


def test_resolve_redis_cache_uses_the_injected_factory() -> None:
    urls: list[str] = []
    client = object()

    def factory(url: str) -> Any:
        urls.append(url)
        return client

    cache = resolve_advisor(
        row(
            "cache",
            {"backend": "redis", "redis_url": "redis://127.0.0.1:6380/2", "key_prefix": "p:"},
        ),
        redis_factory=factory,
    )

    assert isinstance(cache, CacheAdvisor)
    assert isinstance(cache.backend, RedisCache)
    assert (cache.backend.client, cache.backend.prefix) == (client, "p:")
    assert urls == ["redis://127.0.0.1:6380/2"]


class PluginAdvisor:
    """A custom advisor configured from the catalog's settings."""

    def __init__(self, settings: dict[str, Any]) -> None:
        self.name = "plugin"
        self.order = 0
        self.prefix = settings.get("prefix", "")

    async def around(self, call: AdvisedCall, next: Next) -> ModelResponse:
        response = await next(call)
        return ModelResponse(parts=[TextPart(self.prefix + response.text)])


@pytest.fixture
def plugins() -> Iterator[types.ModuleType]:
    module = types.ModuleType("pilothouse_test_plugins")
    module.PluginAdvisor = PluginAdvisor  # type: ignore[attr-defined]
    module.shared = PluginAdvisor({"prefix": "shared: "})  # type: ignore[attr-defined]
    module.make = lambda settings: PluginAdvisor({"prefix": settings["p"]})  # type: ignore[attr-defined]
    module.not_callable = 42  # type: ignore[attr-defined]
    module.returns_junk = lambda settings: "junk"  # type: ignore[attr-defined]
    module.Namespace = types.SimpleNamespace(inner=PluginAdvisor)  # type: ignore[attr-defined]

    def broken(settings: dict[str, Any]) -> Any:
        raise KeyError("prefix")

    module.broken = broken  # type: ignore[attr-defined]
    sys.modules[module.__name__] = module
    yield module
    del sys.modules[module.__name__]


async def test_resolve_by_dotted_path_class_factory_and_instance(
    plugins: types.ModuleType,
) -> None:
    by_class = resolve_advisor(
        row("pilothouse_test_plugins:PluginAdvisor", {"prefix": "c: "}, code="C"), 70
    )
    by_factory = resolve_advisor(row("pilothouse_test_plugins:make", {"p": "f: "}, code="F"))
    by_instance = resolve_advisor(row("pilothouse_test_plugins:shared", code="I"), 5)
    nested = resolve_advisor(row("pilothouse_test_plugins:Namespace.inner", code="N"))

    assert [(a.name, a.order) for a in (by_class, by_factory, by_instance, nested)] == [
        ("C", 70),
        ("F", 10),
        ("I", 5),
        ("N", 10),
    ]
    chain = AdvisorChain([by_class, by_factory, by_instance])
    response = await chain.call(advised(), terminal(ScriptedModel(["x"])))
    assert response.text == "c: f: shared: x"


@pytest.mark.parametrize(
    ("implementation", "settings", "message"),
    [
        (
            "rag-ish",
            {},
            "advisor 'ADV': implementation 'rag-ish' is neither a built-in (logging, cache, "
            "content-filter) nor a 'package.module:callable' reference",
        ),
        (
            "no_such_module_xyz:thing",
            {},
            "advisor 'ADV': reference 'no_such_module_xyz:thing': cannot import "
            "'no_such_module_xyz': No module named 'no_such_module_xyz'",
        ),
        (
            "pilothouse_test_plugins:missing",
            {},
            "advisor 'ADV': reference 'pilothouse_test_plugins:missing': "
            "'pilothouse_test_plugins' has no attribute 'missing'",
        ),
        (
            "pilothouse_test_plugins:not_callable",
            {},
            "advisor 'ADV': 'pilothouse_test_plugins:not_callable' is neither an advisor "
            "nor callable",
        ),
        (
            "pilothouse_test_plugins:returns_junk",
            {},
            "advisor 'ADV': 'pilothouse_test_plugins:returns_junk' returned str, which has no "
            "'around(call, next)' method",
        ),
        (
            "pilothouse_test_plugins:broken",
            {},
            "advisor 'ADV': 'pilothouse_test_plugins:broken' failed: KeyError: 'prefix'",
        ),
        (
            "content-filter",
            {"blocked_patterns": ["ok", "(unclosed"]},
            "advisor 'ADV': settings.blocked_patterns[1]: invalid regular expression "
            "'(unclosed': missing ) at position 9",
        ),
        (
            "content-filter",
            {"blocked_terms": [" "]},
            "advisor 'ADV': settings.blocked_terms[0]: must not be empty",
        ),
        (
            "cache",
            {"ttl_seconds": 0, "backend": "disk"},
            "advisor 'ADV': settings.backend: Input should be 'memory' or 'redis'; "
            "settings.ttl_seconds: Input should be greater than 0",
        ),
        (
            "cache",
            {"redis_url": "redis://:hunter2@h/0", "ttl": 5},
            "advisor 'ADV': settings.ttl: Extra inputs are not permitted",
        ),
        (
            "logging",
            {"level": "LOUD"},
            "advisor 'ADV': settings.level: unknown log level 'LOUD'",
        ),
    ],
)
def test_resolve_rejects_bad_references_and_settings_naming_the_advisor(
    plugins: types.ModuleType, implementation: str, settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(AdvisorConfigError) as caught:
        resolve_advisor(row(implementation, settings))

    assert str(caught.value) == message
    assert isinstance(caught.value, PilothouseError)


def test_a_pattern_that_ran_out_of_a_shared_or_huge_texts_bound_is_not_remembered(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A pattern is remembered as slow, and then blocks every later text, only
    # when it had most of the bound to itself on a text of ordinary size:
    # otherwise one oversized message, or slow rules before it, would have
    # a harmless pattern refuse every message the process sees afterwards.
    from pilothouse.runtime import _bounded_search

    monkeypatch.setattr(_bounded_search, "_SLOW", set[tuple[str, int]]())
    huge = "b" * (_bounded_search.REMEMBER_TEXT_CHARS + 1)
    with pytest.raises(_bounded_search.PatternTimeout):
        _bounded_search.bounded_search("(b|bb)+$", huge + "!")
    with pytest.raises(_bounded_search.PatternTimeout):
        _bounded_search.bounded_search("(c|cc)+$", "c" * 35 + "!", seconds=0.01)
    assert _bounded_search._SLOW == set()

    flt = ContentFilterAdvisor([], ["(b|bb)+$"])
    assert flt.match(huge + "!") is not None
    assert flt.match("a short and harmless message") is None
