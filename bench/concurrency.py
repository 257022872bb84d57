"""Scenario 2 (concurrent conversations) and scenario 3 at high concurrency.

Scenario names (``harness.py --scenarios``):

- ``conc-<N>``: N simulated users at once, each one conversation of
  ``--conc-turns`` turns (5) with growing history and a tool call on turn 3,
  mock delay ``--conc-delay`` ms (500). The user's turn ``t`` is sent as soon
  as turn ``t - 1`` is answered (a closed system: N requests in flight when
  nobody is CPU-bound, so Little's law gives the ideal throughput).
- ``stream-<N>``: N streamed answers at once (first chunk at 200 ms, 64
  chunks 20 ms apart, the scenario-3 stream).

Both sides live here: the harness calls :func:`run_scenario` (one worker
process per contender, see ``bench/worker.py``) and the worker calls
:func:`worker`. Every contender gets an HTTP connection pool of
:data:`POOL` connections (keep-alive too) and a 600 s timeout with a 10 s
connect timeout (pilothouse's, which it has no setting for), so none is
throttled by its client's defaults (httpx2, which pilothouse uses: 100
connections, 20 kept alive; openai SDK: 1,000, 100 kept alive; LiteLLM's
aiohttp transport: 500 per host). The floor (contender ``httpx``) is raw
httpx2 here, not httpx 0.28 (see :func:`_chat_httpx`).

What each conversation sends: the system prompt, then its whole history
(user and assistant messages, the tool call and its result), plus the new
user message; one tool schema (``tool_00``) on every request. The mock
(``conv-d<ms>`` models, ``bench/mock_upstream.py``) answers
``"re <n>: <user text>"``, so each contender checks that every answer came
back to the right turn with the whole history (``history_mismatches``).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import contenders as C

POOL = 1100
"""Connections each contender's HTTP client may open (and keep alive)."""
TIMEOUT_S = 600.0
CONNECT_TIMEOUT_S = 10.0
"""Everyone's connect timeout: pilothouse's (fixed in its model factory); the openai SDK's
is 5 s."""
TOOL_TURN = 3
TOOL_MARK = "[use tool]"
CONV_DELAYS = (500, 100, 20)
"""Mock delays pilothouse has a catalog action for (``CONV<ms>``, model ``conv-d<ms>``)."""
STREAM_ACTION = "STREAM"
QUICK_STREAM = "stream-f20-k16-g2"
"""The stream of ``--smoke`` runs (action ``STREAMQ``): the same path, 16 chunks in 50 ms."""
SUPPORTED = [
    "httpx",
    "openai",
    "litellm",
    "pydantic-ai-model_request",
    "pydantic-ai-Agent.run",
    "langchain",
    "pilothouse-sqlite",
    "pilothouse-noaudit",
    "pilothouse-postgres",
]
_NAME = re.compile(r"^(conc|stream)-(\d+)$")


def handles(scenario: str) -> bool:
    """Tell whether ``scenario`` is one of this module's (``conc-N``, ``stream-N``)."""
    return bool(_NAME.match(scenario))


def _parse(scenario: str) -> tuple[str, int]:
    match = _NAME.match(scenario)
    assert match is not None
    return match.group(1), int(match.group(2))


def user_text(user: int, turn: int) -> str:
    """The message simulated user ``user`` sends at ``turn`` (unique; turn 3 asks for the tool)."""
    text = f"Conversation {user}, turn {turn}: tell me one more thing."
    if turn == TOOL_TURN:
        text += f" {TOOL_MARK} Look up a fact about Paris with tool_00."
    return text


def expected_sent(turn: int) -> int:
    """Messages the final request of ``turn`` carries: system + history + user (+ tool pair)."""
    history = 2 * (turn - 1) + (2 if turn > TOOL_TURN else 0)
    return 1 + history + 1 + (2 if turn == TOOL_TURN else 0)


def expected_stored(turns: int) -> int:
    """Messages pilothouse should store for a conversation of ``turns`` completed turns.

    The system prompt is recorded once (``SY``: it does not change between
    the turns), then each turn's prompt and answer, and the tool turn's call
    and result.
    """
    return 1 + 2 * turns + (2 if turns >= TOOL_TURN else 0)


def check_answer(text: str | None, user: int, turn: int) -> bool:
    """Tell whether the mock's answer shows the whole history and the right user text."""
    return text == f"re {expected_sent(turn)}: {user_text(user, turn)}"


def catalog_parts() -> tuple[str, str]:
    """Return the models and actions scenario 2 adds to the benchmark catalog."""
    models = "".join(
        f"""  - code: MCONV{ms}
    provider: MOCK
    model_name: conv-d{ms}
    capabilities: [FC, SR]
    input_price: 0
    output_price: 0
    context_window: 128000
"""
        for ms in CONV_DELAYS
    )
    actions = "".join(
        f"""  - code: CONV{ms}
    name: Benchmark conversation, mock delay {ms} ms
    model: MCONV{ms}
    configuration: BNCH
    memory_strategy: FULL
    prompt: {C.SYSTEM}
    ask_user: false
    tools: [T00]
"""
        for ms in CONV_DELAYS
    )
    models += f"""  - code: MSTREAMQ
    provider: MOCK
    model_name: {QUICK_STREAM}
    capabilities: [FC, SR]
    input_price: 0
    output_price: 0
    context_window: 128000
"""
    actions += f"""  - code: STREAMQ
    name: Benchmark quick stream (smoke)
    model: MSTREAMQ
    configuration: BNCH
    prompt: {C.SYSTEM}
    ask_user: false
"""
    return models, actions


# --- worker side: the contenders ----------------------------------------------------


@dataclass
class Chat:
    """A contender built for this module's scenarios.

    ``start(user)`` opens a conversation and returns its state; ``turn(state,
    user, turn)`` sends one user message (running the tool loop) and returns
    the final answer text; ``stream()`` makes one streamed call (facts as in
    ``contenders.StreamClock``); ``count(states, turns_done)`` counts the
    stored messages (pilothouse only).
    """

    start: Callable[[int], Awaitable[Any]]
    turn: Callable[[Any, int, int], Awaitable[str | None]]
    stream: Callable[[], Awaitable[dict[str, Any]]]
    aclose: Callable[[], Awaitable[None]]
    count: Callable[[list[Any], list[int], int], Awaitable[dict[str, Any]]] | None = None
    client: str = ""
    """The HTTP client, when it is not the contender's own default."""


