"""The contenders: one way each library makes the same call against the mock.

Every contender is built by :func:`make` inside its own worker process (see
``bench/worker.py``), so its imports, its CPU and its memory are its own.
A contender's ``call()`` makes one turn and returns a dict of facts about it
(for streaming: the time to the first content chunk, the gaps, the chunk
count); the worker times it.

Scenarios (the mock's behaviour is chosen by the model name, see
``bench/mock_upstream.py``):

- ``plain-d0`` / ``plain-d50``: one plain answer, mock delay 0 / 50 ms;
- ``tool-d0``: 20 tool schemas sent; the mock calls ``tool_00``; the
  contender runs it and sends the result back; the mock then answers;
- ``stream``: streamed answer, first chunk at 200 ms, 64 chunks 20 ms apart.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

SYSTEM = "You are a concise assistant."
USER = "Say hello."
STREAM_MODEL = "stream-f200-k64-g20"
STREAM_CHUNKS = 64
N_TOOLS = 20

CONTENDERS = [
    "httpx",
    "openai",
    "litellm",
    "pydantic-ai-model_request",
    "pydantic-ai-Agent.run",
    "langchain",
    "pilothouse-sqlite",
    "pilothouse-noaudit",
    "pilothouse-postgres",
    "pilothouse-serve",
    "litellm-proxy",
]
"""Every contender, in the order of the tables. The floor comes first."""

SERVED = {"pilothouse-serve", "litellm-proxy"}
"""Servers called over HTTP (``bench/served.py``): reported in their own "served" table."""

LITELLM = {"litellm"}
"""Contenders that run in bench/.venv-litellm (LiteLLM needs openai<3)."""


def model_for(scenario: str) -> str:
    """Return the mock model name that makes the mock behave as ``scenario``."""
    return STREAM_MODEL if scenario == "stream" else scenario


def tool_schemas() -> list[dict[str, Any]]:
    """Return the 20 OpenAI tool schemas of the tool scenario."""
    return [
        {
            "type": "function",
            "function": {
                "name": f"tool_{i:02d}",
                "description": f"Look up fact number {i} about a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "description": "The city."}},
                    "required": ["city"],
                },
            },
        }
        for i in range(N_TOOLS)
    ]


def run_tool(name: str, arguments: str | dict[str, Any]) -> str:
    """Carry out a tool call of the tool scenario (the same for everyone)."""
    args = json.loads(arguments) if isinstance(arguments, str) else arguments
    return f"{name}: {args.get('city', '?')} is sunny"


class StreamClock:
    """Collects the arrival times of content chunks of one streamed answer."""

    def __init__(self) -> None:
        self.start = time.perf_counter()
        self.times: list[float] = []

    def chunk(self, text: str | None) -> None:
        """Note the arrival of one content chunk (empty ones are not content)."""
        if text:
            self.times.append(time.perf_counter())

    def facts(self) -> dict[str, Any]:
        """Return time to first chunk, the largest gap and the chunk count.

        ``first_at`` is the first chunk's ``time.perf_counter()``, so that a
        caller which launched many streams at once can measure every first
        chunk from the launch (``concurrency._streams``): this clock starts
        when the call's own code first runs, which under load is later for a
        client that does all its start-up work before it first yields.
        """
        gaps = [(b - a) * 1000 for a, b in zip(self.times, self.times[1:], strict=False)]
        return {
            "first_at": self.times[0] if self.times else None,
            "ttft_ms": (self.times[0] - self.start) * 1000 if self.times else None,
            "gaps_ms": gaps,
            "chunks": len(self.times),
        }


@dataclass
class Contender:
    """A built contender: one turn per ``call()``; ``aclose()`` at the end."""

    call: Callable[[], Awaitable[dict[str, Any]]]
    aclose: Callable[[], Awaitable[None]]
    cpu: Callable[[], float] | None = None
    """CPU seconds so far of what is measured, when not this process (a server's)."""


async def _noop() -> None:
    return None


def _messages() -> list[dict[str, Any]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": USER}]


# --- raw httpx: the floor ----------------------------------------------------------


async def _httpx(base_url: str, scenario: str, options: dict[str, Any]) -> Contender:
    import httpx

    client = httpx.AsyncClient(base_url=base_url, headers={"authorization": "Bearer x"})
    model = model_for(scenario)

    async def complete(messages: list[dict[str, Any]], tools: Any = None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": 256}
        if tools:
            body["tools"] = tools
        response = await client.post("/chat/completions", json=body)
        response.raise_for_status()
        return response.json()

    async def plain() -> dict[str, Any]:
        data = await complete(_messages())
        return {"text": data["choices"][0]["message"]["content"]}

    async def tool() -> dict[str, Any]:
        messages = _messages()
        tools = tool_schemas()
        data = await complete(messages, tools)
        message = data["choices"][0]["message"]
        messages.append(message)
        for call in message.get("tool_calls") or []:
            result = run_tool(call["function"]["name"], call["function"]["arguments"])
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        data = await complete(messages, tools)
        return {"text": data["choices"][0]["message"]["content"], "requests": 2}

    async def stream() -> dict[str, Any]:
        body = {"model": model, "messages": _messages(), "max_tokens": 256, "stream": True}
        return await raw_stream(client, body)

    fn = {"stream": stream, "tool-d0": tool}.get(scenario, plain)
    return Contender(fn, client.aclose)


async def raw_stream(client: Any, body: dict[str, Any]) -> dict[str, Any]:
    """One streamed Chat Completions call over a raw httpx2 client: its :class:`StreamClock` facts.

    The Server-Sent Events are read line by line, as the floor contender
    reads them: no SDK between the bytes and the clock.
    """
    clock = StreamClock()
    async with client.stream("POST", "/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            choices = json.loads(line[6:]).get("choices") or []
            if choices:
                clock.chunk(choices[0]["delta"].get("content"))
    return clock.facts()


async def sdk_stream(opened: Awaitable[Any]) -> dict[str, Any]:
    """A stream of OpenAI-shaped chunks (openai SDK, LiteLLM): its :class:`StreamClock` facts.

    ``opened`` is the call not yet awaited, so the clock starts before it.
    """
    clock = StreamClock()
    chunks: Any = await opened
    async for chunk in chunks:
        if chunk.choices:
            clock.chunk(chunk.choices[0].delta.content)
    return clock.facts()


# --- openai SDK --------------------------------------------------------------------


async def _openai(base_url: str, scenario: str, options: dict[str, Any]) -> Contender:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(base_url=base_url, api_key="x", max_retries=0)
    model = model_for(scenario)

    async def plain() -> dict[str, Any]:
        r = await client.chat.completions.create(
            model=model,
            messages=_messages(),
            max_tokens=256,  # type: ignore[arg-type]
        )
        return {"text": r.choices[0].message.content}

    async def tool() -> dict[str, Any]:
        messages: list[Any] = _messages()
        tools: Any = tool_schemas()
        r = await client.chat.completions.create(model=model, messages=messages, tools=tools)
        message = r.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            result = run_tool(call.function.name, call.function.arguments)  # type: ignore[union-attr]
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        r = await client.chat.completions.create(model=model, messages=messages, tools=tools)
        return {"text": r.choices[0].message.content, "requests": 2}

    async def stream() -> dict[str, Any]:
        return await sdk_stream(
            client.chat.completions.create(
                model=model,
                messages=_messages(),
                max_tokens=256,
                stream=True,  # type: ignore[arg-type]
            )
        )

    fn = {"stream": stream, "tool-d0": tool}.get(scenario, plain)
    return Contender(fn, client.close)


# --- LiteLLM -----------------------------------------------------------------------


async def _litellm(base_url: str, scenario: str, options: dict[str, Any]) -> Contender:
    import litellm

    litellm.telemetry = False
    litellm.suppress_debug_info = True
    model = "openai/" + model_for(scenario)
    common = {"model": model, "api_base": base_url, "api_key": "x", "num_retries": 0}

    async def plain() -> dict[str, Any]:
        r = await litellm.acompletion(messages=_messages(), max_tokens=256, **common)
        return {"text": r.choices[0].message.content}  # type: ignore[union-attr]

    async def tool() -> dict[str, Any]:
        messages: list[Any] = _messages()
        tools = tool_schemas()
        r: Any = await litellm.acompletion(messages=messages, tools=tools, **common)
        message = r.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls or []:
            result = run_tool(call.function.name, call.function.arguments)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
        r = await litellm.acompletion(messages=messages, tools=tools, **common)
        return {"text": r.choices[0].message.content, "requests": 2}

    async def stream() -> dict[str, Any]:
        return await sdk_stream(
            litellm.acompletion(messages=_messages(), max_tokens=256, stream=True, **common)
        )

    fn = {"stream": stream, "tool-d0": tool}.get(scenario, plain)
    return Contender(fn, _noop)


# --- pydantic-ai -------------------------------------------------------------------


def _pai_model(base_url: str, scenario: str) -> Any:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base_url, api_key="x")
    return OpenAIChatModel(model_for(scenario), provider=provider)


def pai_tools(schemas: list[dict[str, Any]]) -> Any:
    """pydantic-ai's request parameters offering the Chat Completions tool ``schemas``."""
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.tools import ToolDefinition

    return ModelRequestParameters(
        function_tools=[
            ToolDefinition(
                name=t["function"]["name"],
                description=t["function"]["description"],
                parameters_json_schema=t["function"]["parameters"],
            )
            for t in schemas
        ]
    )


async def pai_stream(model: Any, messages: list[Any], settings: Any) -> dict[str, Any]:
    """One streamed ``model_request_stream`` of pydantic-ai: its :class:`StreamClock` facts."""
    from pydantic_ai import messages as m
    from pydantic_ai.direct import model_request_stream

    clock = StreamClock()
    async with model_request_stream(model, messages, model_settings=settings) as s:
        async for event in s:
            if isinstance(event, m.PartStartEvent) and isinstance(event.part, m.TextPart):
                clock.chunk(event.part.content)
            elif isinstance(event, m.PartDeltaEvent) and isinstance(event.delta, m.TextPartDelta):
                clock.chunk(event.delta.content_delta)
    return clock.facts()


async def _pai_request(base_url: str, scenario: str, options: dict[str, Any]) -> Contender:
    from pydantic_ai import messages as m
    from pydantic_ai.direct import model_request

    model = _pai_model(base_url, scenario)
    settings: Any = {"max_tokens": 256}

    def first() -> list[m.ModelMessage]:
        return [m.ModelRequest(parts=[m.SystemPromptPart(SYSTEM), m.UserPromptPart(USER)])]

    async def plain() -> dict[str, Any]:
        r = await model_request(model, first(), model_settings=settings)
        return {"text": r.text}

    params = pai_tools(tool_schemas())

    async def tool() -> dict[str, Any]:
        messages = first()
        r = await model_request(model, messages, model_request_parameters=params)
        messages.append(r)
        returns = [
            m.ToolReturnPart(p.tool_name, run_tool(p.tool_name, p.args or {}), p.tool_call_id)  # type: ignore[arg-type]
            for p in r.parts
            if isinstance(p, m.ToolCallPart)
        ]
        messages.append(m.ModelRequest(parts=returns))
        r = await model_request(model, messages, model_request_parameters=params)
        return {"text": r.text, "requests": 2}

    async def stream() -> dict[str, Any]:
        return await pai_stream(model, first(), settings)

    fn = {"stream": stream, "tool-d0": tool}.get(scenario, plain)
    return Contender(fn, _noop)


async def _pai_agent(base_url: str, scenario: str, options: dict[str, Any]) -> Contender:
    from pydantic_ai import Agent, Tool

    model = _pai_model(base_url, scenario)
    tools: list[Any] = []
    if scenario == "tool-d0":
        for schema in tool_schemas():
            name = schema["function"]["name"]

            tools.append(
                Tool.from_schema(
                    lambda city, _n=name: run_tool(_n, {"city": city}),
                    name=name,
                    description=schema["function"]["description"],
                    json_schema=schema["function"]["parameters"],
                )
            )
    agent: Any = Agent(model, instructions=SYSTEM, tools=tools, model_settings={"max_tokens": 256})

    async def plain() -> dict[str, Any]:
        r = await agent.run(USER)
        return {"text": r.output}

    async def stream() -> dict[str, Any]:
        clock = StreamClock()
        async with agent.run_stream(USER) as r:
            async for text in r.stream_text(delta=True, debounce_by=None):
                clock.chunk(text)
        return clock.facts()

    fn = {"stream": stream}.get(scenario, plain)
    return Contender(fn, _noop)


# --- LangChain ---------------------------------------------------------------------


async def _langchain(base_url: str, scenario: str, options: dict[str, Any]) -> Contender:
    from langchain_core.messages import HumanMessage, SystemMessage, ToolMessage
    from langchain_openai import ChatOpenAI

    chat: Any = ChatOpenAI(
        model=model_for(scenario), base_url=base_url, api_key="x", max_retries=0, max_tokens=256
    )  # type: ignore[call-arg]

    def first() -> list[Any]:
        return [SystemMessage(SYSTEM), HumanMessage(USER)]

    async def plain() -> dict[str, Any]:
        r = await chat.ainvoke(first())
        return {"text": r.content}

    bound = chat.bind_tools(tool_schemas())

    async def tool() -> dict[str, Any]:
        messages = first()
        r = await bound.ainvoke(messages)
        messages.append(r)
        for call in r.tool_calls:
            messages.append(
                ToolMessage(run_tool(call["name"], call["args"]), tool_call_id=call["id"])
            )
        r = await bound.ainvoke(messages)
        return {"text": r.content, "requests": 2}

    async def stream() -> dict[str, Any]:
        clock = StreamClock()
        async for chunk in chat.astream(first()):
            clock.chunk(chunk.content)
        return clock.facts()

    fn = {"stream": stream, "tool-d0": tool}.get(scenario, plain)
    return Contender(fn, _noop)


# --- pilothouse --------------------------------------------------------------------


ACTIONS = {"plain-d0": "PLAIN0", "plain-d50": "PLAIN50", "tool-d0": "TOOL0", "stream": "STREAM"}


def catalog_yaml(base_url: str) -> str:
    """Return the benchmark catalog: the mock as provider, one action per scenario."""
    models = "".join(
        f"""  - code: M{code}
    provider: MOCK
    model_name: {model_for(scenario)}
    capabilities: [FC, SR]
    input_price: 0
    output_price: 0
    context_window: 128000
"""
        for scenario, code in ACTIONS.items()
    )
    tools = "".join(
        f"""  - code: T{i:02d}
    name: tool_{i:02d}
    kind: python
    implementation: "bench_tools:tool_{i:02d}"
    policy: allow
"""
        for i in range(N_TOOLS)
    )
    actions = "".join(
        f"""  - code: {code}
    name: Benchmark {scenario}
    model: M{code}
    configuration: BNCH
    prompt: {SYSTEM}
    ask_user: false
"""
        + (
            "    tools: [" + ", ".join(f"T{i:02d}" for i in range(N_TOOLS)) + "]\n"
            if scenario == "tool-d0"
            else ""
        )
        for scenario, code in ACTIONS.items()
    )
    import concurrency  # scenario 2's actions (bench/concurrency.py)

    extra_models, extra_actions = concurrency.catalog_parts()
    models += extra_models
    actions += extra_actions
    return f"""providers:
  - code: MOCK
    name: Mock upstream
    kind: openai-compatible
    base_url: {base_url}
    api_key: "@secrets(BENCH_MOCK_API_KEY)"
models:
{models}configurations:
  - code: BNCH
    name: Benchmark
    max_tokens: 256
    retry_count: 0
    retry_delay: 0
memory_strategies:
  - code: FULL
    name: Whole history (scenario 2 sends every earlier turn)
    kind: FULL
tools:
{tools}actions:
{actions}"""


async def prepare_pilothouse(database_url: str, base_url: str, workdir: str) -> None:
    """Create the database and import the benchmark catalog (not timed)."""
    from pathlib import Path

    from pilothouse.catalog import import_catalog
    from pilothouse.store import Database

    path = Path(workdir) / "catalog.yaml"
    path.write_text(catalog_yaml(base_url))
    database = Database(database_url)
    try:
        await import_catalog(database, "bench", [path], user="bench")
    finally:
        await database.dispose()


async def _pilothouse(base_url: str, scenario: str, options: dict[str, Any]) -> Contender:
    from pilothouse.api import Pilothouse
    from pilothouse.settings import Settings

    # Named only when asked for: an older tree (pgturn's --before) lacks it.
    lazy: dict[str, Any] = {"database_lazy_start": True} if options.get("lazy_start") else {}
    settings = Settings(
        database_url=options["database_url"],
        freeze_heap=bool(options.get("freeze_heap", False)),
        **lazy,
    )
    ph = Pilothouse(settings, tenant="bench")
    await ph.__aenter__()
    action = ACTIONS[scenario]
    config = {"audit": False} if options.get("audit") is False else None

    async def plain() -> dict[str, Any]:
        # One governed turn of a new conversation: start_and_send writes the
        # conversation with the first turn (what start_conversation then
        # send_message write, one transaction fewer).
        r = await ph.command.start_and_send(USER, action=action, runtime_config=config)
        if r.error:
            raise RuntimeError(r.error)
        return {"text": r.text, "status": str(r.status)}

    async def stream() -> dict[str, Any]:
        from pilothouse.runtime import TextDelta

        clock = StreamClock()
        async for event in ph.command.start_and_stream(USER, action=action, runtime_config=config):
            if isinstance(event, TextDelta):
                clock.chunk(event.text)
        return clock.facts()

    async def close() -> None:
        await ph.aclose()

    fn = {"stream": stream}.get(scenario, plain)
    return Contender(fn, close)


BUILDERS: dict[str, Callable[[str, str, dict[str, Any]], Awaitable[Contender]]] = {
    "httpx": _httpx,
    "openai": _openai,
    "litellm": _litellm,
    "pydantic-ai-model_request": _pai_request,
    "pydantic-ai-Agent.run": _pai_agent,
    "langchain": _langchain,
    "pilothouse-sqlite": _pilothouse,
    "pilothouse-noaudit": _pilothouse,
    "pilothouse-postgres": _pilothouse,
}


async def make(name: str, base_url: str, scenario: str, options: dict[str, Any]) -> Contender:
    """Build contender ``name`` for ``scenario`` against the mock at ``base_url``."""
    if name in SERVED:
        import served

        return await served.BUILDERS[name](base_url, scenario, options)
    return await BUILDERS[name](base_url, scenario, options)
