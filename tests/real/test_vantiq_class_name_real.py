"""The guide's ``vantiq.llms.ChatOpenAI`` custom configuration (seed 004) against a real server.

The configuration goes, as the guide writes it (its key a ``@secrets``
reference), into a provider's settings; the catalog model has a descriptive
name (the guide's ``llama3-model``). The OpenAI-compatible server is a real
HTTP server on loopback that keeps every body it received.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_upstream import Reply, Upstream, completion, running_upstream

from pilothouse.api import Pilothouse
from pilothouse.catalog import ProcessStatus
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        yield up


async def test_the_server_gets_the_configurations_model_and_parameters(
    tmp_path: Path, upstream: Upstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    upstream.script(Reply(completion("Hi from llama.")))
    monkeypatch.setenv("OllamaKey", "unused-by-ollama")
    config = {
        "class_name": "vantiq.llms.ChatOpenAI",
        "model_name": "llama3.2:latest",
        "openai_api_base": upstream.base_url,
        "openai_api_key": "@secrets(OllamaKey)",
        "temperature": 0.2,
    }
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'v.db'}",
        secrets_file=None,
        secrets_env={"default": ["OllamaKey"]},
    )
    async with Pilothouse(settings) as ph:
        await (
            CatalogBuilder()
            .add("providers", code="OLMA", settings=config)
            .model("LLAMA3", provider="OLMA", model_name="llama3-model")
            .configuration("CONF", max_tokens=64, temperature=0.9)
            .action("ASK", prompt="Answer.", model="LLAMA3", configuration="CONF", ask_user=False)
            .import_into(ph)
        )
        result = await ph.command.start_and_send("Hello", action="ASK")
        stored = await ph.catalog.get("providers", "OLMA")
    assert result.status is ProcessStatus.COMPLETED, result.error
    assert result.output == "Hi from llama."
    (body,) = upstream.requests
    assert body["model"] == "llama3.2:latest"
    # The LLM's own parameter over the action's configuration; the rest is the action's.
    assert body["temperature"] == 0.2
    assert body.get("max_completion_tokens", body.get("max_tokens")) == 64
    # Stored in pilothouse's places; the key stays a reference.
    assert stored.document["base_url"] == upstream.base_url
    assert stored.document["api_key"] == "@secrets(OllamaKey)"
    assert stored.document["kind"] == "openai-compatible"