def _stream_model(options: dict[str, Any]) -> str:
    return options.get("stream_model") or C.STREAM_MODEL


def stream_chunks(model: str) -> int:
    """The number of content chunks the mock streams for ``model``."""
    match = re.match(r"^stream-f\d+-k(\d+)-g\d+$", model)
    assert match is not None, model
    return int(match.group(1))


def _tool_schema() -> list[dict[str, Any]]:
    return C.tool_schemas()[:1]


def _httpx2_limits() -> Any:
    import httpx2

    return httpx2.Limits(max_connections=POOL, max_keepalive_connections=POOL)


def _timeout(module: Any) -> Any:
    """600 s, connect 10 s: pilothouse's provider client's, which it has no setting for."""
    return module.Timeout(TIMEOUT_S, connect=CONNECT_TIMEOUT_S)


def _openai_http_client() -> Any:
    """The openai SDK's own default client class, with the raised pool and pilothouse's timeouts."""
    import httpx2
    import openai

    return openai.DefaultAsyncHttpxClient(limits=_httpx2_limits(), timeout=_timeout(httpx2))


async def _noop() -> None:
    return None


async def _chat_httpx(base_url: str, model: str, options: dict[str, Any]) -> Chat:
    # The floor here is httpx2, the httpx fork under openai 3, pydantic-ai,
    # LangChain and pilothouse: httpx 0.28's pool (httpcore 1.0) rescans every
    # connection for every queued request, which from ~150 connections costs
    # more CPU per turn than any SDK on top of httpx2 (measured: 22 ms vs 3 ms).
    import httpx2 as httpx

    client = httpx.AsyncClient(
        base_url=base_url,
        headers={"authorization": "Bearer x"},
        limits=httpx.Limits(max_connections=POOL, max_keepalive_connections=POOL),
        timeout=_timeout(httpx),
    )
    tools = _tool_schema()

    async def start(user: int) -> list[dict[str, Any]]:
        return [{"role": "system", "content": C.SYSTEM}]

    async def complete(messages: list[dict[str, Any]]) -> dict[str, Any]:
        body = {"model": model, "messages": messages, "max_tokens": 256, "tools": tools}
        response = await client.post("/chat/completions", json=body)
        response.raise_for_status()
        return response.json()["choices"][0]["message"]

    async def turn(messages: list[dict[str, Any]], user: int, t: int) -> str | None:
        messages.append({"role": "user", "content": user_text(user, t)})
        while True:
            message = await complete(messages)
            messages.append(message)
            calls = message.get("tool_calls") or []
            if not calls:
                return message.get("content")
            for call in calls:
                result = C.run_tool(call["function"]["name"], call["function"]["arguments"])
                messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})

    async def stream() -> dict[str, Any]:
        clock = C.StreamClock()
        body = {
            "model": _stream_model(options),
            "messages": C._messages(),
            "max_tokens": 256,
            "stream": True,
        }
        async with client.stream("POST", "/chat/completions", json=body) as response:
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                choices = json.loads(line[6:]).get("choices") or []
                if choices:
                    clock.chunk(choices[0]["delta"].get("content"))
        return clock.facts()

    return Chat(start, turn, stream, client.aclose, client=f"httpx2 {httpx.__version__}")


def _sdk_turn(create: Callable[..., Awaitable[Any]], model: str) -> Any:
    """One turn with the tool loop through an OpenAI-shaped ``create`` (openai SDK, LiteLLM)."""
    tools = _tool_schema()

    async def turn(messages: list[Any], user: int, t: int) -> str | None:
        messages.append({"role": "user", "content": user_text(user, t)})
        while True:
            r = await create(model=model, messages=messages, max_tokens=256, tools=tools)
            message = r.choices[0].message
            messages.append(message.model_dump(exclude_none=True))
            if not message.tool_calls:
                return message.content
            for call in message.tool_calls:
                result = C.run_tool(call.function.name, call.function.arguments)
                messages.append({"role": "tool", "tool_call_id": call.id, "content": result})

    return turn


async def _start_dicts(user: int) -> list[Any]:
    return [{"role": "system", "content": C.SYSTEM}]


async def _chat_openai(base_url: str, model: str, options: dict[str, Any]) -> Chat:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(
        base_url=base_url, api_key="x", max_retries=0, http_client=_openai_http_client()
    )

    async def stream() -> dict[str, Any]:
        clock = C.StreamClock()
        s = await client.chat.completions.create(
            model=_stream_model(options),
            messages=C._messages(),
            max_tokens=256,
            stream=True,  # type: ignore[arg-type]
        )
        async for chunk in s:
            if chunk.choices:
                clock.chunk(chunk.choices[0].delta.content)
        return clock.facts()

    return Chat(
        _start_dicts, _sdk_turn(client.chat.completions.create, model), stream, client.close
    )


async def _chat_litellm(base_url: str, model: str, options: dict[str, Any]) -> Chat:
    # LiteLLM's default transport (aiohttp) reads its pool limits at import.
    os.environ["AIOHTTP_CONNECTOR_LIMIT"] = str(POOL)
    os.environ["AIOHTTP_CONNECTOR_LIMIT_PER_HOST"] = str(POOL)
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    common = {"api_base": base_url, "api_key": "x", "num_retries": 0, "timeout": TIMEOUT_S}

    async def create(model: str, **kwargs: Any) -> Any:
        return await litellm.acompletion(model="openai/" + model, **kwargs, **common)

    async def stream() -> dict[str, Any]:
        clock = C.StreamClock()
        s: Any = await create(
            _stream_model(options), messages=C._messages(), max_tokens=256, stream=True
        )
        async for chunk in s:
            if chunk.choices:
                clock.chunk(chunk.choices[0].delta.content)
        return clock.facts()

    return Chat(_start_dicts, _sdk_turn(create, model), stream, _noop)


