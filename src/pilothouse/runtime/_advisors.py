"""Advisors: an ordered pipeline of interceptors around each model call.

Each advisor gets the call and a ``next`` function; it may change the call,
return a response without calling ``next`` (a cache hit), inspect or replace
the response, or raise (a content filter). The chain runs the advisor with
the highest order outermost. Three are built in (``logging``, ``cache`` and
``content-filter``); any ``package.module:callable`` reference can supply
another. See ``docs/advisors.md``.
"""

from __future__ import annotations

__all__ = [
    "AdvisedCall",
    "Advisor",
    "AdvisorChain",
    "AdvisorConfigError",
    "CacheAdvisor",
    "ContentBlocked",
    "ContentFilterAdvisor",
    "LoggingAdvisor",
    "Next",
    "cache_key",
    "resolve_advisor",
]

import dataclasses
import hashlib
import inspect
import json
import logging
import re
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast, runtime_checkable

import regex
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models import ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage
from pydantic_core import to_jsonable_python

from pilothouse.errors import PilothouseError
from pilothouse.providers import ModelSpec
from pilothouse.runtime._bounded_search import (
    REWRITE_SLOW_PATTERN,
    SEARCH_SECONDS,
    PatternTimeout,
    bounded_search,
    compile_pattern,
)
from pilothouse.runtime._cache import (
    CacheBackend,
    CacheUnavailable,
    MemoryCache,
    RedisCache,
    RedisClientPool,
    RedisFactory,
)
from pilothouse.tools._base import ToolError
from pilothouse.tools._code import BUILTIN_ADVISORS, CodeNotGrantedError, CodePolicy

if TYPE_CHECKING:
    from pilothouse.catalog._views import AdvisorRecord as AdvisorRow


@dataclass
class AdvisedCall:
    """One model call as advisors see it.

    Attributes:
        conversation_uuid: the conversation the call belongs to.
        tenant: the tenant running it.
        spec: the model being called.
        messages: the pydantic-ai messages sent (an advisor may replace them).
        settings: the pydantic-ai model settings.
        parameters: tools and output mode of the request.
        streaming: whether the runner streams this call to listeners.
        notes: audit notes advisors add, e.g. ``{"cache": "hit"}``.
    """

    conversation_uuid: str
    tenant: str
    spec: ModelSpec
    messages: list[ModelMessage]
    settings: ModelSettings | None
    parameters: ModelRequestParameters
    streaming: bool = False
    notes: dict[str, Any] = field(default_factory=dict[str, Any])


Next = Callable[[AdvisedCall], Awaitable[ModelResponse]]
"""The rest of the chain: the inner advisors, then the model call itself."""


@runtime_checkable
class Advisor(Protocol):
    """An interceptor around the model call.

    Attributes:
        name: shown in logs and errors (resolved advisors use their catalog code).
        order: higher runs further out (earlier before, later after the call).
    """

    name: str
    order: int

    async def around(self, call: AdvisedCall, next: Next) -> ModelResponse:
        """Handle ``call``, usually by awaiting ``next(call)`` once."""
        ...


class AdvisorChain:
    """Runs advisors around a terminal call, highest order outermost.

    Advisors with equal order keep the order they were given in.

    Args:
        advisors: the advisors of one action.
    """

    __slots__ = ("advisors",)

    def __init__(self, advisors: Sequence[Advisor]) -> None:
        # sorted() is stable, so ties keep their catalog position.
        self.advisors: tuple[Advisor, ...] = tuple(sorted(advisors, key=lambda a: -a.order))

    def __bool__(self) -> bool:
        return bool(self.advisors)

    def __len__(self) -> int:
        return len(self.advisors)

    async def call(self, call: AdvisedCall, terminal: Next) -> ModelResponse:
        """Run ``call`` through every advisor and finally ``terminal``.

        Args:
            call: the model call.
            terminal: makes the model call itself.

        Returns:
            The response, as the outermost advisor returns it.
        """
        return await self._step(0, terminal, call)

    async def _step(self, index: int, terminal: Next, call: AdvisedCall) -> ModelResponse:
        if index == len(self.advisors):
            return await terminal(call)
        return await self.advisors[index].around(call, partial(self._step, index + 1, terminal))


