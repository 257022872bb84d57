"""Scenario 2's contenders: each one's client, built for a conversation of tool turns and a stream.

``bench/concurrency.py`` runs the scenarios; this module builds what each
contender sends and checks what comes back (:data:`BUILDERS`). Every
contender gets an HTTP connection pool of :data:`POOL` connections (keep-alive
too) and a 600 s timeout with a 10 s connect timeout (pilothouse's, which it
has no setting for). The floor (contender ``httpx``) is raw httpx2, not httpx
0.28 (see :func:`_chat_httpx`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
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
STREAM_ACTION = "STREAM"


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
        body = {
            "model": _stream_model(options),
            "messages": C._messages(),
            "max_tokens": 256,
            "stream": True,
        }
        return await C.raw_stream(client, body)

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
        return await C.sdk_stream(
            client.chat.completions.create(
                model=_stream_model(options),
                messages=C._messages(),
                max_tokens=256,
                stream=True,  # type: ignore[arg-type]
            )
        )

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
        return await C.sdk_stream(
            create(_stream_model(options), messages=C._messages(), max_tokens=256, stream=True)
        )

    return Chat(_start_dicts, _sdk_turn(create, model), stream, _noop)


def _pai_model(base_url: str, model: str) -> Any:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    provider = OpenAIProvider(base_url=base_url, api_key="x", http_client=_openai_http_client())
    return OpenAIChatModel(model, provider=provider)


async def _chat_pai_request(base_url: str, model_name: str, options: dict[str, Any]) -> Chat:
    from pydantic_ai import messages as m
    from pydantic_ai.direct import model_request

    model = _pai_model(base_url, model_name)
    stream_model = _pai_model(base_url, _stream_model(options))
    settings: Any = {"max_tokens": 256}
    params = C.pai_tools(_tool_schema())

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
        first = [m.ModelRequest(parts=[m.SystemPromptPart(C.SYSTEM), m.UserPromptPart(C.USER)])]
        return await C.pai_stream(stream_model, first, settings)

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