def _pai_model(base_url: str, model: str) -> Any:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base_url, api_key="x", http_client=_openai_http_client())
    return OpenAIChatModel(model, provider=provider)


async def _chat_pai_request(base_url: str, model_name: str, options: dict[str, Any]) -> Chat:
    from pydantic_ai import messages as m
    from pydantic_ai.direct import model_request, model_request_stream
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.tools import ToolDefinition

    model = _pai_model(base_url, model_name)
    stream_model = _pai_model(base_url, _stream_model(options))
    settings: Any = {"max_tokens": 256}
    params = ModelRequestParameters(
        function_tools=[
            ToolDefinition(
                name=t["function"]["name"],
                description=t["function"]["description"],
                parameters_json_schema=t["function"]["parameters"],
            )
            for t in _tool_schema()
        ]
    )

    async def start(user: int) -> list[Any]:
        return []

    async def turn(messages: list[Any], user: int, t: int) -> str | None:
        parts: list[Any] = [m.UserPromptPart(user_text(user, t))]
        if not messages:
            parts.insert(0, m.SystemPromptPart(C.SYSTEM))
        messages.append(m.ModelRequest(parts=parts))
        while True:
            r = await model_request(
                model, messages, model_settings=settings, model_request_parameters=params
            )
            messages.append(r)
            calls = [p for p in r.parts if isinstance(p, m.ToolCallPart)]
            if not calls:
                return r.text
            messages.append(
                m.ModelRequest(
                    parts=[
                        m.ToolReturnPart(
                            p.tool_name, C.run_tool(p.tool_name, p.args or {}), p.tool_call_id
                        )  # type: ignore[arg-type]
                        for p in calls
                    ]
                )
            )

    async def stream() -> dict[str, Any]:
        clock = C.StreamClock()
        first = [m.ModelRequest(parts=[m.SystemPromptPart(C.SYSTEM), m.UserPromptPart(C.USER)])]
        async with model_request_stream(stream_model, first, model_settings=settings) as s:
            async for event in s:
                if isinstance(event, m.PartStartEvent) and isinstance(event.part, m.TextPart):
                    clock.chunk(event.part.content)
                elif isinstance(event, m.PartDeltaEvent) and isinstance(
                    event.delta, m.TextPartDelta
                ):
                    clock.chunk(event.delta.content_delta)
        return clock.facts()

    return Chat(start, turn, stream, _noop)


async def _chat_pai_agent(base_url: str, model_name: str, options: dict[str, Any]) -> Chat:
    from pydantic_ai import Agent, Tool

    schema = _tool_schema()[0]["function"]
    tool = Tool.from_schema(
        lambda city: C.run_tool(schema["name"], {"city": city}),
        name=schema["name"],
        description=schema["description"],
        json_schema=schema["parameters"],
    )
    settings: Any = {"max_tokens": 256}
    agent: Any = Agent(
        _pai_model(base_url, model_name),
        instructions=C.SYSTEM,
        tools=[tool],
        model_settings=settings,
    )
    stream_agent: Any = Agent(
        _pai_model(base_url, _stream_model(options)), instructions=C.SYSTEM, model_settings=settings
    )

    async def start(user: int) -> list[Any]:
        return [None]  # the message history, replaced after every run

    async def turn(state: list[Any], user: int, t: int) -> str | None:
        r = await agent.run(user_text(user, t), message_history=state[0])
        state[0] = r.all_messages()
        return r.output

    async def stream() -> dict[str, Any]:
        clock = C.StreamClock()
        async with stream_agent.run_stream(C.USER) as r:
            async for text in r.stream_text(delta=True, debounce_by=None):
                clock.chunk(text)
        return clock.facts()

    return Chat(start, turn, stream, _noop)


async def _chat_langchain(base_url: str, model_name: str, options: dict[str, Any]) -> Chat:
    import httpx2
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    def chat(model: str) -> Any:
        return ChatOpenAI(
            model=model,
            base_url=base_url,
            api_key="x",  # type: ignore[arg-type]
            max_retries=0,
            max_tokens=256,  # type: ignore[call-arg]
            timeout=_timeout(httpx2),  # else it overrides the client's (None: no timeout)
            http_async_client=_openai_http_client(),
        )

    bound = chat(model_name).bind_tools(_tool_schema())
    streamer = chat(_stream_model(options))

    async def start(user: int) -> list[Any]:
        return [SystemMessage(C.SYSTEM)]

    async def turn(messages: list[Any], user: int, t: int) -> str | None:
        messages.append(HumanMessage(user_text(user, t)))
        while True:
            r = await bound.ainvoke(messages)
            messages.append(r)
            if not r.tool_calls:
                return r.content
            for call in r.tool_calls:
                messages.append(
                    ToolMessage(C.run_tool(call["name"], call["args"]), tool_call_id=call["id"])
                )

    async def stream() -> dict[str, Any]:
        clock = C.StreamClock()
        async for chunk in streamer.astream([SystemMessage(C.SYSTEM), HumanMessage(C.USER)]):
            clock.chunk(chunk.content)
        return clock.facts()

    return Chat(start, turn, stream, _noop)