class ContentBlocked(PilothouseError):
    """The content filter blocked the user's input or the model's output.

    The runner ends the turn with finish reason ``CF``.

    Attributes:
        where: ``input`` or ``output``.
        rule: the term or pattern that matched (never the message itself).
    """

    def __init__(self, where: Literal["input", "output"], rule: str) -> None:
        self.where = where
        self.rule = rule
        super().__init__(f"content blocked ({where}): {rule}")


class AdvisorConfigError(PilothouseError):
    """An advisor cannot be built: a bad reference or invalid settings."""


# --- logging -----------------------------------------------------------------


class _LoggingSettings(BaseModel):
    # Each advisor's settings model is built on first use (defer_build):
    # a process whose actions name no advisor never pays for them.
    model_config = ConfigDict(extra="forbid", defer_build=True)

    logger_name: str = "pilothouse.advisor"
    level: int | str = logging.INFO
    log_content: bool = False


class LoggingAdvisor:
    """Logs each model call: model, message count, duration, usage, finish reason.

    Message content is logged only with ``log_content=True``; settings and
    the provider's credentials never are (settings may carry auth headers).

    Args:
        logger_name: the logger to write to.
        level: the level of the per-call line (an int or a name like ``"DEBUG"``).
        log_content: also log the latest user text and the response text.
        name: the advisor's name.
        order: its order in the chain.
    """

    def __init__(
        self,
        logger_name: str = "pilothouse.advisor",
        level: int | str = logging.INFO,
        *,
        log_content: bool = False,
        name: str = "logging",
        order: int = 0,
    ) -> None:
        self.name = name
        self.order = order
        self.logger = logging.getLogger(logger_name)
        self.level = _level(level)
        self.log_content = log_content

    async def around(self, call: AdvisedCall, next: Next) -> ModelResponse:
        """Time the inner call and log one line about it (or its failure)."""
        if not self.logger.isEnabledFor(self.level):
            return await next(call)
        started = time.perf_counter()
        try:
            response = await next(call)
        except Exception as exc:
            self.logger.log(
                self.level,
                "model call failed: conversation=%s model=%s provider=%s messages=%d "
                "ms=%.1f error=%s",
                call.conversation_uuid,
                call.spec.model_name,
                call.spec.provider.code,
                len(call.messages),
                (time.perf_counter() - started) * 1000,
                type(exc).__name__,
            )
            raise
        usage = response.usage
        self.logger.log(
            self.level,
            "model call: conversation=%s model=%s provider=%s messages=%d stream=%s ms=%.1f "
            "input_tokens=%d output_tokens=%d finish_reason=%s notes=%s",
            call.conversation_uuid,
            call.spec.model_name,
            call.spec.provider.code,
            len(call.messages),
            call.streaming,
            (time.perf_counter() - started) * 1000,
            usage.input_tokens,
            usage.output_tokens,
            response.finish_reason,
            call.notes,
        )
        if self.log_content:
            self.logger.log(
                self.level,
                "model call content: conversation=%s input=%r output=%r",
                call.conversation_uuid,
                latest_user_text(call.messages),
                response.text,
            )
        return response


def _level(level: int | str) -> int:
    if isinstance(level, int):
        return level
    value = logging.getLevelNamesMapping().get(level.upper())
    if value is None:
        raise AdvisorConfigError(f"settings.level: unknown log level '{level}'")
    return value


# --- cache -------------------------------------------------------------------

_KEY_VERSION = "pilothouse-cache-v1"
"""Part of every key: bump it when the key or the stored format changes."""

