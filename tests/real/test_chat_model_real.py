"""pilothouse's Chat Completions client against a real llama.cpp server, beside pydantic-ai's.

The factory builds ``ChatCompletionsModel`` (``providers/_chat.py``) for an
``openai-compatible`` provider; its ``fallback()`` is pydantic-ai's
``OpenAIChatModel`` through the OpenAI SDK on the same HTTP client. Both ask
the real server the same thing at temperature 0 (greedy decoding, so the
server answers both alike), whole and streamed, with and without tools,
and must build the same ``ModelResponse``: the same parts, usage, finish
reason and model name (ids and times differ per request and are set
aside). The tool round uses the packaged default model (Qwen2.5-Coder),
which calls tools; the rest the small SmolLM2.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from fault_upstream import Reply, completion, running_upstream, text_stream
from local_fixtures import PARIS, WEATHER_PARAMETERS
from pydantic_ai.direct import model_request, model_request_stream
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
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import ToolDefinition

from pilothouse.api import Pilothouse
from pilothouse.catalog._enums import ModelCapability, ProviderKind
from pilothouse.providers import ModelFactory, ModelSpec, ProviderSpec
from pilothouse.providers._chat import ChatCompletionsModel
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder

pytestmark = pytest.mark.anyio

# Greedy and seeded, and room for a whole tool call: at 24 tokens the call
# sometimes ended one token short ("length") on one client and not the other.
_SETTINGS: ModelSettings = {"temperature": 0.0, "max_tokens": 64, "seed": 7}
_PRIMER = {
    "model": "local-model",
    "messages": [{"role": "user", "content": "Count to three."}],
    "max_tokens": 1,
    "temperature": 0.0,
}
"""A request each client's request follows, so both meet the same cache.

llama-cpp-python reuses the longest prefix its previous prompt shares with the
next one and evaluates only the rest: a prompt evaluated in other batches takes
another arithmetic path, and a near tie between two tokens can then go the
other way. Without the primer, the first client followed whatever request the
server answered last (another test's, in the suite) and the second followed
the first's identical prompt, and their answers differed."""
_WEATHER = ToolDefinition(
    name="get_weather",
    description="Get the current weather for a city",
    parameters_json_schema=WEATHER_PARAMETERS,
)
_NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _spec(base_url: str) -> ModelSpec:
    provider = ProviderSpec(
        code="LLAMA", kind=ProviderKind.OPENAI_COMPATIBLE, base_url=base_url, api_key=None
    )
    return ModelSpec(
        code="LOCAL",
        provider=provider,
        model_name="local-model",
        capabilities=frozenset({ModelCapability.FUNCTION_CALLING}),
    )


async def _models(factory: ModelFactory, base_url: str) -> tuple[Model, Model]:
    model = await factory.model(_spec(base_url))
    assert isinstance(model, ChatCompletionsModel)
    return model, model.fallback()


def _comparable(response: ModelResponse) -> ModelResponse:
    # What differs between two requests: the response and tool-call ids, the times.
    details = {k: v for k, v in (response.provider_details or {}).items() if k != "timestamp"}
    parts = [
        replace(part, tool_call_id="call") if isinstance(part, ToolCallPart) else part
        for part in response.parts
    ]
    return replace(
        response,
        parts=parts,
        timestamp=_NOW,
        provider_response_id=None,
        provider_details=details or None,
        run_id=None,
    )


async def _both(
    models: tuple[Model, Model],
    messages: list[ModelMessage],
    parameters: ModelRequestParameters,
    *,
    stream: bool,
    base_url: str,
) -> list[ModelResponse]:
    answers: list[ModelResponse] = []
    for model in models:
        async with httpx.AsyncClient(base_url=base_url, timeout=120) as http:
            primed = await http.post("/chat/completions", json=_PRIMER)
            assert primed.status_code == 200, primed.text
        if stream:
            async with model_request_stream(
                model, messages, model_settings=_SETTINGS, model_request_parameters=parameters
            ) as streamed:
                async for _ in streamed:
                    pass
                answers.append(_comparable(streamed.get()))
        else:
            answer = await model_request(
                model, messages, model_settings=_SETTINGS, model_request_parameters=parameters
            )
            answers.append(_comparable(answer))
    return answers


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_text_answer_is_the_same_from_both_clients(
    local_llm_base_url: str, stream: bool
) -> None:
    factory = ModelFactory()
    try:
        models = await _models(factory, local_llm_base_url)
        messages: list[ModelMessage] = [
            ModelRequest(
                parts=[
                    SystemPromptPart("Answer in one sentence."),
                    UserPromptPart("Name a colour."),
                ]
            )
        ]
        lean, sdk = await _both(
            models, messages, ModelRequestParameters(), stream=stream, base_url=local_llm_base_url
        )
        assert lean == sdk
        assert isinstance(lean.parts[0], TextPart) and lean.parts[0].content.strip()
        assert lean.usage.input_tokens > 0 and lean.usage.output_tokens > 0
        assert lean.finish_reason in ("stop", "length")
    finally:
        await factory.aclose()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
async def test_a_tool_round_is_the_same_from_both_clients(qwen_base_url: str, stream: bool) -> None:
    factory = ModelFactory()
    try:
        models = await _models(factory, qwen_base_url)
        parameters = ModelRequestParameters(function_tools=[_WEATHER], allow_text_output=True)
        first: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart(PARIS)])]
        lean, sdk = await _both(models, first, parameters, stream=stream, base_url=qwen_base_url)
        calls = [part for part in lean.parts if isinstance(part, ToolCallPart)]
        assert calls and calls[0].tool_name == "get_weather"
        assert "paris" in calls[0].args_as_json_str().lower()
        assert lean == sdk
        assert lean.finish_reason == "tool_call"
        # The second round sends the call and its result back: the same
        # request from both, so the same answer.
        second: list[ModelMessage] = [
            *first,
            lean,
            ModelRequest(
                parts=[
                    ToolReturnPart(
                        "get_weather", "Sunny, 21 °C", tool_call_id=calls[0].tool_call_id
                    )
                ]
            ),
        ]
        final_lean, final_sdk = await _both(
            models, second, parameters, stream=stream, base_url=qwen_base_url
        )
        assert final_lean == final_sdk
        assert final_lean.parts and final_lean.usage.input_tokens > lean.usage.input_tokens
    finally:
        await factory.aclose()