async def _chat_pilothouse(base_url: str, model_name: str, options: dict[str, Any]) -> Chat:
    from sqlalchemy import text

    from pilothouse.api import Pilothouse
    from pilothouse.runtime import TextDelta
    from pilothouse.settings import Settings

    # The same pool and timeouts as every other contender, through pilothouse's
    # own settings (PILOTHOUSE_PROVIDER_MAX_CONNECTIONS and friends).
    settings = Settings(
        database_url=options["database_url"],
        provider_max_connections=POOL,
        provider_connect_timeout=CONNECT_TIMEOUT_S,
        provider_timeout=TIMEOUT_S,
    )
    ph = Pilothouse(settings, tenant="bench")
    await ph.__aenter__()
    action = "CONV" + model_name.removeprefix("conv-d")
    stream_action = STREAM_ACTION if _stream_model(options) == C.STREAM_MODEL else "STREAMQ"
    config = {"audit": False} if options.get("audit") is False else None

    async def start(user: int) -> dict[str, str]:
        # The conversation is written with its first turn (start_and_send).
        return {}

    async def turn(state: dict[str, str], user: int, t: int) -> str | None:
        if "uuid" not in state:
            r = await ph.command.start_and_send(
                user_text(user, t), action=action, runtime_config=config
            )
            state["uuid"] = r.conversation_uuid
        else:
            r = await ph.command.send_message(
                state["uuid"], user_text(user, t), runtime_config=config
            )
        if r.error:
            raise RuntimeError(f"turn failed ({r.status}): {r.error}")
        return r.text

    async def stream() -> dict[str, Any]:
        clock = C.StreamClock()
        async for event in ph.command.start_and_stream(
            C.USER, action=stream_action, runtime_config=config
        ):
            if isinstance(event, TextDelta):
                clock.chunk(event.text)
        return clock.facts()

    async def count(states: list[dict[str, str]], done: list[int], turns: int) -> dict[str, Any]:
        """Count, in the store, what each conversation of the round left behind."""
        # A conversation whose first call raised has no uuid and wrote nothing:
        # that call is reported as an error, not counted here.
        kept = [
            (state["uuid"], d) for state, d in zip(states, done, strict=True) if "uuid" in state
        ]
        uuids, done = [u for u, _ in kept], [d for _, d in kept]
        stored: dict[str, tuple[str, int, int]] = {}
        duplicated_content = 0
        async with ph._shared.database.engine.connect() as connection:  # pyright: ignore[reportPrivateUsage]
            for i in range(0, len(uuids), 500):
                chunk = uuids[i : i + 500]
                marks = ", ".join(f":u{j}" for j in range(len(chunk)))
                values = {f"u{j}": u for j, u in enumerate(chunk)}
                rows = await connection.execute(
                    text(
                        "SELECT c.uuid, c.status, COUNT(m.id), COUNT(DISTINCT m.sequence)"
                        " FROM conversation c LEFT JOIN message m ON m.conversation_id = c.id"
                        f" WHERE c.uuid IN ({marks}) GROUP BY c.id, c.uuid, c.status"
                    ),
                    values,
                )
                for uuid, status, n, distinct in rows:
                    stored[uuid] = (str(status), int(n), int(distinct))
                dup = await connection.execute(
                    text(
                        "SELECT COUNT(*) FROM (SELECT m.conversation_id FROM message m"
                        " JOIN conversation c ON c.id = m.conversation_id"
                        f" WHERE c.uuid IN ({marks}) AND m.content <> ''"
                        " GROUP BY m.conversation_id, m.role, m.content HAVING COUNT(*) > 1) d"
                    ),
                    values,
                )
                duplicated_content += int(dup.scalar() or 0)
        facts = {
            "conversations": len(uuids),
            "conversations_missing": 0,
            "complete_conversations": 0,
            "expected_messages": 0,
            "stored_messages": 0,
            "lost_messages": 0,
            "extra_messages": 0,
            "duplicate_sequences": 0,
            "duplicate_contents": duplicated_content,
            "not_idle": 0,
            "complete_not_completed": 0,
            "statuses": {},
        }
        for uuid, ok_turns in zip(uuids, done, strict=True):
            row = stored.get(uuid)
            if row is None:
                facts["conversations_missing"] += 1
                continue
            status, n, distinct = row
            facts["statuses"][status] = facts["statuses"].get(status, 0) + 1
            facts["duplicate_sequences"] += n - distinct
            # Running, stuck, waiting or paused after every client call returned.
            facts["not_idle"] += status in ("RU", "ST", "WA", "PA")
            if ok_turns < turns:
                continue  # a failed turn is reported as an error, not counted here
            facts["complete_conversations"] += 1
            expected = expected_stored(turns)
            facts["expected_messages"] += expected
            facts["stored_messages"] += n
            facts["lost_messages"] += max(0, expected - n)
            facts["extra_messages"] += max(0, n - expected)
            facts["complete_not_completed"] += status != "CO"
        return facts

    async def close() -> None:
        await ph.aclose()

    return Chat(start, turn, stream, close, count)


BUILDERS: dict[str, Callable[[str, str, dict[str, Any]], Awaitable[Chat]]] = {
    "httpx": _chat_httpx,
    "openai": _chat_openai,
    "litellm": _chat_litellm,
    "pydantic-ai-model_request": _chat_pai_request,
    "pydantic-ai-Agent.run": _chat_pai_agent,
    "langchain": _chat_langchain,
    "pilothouse-sqlite": _chat_pilothouse,
    "pilothouse-noaudit": _chat_pilothouse,
    "pilothouse-postgres": _chat_pilothouse,
}


# --- worker side: the rounds --------------------------------------------------------


_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    """This process's resident set size now, in MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


def cores_used() -> list[int]:
    """The cores any thread of this process may run on."""
    cores: set[int] = set()
    for tid in os.listdir("/proc/self/task"):
        try:
            cores |= os.sched_getaffinity(int(tid))
        except (ProcessLookupError, FileNotFoundError):
            pass
    return sorted(cores)


def maxrss_mb() -> float:
    """This process's peak resident set size so far (``ru_maxrss``), in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class FullCollections:
    """Counts the cyclic collector's full (generation 2) collections and their CPU time.

    A full collection walks every tracked object of the process, so its
    cost is the heap's size, and one inside a round of streams delays every
    stream still waiting (docs/benchmarks.md).
    """

    def __init__(self) -> None:
        self.count = 0
        self.cpu_ms: list[float] = []
        self.tracked = 0
        self._began = 0.0

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if info["generation"] != 2:
            return
        if phase == "start":
            self._began = time.process_time()
        else:
            self.count += 1
            self.cpu_ms.append((time.process_time() - self._began) * 1000)

    def __enter__(self) -> FullCollections:
        self.tracked = len(gc.get_objects())
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._callback)

    def facts(self) -> dict[str, Any]:
        """The round's full collections: how many, their CPU ms, tracked objects at the start."""
        return {"gc_full": self.count, "gc_full_ms": self.cpu_ms, "gc_tracked": self.tracked}