# Fields that differ between two otherwise identical requests built at
# different times, or that the model never sees (usage, ids, audit metadata).
_VOLATILE_MESSAGE_FIELDS = frozenset(
    {
        "timestamp",
        "run_id",
        "conversation_id",
        "metadata",
        "usage",
        "provider_response_id",
        "provider_details",
        "provider_url",
        "history_digest",
        "failed_attempts",
        "workspace_ref",
    }
)
_VOLATILE_PART_FIELDS = frozenset({"timestamp", "id", "provider_details", "metadata"})
# Responses that are not worth replaying: the next identical call may succeed.
_UNCACHEABLE_FINISH = frozenset({"error", "content_filter"})


def _canonical_messages(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """Serialize messages for the cache key, without what changes per call.

    Tool-call ids are renumbered by first appearance: pydantic-ai generates
    random ids for parts built without one, and providers issue new ones per
    conversation, yet the call/return pairing they express is what matters.
    """
    dumped = cast(
        "list[dict[str, Any]]", ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
    )
    call_ids: dict[str, str] = {}
    canonical: list[dict[str, Any]] = []
    for message in dumped:
        kept = {k: v for k, v in message.items() if k not in _VOLATILE_MESSAGE_FIELDS}
        parts: list[dict[str, Any]] = []
        for part in cast("list[dict[str, Any]]", message.get("parts", [])):
            clean = {k: v for k, v in part.items() if k not in _VOLATILE_PART_FIELDS}
            call_id = clean.get("tool_call_id")
            if isinstance(call_id, str):
                clean["tool_call_id"] = call_ids.setdefault(call_id, f"call-{len(call_ids)}")
            parts.append(clean)
        kept["parts"] = parts
        canonical.append(kept)
    return canonical


def _stable_json(value: Any) -> Any:
    # Objects JSON cannot express (an HTTP client, a callable) are reduced to
    # their type name: their repr holds a memory address that changes per run.
    return to_jsonable_python(value, fallback=lambda obj: type(obj).__qualname__)


def cache_key(call: AdvisedCall) -> str:
    """Return the SHA-256 cache key of a call.

    It covers the tenant (so tenants never see each other's answers), the
    model spec fingerprint, the messages without timestamps and generated
    ids, the model settings and the request parameters (tools, output mode).
    """
    parameters = {
        f.name: getattr(call.parameters, f.name)
        for f in dataclasses.fields(call.parameters)
        if not f.name.startswith("_")
    }
    payload = {
        "v": _KEY_VERSION,
        "tenant": call.tenant,
        "model": call.spec.fingerprint(),
        "messages": _canonical_messages(call.messages),
        "settings": _stable_json(dict(call.settings or {})),
        "parameters": _stable_json(parameters),
    }
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


class _CacheSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    backend: Literal["memory", "redis"] = "memory"
    ttl_seconds: float = Field(default=3600, gt=0)
    max_entries: int = Field(default=1000, ge=1)
    redis_url: str = "redis://127.0.0.1:6379/0"
    key_prefix: str = "pilothouse:cache:"
    timeout_seconds: float = Field(default=0.5, gt=0)


class CacheAdvisor:
    """An exact-match response cache.

    On a hit it returns the stored response without calling ``next``, with
    its usage set to zero tokens (the hit costs nothing, so the turn is not
    charged twice) and ``notes["cache"] = "hit"``; the original usage is in
    ``notes["cache_saved"]``. A streaming call is served from the cache on
    a hit, but its response is not stored on a miss. Responses that ended
    in an error or the provider's content filter are never stored. When the
    backend is unreachable the call goes on uncached, with a warning.

    Args:
        backend: where responses are kept.
        ttl_seconds: how long a response stays.
        name: the advisor's name.
        order: its order in the chain.
    """

    def __init__(
        self,
        backend: CacheBackend,
        *,
        ttl_seconds: float = 3600,
        name: str = "cache",
        order: int = 0,
    ) -> None:
        self.name = name
        self.order = order
        self.backend = backend
        self.ttl_seconds = ttl_seconds
        self._logger = logging.getLogger("pilothouse.advisor")

    async def around(self, call: AdvisedCall, next: Next) -> ModelResponse:
        """Answer from the cache, or call ``next`` and store its response."""
        key = cache_key(call)
        cached = await self._get(key)
        if cached is not None:
            call.notes["cache"] = "hit"
            call.notes["cache_saved"] = {
                "input_tokens": cached.usage.input_tokens,
                "output_tokens": cached.usage.output_tokens,
            }
            return dataclasses.replace(cached, usage=RequestUsage())
        call.notes["cache"] = "miss"
        response = await next(call)
        if not call.streaming and response.finish_reason not in _UNCACHEABLE_FINISH:
            await self._set(key, response)
        return response

    async def _get(self, key: str) -> ModelResponse | None:
        try:
            data = await self.backend.get(key)
        except CacheUnavailable as exc:
            self._logger.warning(
                "advisor %s: cache unavailable, calling the model: %s", self.name, exc
            )
            return None
        if data is None:
            return None
        try:
            [response] = ModelMessagesTypeAdapter.validate_json(data)
        except (ValidationError, ValueError):
            # A stale format or a foreign value under our key: a miss, not a failure.
            self._logger.warning("advisor %s: ignoring an unreadable cache entry", self.name)
            return None
        return response if isinstance(response, ModelResponse) else None

    async def _set(self, key: str, response: ModelResponse) -> None:
        data = ModelMessagesTypeAdapter.dump_json([response])
        try:
            await self.backend.set(key, data, self.ttl_seconds)
        except CacheUnavailable as exc:
            self._logger.warning(
                "advisor %s: cache unavailable, response not stored: %s", self.name, exc
            )


# --- content filter ----------------------------------------------------------


class _ContentFilterSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    blocked_terms: list[str] = Field(default_factory=list[str])
    blocked_patterns: list[str] = Field(default_factory=list[str])
    check_input: bool = True
    check_output: bool = True


class ContentFilterAdvisor:
    """Blocks calls whose input or output contains a blocked term or pattern.

    Matching is case-insensitive. A term matches as a whole word or phrase
    (``ass`` does not match ``class``); a pattern is a regular expression
    searched anywhere. The input checked is the latest user message's text;
    the output checked is the response's text and the string values of its
    tool-call arguments (structured output travels there).

    Args:
        blocked_terms: words or phrases.
        blocked_patterns: regular expressions.
        check_input: check the latest user message before the call.
        check_output: check the response after the call.
        name: the advisor's name.
        order: its order in the chain.

    Raises:
        AdvisorConfigError: a term is empty or a pattern is not a valid regex.
    """

    def __init__(
        self,
        blocked_terms: Sequence[str] = (),
        blocked_patterns: Sequence[str] = (),
        *,
        check_input: bool = True,
        check_output: bool = True,
        name: str = "content-filter",
        order: int = 0,
    ) -> None:
        self.name = name
        self.order = order
        self.check_input = check_input
        self.check_output = check_output
        # (rule, its regular expression, whether a tenant wrote it: a
        # tenant's pattern that ran past the bound is remembered). Compiled
        # here, once, and kept: the process's shared cache holds 1,024, so a
        # filter with more terms and patterns would compile each on every text.
        rules: list[tuple[str, regex.Pattern[str], bool]] = []
        for index, term in enumerate(blocked_terms):
            if not term.strip():
                raise AdvisorConfigError(f"settings.blocked_terms[{index}]: must not be empty")
            # Lookarounds instead of \b, so terms that start or end with
            # punctuation ("c++") still match as a whole.
            word = rf"(?<!\w){re.escape(term.strip())}(?!\w)"
            rules.append((f"term '{term.strip()}'", compile_pattern(word, regex.IGNORECASE), False))
        for index, pattern in enumerate(blocked_patterns):
            try:
                found = compile_pattern(pattern, regex.IGNORECASE)
            except regex.error as exc:
                raise AdvisorConfigError(
                    f"settings.blocked_patterns[{index}]: invalid regular expression "
                    f"'{pattern}': {exc}"
                ) from exc
            rules.append((f"pattern '{pattern}'", found, True))
        self._rules = tuple(rules)

    def match(self, text: str) -> str | None:
        """Return the first rule that ``text`` breaks, or ``None``.

        The rules share a time bound per text (:data:`SEARCH_SECONDS`): a
        tenant's pattern runs in the server's process, and one that
        backtracks without end (``(a|aa)+$``) would hold it, and every other
        tenant's turns, for as long as it runs. A pattern still running at
        the bound blocks the text (a filter that cannot decide does not let
        it through), and the rule says why. The process remembers such a
        pattern when it had most of the bound to itself on a text of
        ordinary size (:func:`bounded_search`): it is not searched again,
        and blocks every later text at once, so it costs the process its
        bound once, not on every message.
        """
        deadline = time.monotonic() + SEARCH_SECONDS
        for rule, pattern, tenants in self._rules:
            try:
                found = bounded_search(
                    pattern,
                    text,
                    seconds=max(deadline - time.monotonic(), 0.001),
                    remember=tenants,
                )
            except PatternTimeout as exc:
                if exc.earlier:
                    return (
                        f"{rule} (it ran past its time bound on an earlier text and blocks "
                        f"every text; {REWRITE_SLOW_PATTERN})"
                    )
                return (
                    f"{rule} (it ran past its time bound on this text and blocks it; "
                    f"{REWRITE_SLOW_PATTERN})"
                )
            if found:
                return rule
        return None

    async def around(self, call: AdvisedCall, next: Next) -> ModelResponse:
        """Check the input, call ``next``, check the output.

        Raises:
            ContentBlocked: the input or the output breaks a rule.
        """
        if self.check_input:
            rule = self.match(latest_user_text(call.messages))
            if rule is not None:
                call.notes["content_filter"] = {"where": "input", "rule": rule}
                raise ContentBlocked("input", rule)
        response = await next(call)
        if self.check_output:
            for text in _response_texts(response):
                rule = self.match(text)
                if rule is not None:
                    call.notes["content_filter"] = {"where": "output", "rule": rule}
                    raise ContentBlocked("output", rule)
        return response


def latest_user_text(messages: Sequence[ModelMessage]) -> str:
    """Return the text of the latest user prompt (its text items joined)."""
    for message in reversed(messages):
        if not isinstance(message, ModelRequest):
            continue
        for part in reversed(message.parts):
            if isinstance(part, UserPromptPart):
                if isinstance(part.content, str):
                    return part.content
                return "\n".join(item for item in part.content if isinstance(item, str))
    return ""


def _response_texts(response: ModelResponse) -> Iterator[str]:
    for part in response.parts:
        if isinstance(part, TextPart):
            yield part.content
        elif isinstance(part, ToolCallPart):
            yield from _strings(part.args_as_dict())


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in cast("Mapping[Any, Any]", value).values():
            yield from _strings(item)
    elif isinstance(value, list | tuple):
        for item in cast("Sequence[Any]", value):
            yield from _strings(item)


# --- resolution --------------------------------------------------------------

_S = TypeVar("_S", bound=BaseModel)


class _Placed:
    """A custom advisor under its catalog code and effective order.

    Wrapping instead of setting attributes keeps one shared advisor object
    (a module-level instance) usable by several actions at different orders.
    """

    __slots__ = ("inner", "name", "order")

    def __init__(self, inner: Any, name: str, order: int) -> None:
        self.inner = inner
        self.name = name
        self.order = order

    async def around(self, call: AdvisedCall, next: Next) -> ModelResponse:
        return await self.inner.around(call, next)


def _settings(model: type[_S], code: str, settings: Mapping[str, Any]) -> _S:
    try:
        return model.model_validate(dict(settings))
    except ValidationError as exc:
        # Field and rule only: the offending value may be a secret (a Redis URL).
        problems = "; ".join(
            f"settings.{'.'.join(str(p) for p in error['loc'])}: {error['msg']}"
            for error in exc.errors()
        )
        raise AdvisorConfigError(f"advisor '{code}': {problems}") from exc


def _builtin(row: AdvisorRow, order: int, redis_factory: RedisFactory | None) -> Advisor | None:
    code, settings = row.code, row.settings or {}
    kind = row.implementation.strip()
    if kind == "logging":
        s = _settings(_LoggingSettings, code, settings)
        return LoggingAdvisor(
            s.logger_name, s.level, log_content=s.log_content, name=code, order=order
        )
    if kind == "cache":
        c = _settings(_CacheSettings, code, settings)
        backend: CacheBackend
        if c.backend == "memory":
            backend = MemoryCache(c.max_entries)
        else:
            factory = redis_factory or RedisClientPool(c.timeout_seconds)
            backend = RedisCache(factory(c.redis_url), prefix=c.key_prefix)
        return CacheAdvisor(backend, ttl_seconds=c.ttl_seconds, name=code, order=order)
    if kind == "content-filter":
        f = _settings(_ContentFilterSettings, code, settings)
        return ContentFilterAdvisor(
            f.blocked_terms,
            f.blocked_patterns,
            check_input=f.check_input,
            check_output=f.check_output,
            name=code,
            order=order,
        )
    return None


def _import(code: str, reference: str, policy: CodePolicy) -> Any:
    if ":" not in reference or not reference.partition(":")[2]:
        raise AdvisorConfigError(
            f"advisor '{code}': implementation '{reference}' is neither a built-in "
            "(logging, cache, content-filter) nor a 'package.module:callable' reference"
        )
    try:
        return policy.resolve(reference, builtin=BUILTIN_ADVISORS)
    except CodeNotGrantedError as exc:
        raise AdvisorConfigError(f"advisor '{code}': implementation: {exc}") from exc
    except ToolError as exc:
        raise AdvisorConfigError(f"advisor '{code}': {exc}") from exc


def _is_advisor(value: Any) -> bool:
    return not inspect.isclass(value) and callable(getattr(value, "around", None))


def resolve_advisor(
    row: AdvisorRow,
    order: int | None = None,
    *,
    redis_factory: RedisFactory | None = None,
    code_policy: CodePolicy | None = None,
) -> Advisor:
    """Build the advisor a catalog row describes.

    ``row.implementation`` is a built-in name (``logging``, ``cache``,
    ``content-filter``) configured by ``row.settings``, or a
    ``package.module:callable`` reference: an object with an ``around``
    method is used as is; a class or factory is called with
    ``settings=row.settings`` and must return one.

    Args:
        row: the catalog's advisor.
        order: the action link's order; ``None`` uses ``row.default_order``.
        redis_factory: builds Redis clients for ``backend: redis`` caches (pass
            a shared :class:`RedisClientPool`; default: a pool per advisor).
        code_policy: what a reference may name; any importable name when None (the
            operator's own process). Where tenants write the catalog, the
            operator's grants (``Settings.catalog_code``).

    Returns:
        The advisor, named by ``row.code``, at its effective order.

    Raises:
        AdvisorConfigError: a bad reference or invalid settings, naming the
            advisor code.
    """
    code = row.code
    effective = order if order is not None else row.default_order
    try:
        builtin = _builtin(row, effective, redis_factory)
    except AdvisorConfigError as exc:
        message = str(exc)
        if not message.startswith(f"advisor '{code}'"):
            message = f"advisor '{code}': {message}"
        raise AdvisorConfigError(message) from exc
    if builtin is not None:
        return builtin
    reference = row.implementation.strip()
    target = _import(code, reference, code_policy or CodePolicy.open())
    if not _is_advisor(target):
        if not callable(target):
            raise AdvisorConfigError(
                f"advisor '{code}': '{reference}' is neither an advisor nor callable"
            )
        try:
            target = target(settings=dict(row.settings or {}))
        except PilothouseError as exc:
            raise AdvisorConfigError(f"advisor '{code}': {exc}") from exc
        except Exception as exc:
            raise AdvisorConfigError(
                f"advisor '{code}': '{reference}' failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not _is_advisor(target):
            raise AdvisorConfigError(
                f"advisor '{code}': '{reference}' returned {type(target).__name__}, "
                "which has no 'around(call, next)' method"
            )
    return _Placed(target, code, effective)