_CHILD = textwrap.dedent(
    """
    import asyncio, json, sys
    from pilothouse.api import Pilothouse
    from pilothouse.settings import Settings

    async def main() -> dict:
        async with Pilothouse(Settings(database_url=sys.argv[1])) as ph:
            whole = await ph.command.start_and_send("hi", action="CHAT")
            events = [
                type(event).__name__
                async for event in ph.command.start_and_stream("again", action="CHAT")
            ]
        return {
            "output": whole.output,
            "streamed": "TurnFinished" in events,
            "openai_loaded": sorted(n for n in sys.modules if n.split(".")[0] == "openai"),
        }

    print(json.dumps(asyncio.run(main())))
    """
)


async def test_turns_on_a_compatible_server_do_not_import_the_openai_sdk(tmp_path: Path) -> None:
    # The OpenAI SDK and pydantic-ai's model over it cost ~330 ms of a cold
    # start: a fresh process's turns, whole and
    # streamed, against a real HTTP server on loopback, must not load them.
    url = f"sqlite+aiosqlite:///{tmp_path / 'app.db'}"
    with running_upstream() as upstream:
        upstream.script(
            Reply(body=completion("Hello from the server.")),
            Reply(events=text_stream("Streamed ", "hello."), content_type="text/event-stream"),
        )
        catalog = (
            CatalogBuilder()
            .provider("UP", kind="openai-compatible", base_url=upstream.base_url)
            .model("M", provider="UP", model_name="served-model")
            .action("CHAT", prompt="Chat.", model="M")
        )
        async with Pilothouse(Settings(database_url=url)) as ph:
            await catalog.import_into(ph)
        env = {k: v for k, v in os.environ.items() if not k.startswith("PILOTHOUSE_")}
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, url],
            cwd=tmp_path,
            env={**env, "PYTHONPATH": os.pathsep.join(sys.path)},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        facts = json.loads(done.stdout.strip().splitlines()[-1])
        assert facts["output"] == "Hello from the server."
        assert facts["streamed"] is True
        assert len(upstream.requests) == 2
        assert upstream.requests[1]["stream"] is True
        assert facts["openai_loaded"] == []