@dataclass
class Ticker:
    """Measures event-loop lag (a 10 ms sleep's overshoot) and samples RSS."""

    lags_ms: list[float] = field(default_factory=lambda: [])
    peak_rss_mb: float = 0.0
    _task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.peak_rss_mb = rss_mb()
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        i = 0
        while True:
            t = time.perf_counter()
            await asyncio.sleep(0.01)
            self.lags_ms.append((time.perf_counter() - t - 0.01) * 1000)
            i += 1
            if i % 5 == 0:
                self.peak_rss_mb = max(self.peak_rss_mb, rss_mb())

    async def stop(self) -> dict[str, Any]:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            pass
        self.peak_rss_mb = max(self.peak_rss_mb, rss_mb())
        lags = self.lags_ms
        return {
            "lag_p50_ms": statistics.median(lags) if lags else None,
            "lag_p99_ms": _percentile(lags, 99),
            "lag_max_ms": max(lags) if lags else None,
            "lag_samples": len(lags),
        }


def _percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def _kinds(errors: list[str]) -> dict[str, int]:
    """Count errors by kind: where (start, turn n) and the message with numbers blanked."""
    kinds: dict[str, int] = {}
    for error in errors:
        key = re.sub(r"[0-9a-f]{8}-[0-9a-f-]{27}", "<uuid>", error)
        key = re.sub(r"\d+(\.\d+)?", "N", key.split(" (Background")[0])[:160]
        kinds[key] = kinds.get(key, 0) + 1
    return dict(sorted(kinds.items(), key=lambda item: -item[1]))


class _Users:
    next_id = 0

    @classmethod
    def take(cls, n: int) -> range:
        start = cls.next_id
        cls.next_id += n
        return range(start, start + n)


async def _conversations(chat: Chat, users: int, turns: int, measure: bool) -> dict[str, Any]:
    """Run ``users`` conversations at once; return their facts."""
    latencies: list[list[float]] = []  # [turn, ms]
    errors: list[str] = []
    mismatches = 0
    states: list[Any] = []
    done: list[int] = []

    async def one(user: int) -> None:
        nonlocal mismatches
        try:
            state = await chat.start(user)
        except Exception as exc:
            errors.append(f"start: {type(exc).__name__}: {exc}"[:300])
            return
        index = len(states)
        states.append(state)
        done.append(0)
        for t in range(1, turns + 1):
            begin = time.perf_counter()
            try:
                answer = await chat.turn(state, user, t)
            except Exception as exc:  # a contender's failure is a result, reported
                errors.append(f"turn {t}: {type(exc).__name__}: {exc}"[:300])
                return
            latencies.append([t, (time.perf_counter() - begin) * 1000])
            done[index] = t
            if not check_answer(answer, user, t):
                mismatches += 1

    ticker = Ticker()
    rss_before = rss_mb()
    ticker.start()
    cpu = time.process_time()
    wall = time.perf_counter()
    await asyncio.gather(*(one(u) for u in _Users.take(users)))
    wall_s = time.perf_counter() - wall
    cpu_s = time.process_time() - cpu
    loop = await ticker.stop()
    result: dict[str, Any] = {
        "users": users,
        "turns": turns,
        "lat": latencies,
        "turns_done": len(latencies),
        "errors": len(errors),
        "error_samples": errors[:5],
        "error_kinds": _kinds(errors),
        "history_mismatches": mismatches,
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        **loop,
        "rss_before_mb": rss_before,
        "rss_peak_mb": ticker.peak_rss_mb,
        "rss_after_mb": rss_mb(),
        "maxrss_mb": maxrss_mb(),
        "cores": cores_used(),
    }
    if measure and chat.count is not None:
        begin = time.perf_counter()
        result["store"] = await chat.count(states, done, turns)
        result["store"]["count_s"] = time.perf_counter() - begin
    return result


async def _streams(chat: Chat, n: int) -> dict[str, Any]:
    """Run ``n`` streamed calls at once; return their facts."""
    facts: list[dict[str, Any]] = []
    errors: list[str] = []
    latencies: list[float] = []

    async def one() -> None:
        begin = time.perf_counter()
        try:
            fact = await chat.stream()
        except Exception as exc:
            errors.append(f"{type(exc).__name__}: {exc}"[:300])
            return
        latencies.append((time.perf_counter() - begin) * 1000)
        facts.append(fact)

    ticker = Ticker()
    rss_before = rss_mb()
    ticker.start()
    with FullCollections() as collections:
        cpu = time.process_time()
        wall = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(n)))
        wall_s = time.perf_counter() - wall
        cpu_s = time.process_time() - cpu
    # Every stream was asked for at `wall`, as 200 requests arriving at once
    # are: its time to first chunk counts from there. The per-call clock
    # (`ttft_ms`) starts when the call's own code first runs, which for a
    # client that does all its start-up before it first yields comes only
    # after every earlier start has finished.
    for fact in facts:
        if fact.get("first_at") is not None:
            fact["ttft_launch_ms"] = (fact["first_at"] - wall) * 1000
    loop = await ticker.stop()
    return {
        "streams": n,
        "facts": facts,
        "lat_ms": latencies,
        "errors": len(errors),
        "error_samples": errors[:5],
        "error_kinds": _kinds(errors),
        "wall_s": wall_s,
        "cpu_s": cpu_s,
        **loop,
        **collections.facts(),
        "rss_before_mb": rss_before,
        "rss_peak_mb": ticker.peak_rss_mb,
        "maxrss_mb": maxrss_mb(),
        "cores": cores_used(),
    }


def _raise_fd_limit() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


async def worker(
    options: dict[str, Any], send: Callable[[dict[str, Any]], None], t0: float, c0: float
) -> None:
    """The worker process's side: build, make a first conversation, obey the harness."""
    import traceback

    _raise_fd_limit()
    kind, _ = _parse(options["scenario"])
    model = f"conv-d{options['delay_ms']}"
    turns = options["turns"]
    chat = await BUILDERS[options["contender"]](options["base_url"], model, options)
    setup_s = time.perf_counter() - t0
    first_error = None
    try:
        if kind == "stream":
            await chat.stream()
        else:
            first = await _conversations(chat, 1, turns, measure=False)
            if first["errors"] or first["history_mismatches"]:
                first_error = json.dumps(
                    {k: first[k] for k in ("error_samples", "history_mismatches", "turns_done")}
                )
    except Exception as exc:
        first_error = f"{type(exc).__name__}: {exc}"[:2000] + "\n" + traceback.format_exc()[-3000:]
    send(
        {
            "ready": True,
            "import_setup_ms": setup_s * 1000,
            "cold_ms": (time.perf_counter() - t0) * 1000,
            "cold_cpu_ms": (time.process_time() - c0) * 1000,
            "first_error": first_error,
            "rss_mb": rss_mb(),
            "client": chat.client,
        }
    )
    loop = asyncio.get_running_loop()
    while True:
        line = await loop.run_in_executor(None, sys.stdin.readline)
        if not line:
            break
        command = json.loads(line)
        if command["op"] == "conc":
            send(await _conversations(chat, command["users"], turns, command.get("measure", True)))
        elif command["op"] == "streams":
            send(await _streams(chat, command["n"]))
        else:
            break
    await chat.aclose()


# --- harness side -------------------------------------------------------------------


def add_arguments(parser: Any) -> None:
    """Add this module's options to the harness's parser."""
    parser.add_argument(
        "--conc-turns", type=int, default=5, help="scenario 2: turns per conversation"
    )
    parser.add_argument(
        "--conc-delay",
        type=int,
        default=500,
        choices=CONV_DELAYS,
        help="scenario 2: mock delay, ms",
    )
    parser.add_argument("--conc-rounds", type=int, default=1, help="scenario 2: rounds")
    # A round of 200 streams holds one full collection or none, and the tail
    # is made of that (docs/benchmarks.md): one round is one draw.
    parser.add_argument("--stream-rounds", type=int, default=3, help="stream-N: rounds")
    parser.add_argument("--conc-stream-model", default=C.STREAM_MODEL, help=argparse.SUPPRESS)
    parser.add_argument(
        "--conc-warmup",
        type=int,
        default=10,
        help="warm-up conversations (streams: at most 3) per worker",
    )


def smoke(args: Any) -> None:
    """Shrink this module's load for ``--smoke``."""
    args.conc_turns, args.conc_delay, args.conc_rounds, args.conc_warmup = 3, 20, 1, 0
    args.stream_rounds = 1
    args.conc_stream_model = QUICK_STREAM


def _pin_threads(pid: int, core: int) -> None:
    """Pin every thread of process ``pid`` to ``core`` (threads it starts later inherit it)."""
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), {core})
        except (ProcessLookupError, FileNotFoundError):  # a thread that just ended
            pass


def _ask_all(workers: dict[str, Any], command: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Send ``command`` to every worker at once (un-timed work only), collect the answers."""
    for worker in workers.values():
        worker.process.stdin.write(json.dumps(command) + "\n")
        worker.process.stdin.flush()
    return {name: worker._read() for name, worker in workers.items()}


def _start(
    h: Any, name: str, python: str, options: dict[str, Any], args: Any, mock: Any, workdir: Path
) -> Any:
    if name.startswith("pilothouse"):
        own = workdir / name  # its own catalog file: preparations run in parallel
        own.mkdir(parents=True, exist_ok=True)
        options.update(h._prepare_pilothouse(args.python, name, mock, own, args.pg))
    return h.Worker(python, options)


def _submit_starts(
    pool: ThreadPoolExecutor,
    h: Any,
    scenario: str,
    names: list[str],
    args: Any,
    mock: Any,
    workdir: Path,
    skipped: dict[str, str],
) -> dict[str, Any]:
    """Submit to ``pool`` the start of each contender of ``scenario`` that can run here.

    Returns the pending start-ups (futures of workers) by contender name; a contender that
    cannot run (not a contender of the scenario's kind, no interpreter, no PostgreSQL) gets
    its reason in ``skipped`` instead.
    """
    kind, _ = _parse(scenario)
    pending: dict[str, Any] = {}
    for name in names:
        if name not in BUILDERS:
            skipped[name] = f"not a contender of {kind}-N scenarios"
            continue
        python = args.litellm_python if name in C.LITELLM else args.python
        if not Path(python).exists():
            skipped[name] = f"no interpreter at {python}"
            continue
        if name == "pilothouse-postgres" and not h._postgres_available(args.pg):
            skipped[name] = f"no PostgreSQL at {args.pg}"
            continue
        options: dict[str, Any] = {
            "contender": name,
            "scenario": scenario,
            "base_url": mock.base_url,
            "bench_dir": str(h.BENCH),
            "delay_ms": args.conc_delay,
            "turns": args.conc_turns,
            "stream_model": args.conc_stream_model,
        }
        if h._pin(h.SUT_CORE):
            # Start-up and warm-up may use both cores; pinned before the rounds.
            options["worker_core"] = f"{h.LOAD_CORE},{h.SUT_CORE}"
        pending[name] = pool.submit(_start, h, name, python, options, args, mock, workdir)
    return pending


def run_scenario(
    h: Any,
    scenario: str,
    names: list[str],
    args: Any,
    mock: Any,
    workdir: Path,
    raw: dict[str, Any],
) -> dict[str, Any]:
    """Run one ``conc-N`` or ``stream-N`` scenario over the contenders; return its results.

    ``h`` is the harness module (its Worker, Mock and pilothouse preparation).
    """
    kind, n = _parse(scenario)
    count = args.conc_rounds if kind == "conc" else args.stream_rounds
    result: dict[str, Any] = {
        "kind": kind,
        "concurrency": n,
        "settings": {
            "turns": args.conc_turns,
            "delay_ms": args.conc_delay,
            "rounds": count,
            "warmup": args.conc_warmup,
            "pool": POOL,
            "stream_model": args.conc_stream_model,
            "tool_turn": TOOL_TURN,
        },
        "contenders": {},
        "skipped": {},
    }
    workers: dict[str, Any] = {}
    # Workers start in parallel (threads wait on their processes): their
    # start-up, and the first conversation's mock delays, are not measured.
    with ThreadPoolExecutor(max_workers=max(1, len(names))) as pool:
        pending = _submit_starts(pool, h, scenario, names, args, mock, workdir, result["skipped"])
        for name, future in pending.items():
            try:
                worker = future.result()
            except (RuntimeError, subprocess.CalledProcessError) as exc:
                result["skipped"][name] = f"could not start: {exc}"
                continue
            if worker.ready.get("first_error"):
                result["skipped"][name] = (
                    "first conversation failed: " + worker.ready["first_error"][:1500]
                )
                worker.close()
                continue
            workers[name] = worker
            result["contenders"][name] = {"cold": worker.ready}
            print(f"  [{scenario}] {name}: ready in {worker.ready['cold_ms']:.0f} ms", flush=True)
    # Warm-up runs in every worker at once: it is not measured.
    if args.conc_warmup and kind == "conc":
        _ask_all(workers, {"op": "conc", "users": args.conc_warmup, "measure": False})
    elif args.conc_warmup:
        _ask_all(workers, {"op": "streams", "n": min(3, args.conc_warmup)})
    if h._pin(h.SUT_CORE):
        for worker in workers.values():
            _pin_threads(worker.process.pid, h.SUT_CORE)
    rounds: dict[str, list[dict[str, Any]]] = {name: [] for name in workers}
    mock_before = mock.stats()
    for index in range(count):
        for name, worker in workers.items():
            command = {"op": "conc", "users": n} if kind == "conc" else {"op": "streams", "n": n}
            answer = worker.ask(command)
            rounds[name].append(answer)
            print(
                f"  [{scenario}] round {index + 1}/{count} {name}:"
                f" {answer['wall_s']:.1f} s, {answer['errors']} errors",
                flush=True,
            )
    mock_after = mock.stats()
    for name, worker in workers.items():
        summary = summarize(kind, n, args, rounds[name])
        result["contenders"][name].update(summary)
        if kind == "conc":
            raw[f"{scenario}/{name}"] = [x for r in rounds[name] for x in r["lat"]]
        else:
            raw[f"{scenario}/{name}/ttft"] = [
                f["ttft_ms"]
                for r in rounds[name]
                for f in r["facts"]
                if f.get("ttft_ms") is not None
            ]
        worker.close()
    served = mock_after["requests"] - mock_before["requests"]
    result["mock"] = {
        "requests": served,
        "cpu_us_per_request": (mock_after["cpu_s"] - mock_before["cpu_s"]) / served * 1e6
        if served
        else None,
    }
    return result


def _merge(counts: list[dict[str, int]]) -> dict[str, int]:
    merged: dict[str, int] = {}
    for count in counts:
        for key, value in count.items():
            merged[key] = merged.get(key, 0) + value
    return merged


def summarize(kind: str, n: int, args: Any, rounds: list[dict[str, Any]]) -> dict[str, Any]:
    """Reduce a contender's rounds to the figures the report shows."""
    first = rounds[0]
    common = {
        "rounds": len(rounds),
        "errors": sum(r["errors"] for r in rounds),
        "error_samples": [e for r in rounds for e in r["error_samples"]][:3],
        "error_kinds": _merge([r["error_kinds"] for r in rounds]),
        "cpu_s": sum(r["cpu_s"] for r in rounds),
        "wall_s": sum(r["wall_s"] for r in rounds),
        "lag_p50_ms": statistics.median(
            [r["lag_p50_ms"] for r in rounds if r["lag_p50_ms"] is not None] or [0]
        ),
        "lag_p99_ms": max((r["lag_p99_ms"] or 0) for r in rounds),
        "lag_max_ms": max((r["lag_max_ms"] or 0) for r in rounds),
        # Memory from the first round: the process is fresh, nothing reused.
        "rss_before_mb": first["rss_before_mb"],
        "rss_peak_mb": first["rss_peak_mb"],
        "maxrss_mb": max(r["maxrss_mb"] for r in rounds),
        "cores": sorted({c for r in rounds for c in r["cores"]}),
    }
    if kind == "stream":
        facts = [f for r in rounds for f in r["facts"]]
        ttft = [f["ttft_ms"] for f in facts if f.get("ttft_ms") is not None]
        launch = [f["ttft_launch_ms"] for f in facts if f.get("ttft_launch_ms") is not None]
        gaps = [g for f in facts for g in f.get("gaps_ms", [])]
        return {
            **common,
            "streams": len(facts),
            "ttft_p50_ms": statistics.median(ttft) if ttft else None,
            "ttft_p99_ms": _percentile(ttft, 99),
            "ttft_launch_p50_ms": statistics.median(launch) if launch else None,
            "ttft_launch_p99_ms": _percentile(launch, 99),
            "gap_p50_ms": statistics.median(gaps) if gaps else None,
            "gap_p99_ms": _percentile(gaps, 99),
            "gap_max_ms": max(gaps) if gaps else None,
            "chunks_expected": stream_chunks(args.conc_stream_model) * n * len(rounds),
            "chunks_received": sum(f.get("chunks", 0) for f in facts),
            "cpu_ms_per_stream": common["cpu_s"] / len(facts) * 1000 if facts else None,
            "kb_per_stream": (first["rss_peak_mb"] - first["rss_before_mb"]) * 1024 / n,
            # Full collections inside the rounds: per round, and each one's CPU ms.
            "gc_full_per_round": [r.get("gc_full", 0) for r in rounds],
            "gc_full_ms": [ms for r in rounds for ms in r.get("gc_full_ms", [])],
            "gc_tracked": statistics.median(r.get("gc_tracked", 0) for r in rounds),
        }
    turns = args.conc_turns
    delay = args.conc_delay
    lat = [x for r in rounds for x in r["lat"]]
    excess = [ms - delay * (2 if t == TOOL_TURN else 1) for t, ms in lat]
    mean_turn_s = statistics.fmean(ms for _, ms in lat) / 1000 if lat else None
    requests_per_conv = turns + (1 if turns >= TOOL_TURN else 0)
    ideal_turn_s = delay * requests_per_conv / turns / 1000
    throughput = [r["turns_done"] / r["wall_s"] for r in rounds if r["wall_s"]]
    stores = [r["store"] for r in rounds if "store" in r]
    store: dict[str, Any] | None = None
    if stores:
        store = {}
        for key in stores[0]:
            if key == "statuses":
                store[key] = _merge([s["statuses"] for s in stores])
            else:
                store[key] = sum(s[key] for s in stores)
    return {
        **common,
        "users": n,
        "turns_expected": n * turns * len(rounds),
        "turns_done": len(lat),
        "history_mismatches": sum(r["history_mismatches"] for r in rounds),
        "throughput_turns_s": statistics.median(throughput) if throughput else 0.0,
        "round_throughput_turns_s": throughput,
        "requests_per_s": statistics.median(throughput) * requests_per_conv / turns
        if throughput
        else 0.0,
        "ideal_turns_s": n / ideal_turn_s if ideal_turn_s else None,
        "littles_law_in_flight": (
            statistics.median(throughput) * mean_turn_s if throughput and mean_turn_s else None
        ),
        "p50_ms": statistics.median(ms for _, ms in lat) if lat else None,
        "p99_ms": _percentile([ms for _, ms in lat], 99),
        "excess_p50_ms": statistics.median(excess) if excess else None,
        "excess_p99_ms": _percentile(excess, 99),
        "cpu_ms_per_turn": common["cpu_s"] / len(lat) * 1000 if lat else None,
        "cpu_ceiling_turns_s": len(lat) / common["cpu_s"] if common["cpu_s"] else None,
        "kb_per_conversation": (first["rss_peak_mb"] - first["rss_before_mb"]) * 1024 / n,
        "store": store,
    }


# --- mock capacity at this load ---------------------------------------------------


LOADGEN = r"""
import asyncio, json, resource, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
port, mode = sys.argv[1], sys.argv[2]
conns, seconds, delay = int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
stream_model = sys.argv[6]
lat, ttft, gaps, chunks, count = [], [], [], [0], [0]
def request(body):
    body = json.dumps(body).encode()
    return (b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
plain = request({"model": f"conv-d{delay}", "messages": [{"role": "user", "content": "hi"}]})
stream = request({"model": stream_model, "stream": True,
                  "messages": [{"role": "user", "content": "hi"}]})
async def one_plain(deadline):
    r, w = await asyncio.open_connection("127.0.0.1", int(port))
    first = True
    while time.perf_counter() < deadline:
        t = time.perf_counter()
        w.write(plain)
        head = await r.readuntil(b"\r\n\r\n")
        length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
        await r.readexactly(length)
        if not first:  # the first request of a connection waits for the connect burst
            lat.append((time.perf_counter() - t) * 1000)
        first = False
        count[0] += 1
    w.close()
async def one_stream():
    r, w = await asyncio.open_connection("127.0.0.1", int(port))
    t = time.perf_counter()
    w.write(stream)
    await r.readuntil(b"\r\n\r\n")
    last = None
    while True:
        size = int((await r.readuntil(b"\r\n"))[:-2], 16)
        data = await r.readexactly(size + 2)
        if size == 0:
            break
        if b'"content"' in data:
            now = time.perf_counter()
            if last is None:
                ttft.append((now - t) * 1000)
            else:
                gaps.append((now - last) * 1000)
            last = now
            chunks[0] += 1
    w.close()
async def main():
    start = time.perf_counter()
    if mode == "plain":
        await asyncio.gather(*(one_plain(start + seconds) for _ in range(conns)))
    else:
        await asyncio.gather(*(one_stream() for _ in range(conns)))
    print(json.dumps({"seconds": time.perf_counter() - start, "requests": count[0],
                      "lat": lat, "ttft": ttft, "gaps": gaps, "chunks": chunks[0]}))
asyncio.run(main())
"""


def capacity(h: Any, mock: Any, python: str, scenarios: list[str], args: Any) -> dict[str, Any]:
    """Load the mock as the largest conc-N / stream-N scenario does, from a raw client on the
    other core.

    Returns achieved vs ideal throughput and the added latency at that load
    (plain), and time to first chunk, gaps and chunks (stream), with the mock's
    CPU per request: the mock is valid at a load if it keeps its timing there
    and its core has headroom.
    """
    out: dict[str, Any] = {}
    for kind in ("conc", "stream"):
        levels = [n for k, n in map(_parse, scenarios) if k == kind]
        if not levels:
            continue
        conns = max(levels)
        seconds = max(args.capacity_seconds, 10 * args.conc_delay / 1000) if kind == "conc" else 0
        before = mock.stats()
        done = subprocess.run(
            [
                *h._pin(h.SUT_CORE),
                python,
                "-c",
                LOADGEN,
                str(mock.port),
                "plain" if kind == "conc" else "stream",
                str(conns),
                str(seconds),
                str(args.conc_delay),
                args.conc_stream_model,
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        after = mock.stats()
        load = json.loads(done.stdout)
        served = after["requests"] - before["requests"]
        cpu_us = (after["cpu_s"] - before["cpu_s"]) / served * 1e6 if served else None
        if kind == "conc":
            lat = load["lat"]
            out["conc"] = {
                "connections": conns,
                "delay_ms": args.conc_delay,
                "requests_per_s": load["requests"] / load["seconds"],
                "ideal_requests_per_s": conns / (args.conc_delay / 1000),
                "excess_p50_ms": statistics.median(lat) - args.conc_delay if lat else None,
                "excess_p99_ms": (_percentile(lat, 99) or 0) - args.conc_delay if lat else None,
                "cpu_us_per_request": cpu_us,
                "cpu_bound_capacity_per_s": 1e6 / cpu_us if cpu_us else None,
            }
        else:
            out["stream"] = {
                "streams": conns,
                "ttft_p50_ms": statistics.median(load["ttft"]) if load["ttft"] else None,
                "ttft_p99_ms": _percentile(load["ttft"], 99),
                "gap_p99_ms": _percentile(load["gaps"], 99),
                "gap_max_ms": max(load["gaps"]) if load["gaps"] else None,
                "chunks_received": load["chunks"],
                "chunks_expected": conns * stream_chunks(args.conc_stream_model),
                "cpu_us_per_stream": cpu_us,
            }
    out["note"] = (
        "a raw asyncio client on the other core (no HTTP library), at the largest concurrency of"
        " the run; the mock is single-threaded on one core"
    )
    return out
