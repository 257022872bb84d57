"""Vantiq model names (seed 004) reach a real OpenAI-compatible server without their prefix.

The guide's examples, verbatim: ``openai/llama3.2:latest`` (its Ollama
example) and ``nvidia-nim/mistralai/mixtral-8x7b-instruct-v0.1`` (its NVIDIA
NIM example). The server is a real HTTP server on loopback that keeps the
bodies it received.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_upstream import Reply, Upstream, completion, running_upstream

from pilothouse.api import Pilothouse
from pilothouse.catalog import ProcessStatus
from pilothouse.providers import ProviderConfigError
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        yield up


@pytest.mark.parametrize(
    ("kind", "model_name", "sent"),
    [
        # The guide's Ollama example: an Ollama server.
        ("ollama", "openai/llama3.2:latest", "llama3.2:latest"),
        ("openai", "openai/llama3.2:latest", "llama3.2:latest"),
        (
            "openai-compatible",
            "nvidia-nim/mistralai/mixtral-8x7b-instruct-v0.1",
            "mistralai/mixtral-8x7b-instruct-v0.1",
        ),
        # The guide's openai/ names any OpenAI-compatible model: removed there too.
        ("openai-compatible", "openai/llama3.2:latest", "llama3.2:latest"),
        # A server's own id starting with openai/ (OpenRouter) gets the prefix once more.
        ("openai-compatible", "openai/openai/gpt-4o", "openai/gpt-4o"),
        ("openai-compatible", "anthropic/claude-sonnet-4", "anthropic/claude-sonnet-4"),
        ("openai-compatible", "llama3.2:latest", "llama3.2:latest"),
    ],
)
async def test_the_vendor_gets_the_model_id_without_the_vantiq_prefix(
    tmp_path: Path,
    upstream: Upstream,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
    model_name: str,
    sent: str,
) -> None:
    upstream.script(Reply(completion("Hi.")))
    monkeypatch.setenv("K", "unused")
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'v.db'}",
        secrets_file=None,
        secrets_env={"default": ["K"]},
    )
    async with Pilothouse(settings) as ph:
        await (
            CatalogBuilder()
            .provider("OLMA", kind=kind, base_url=upstream.base_url, api_key="@secrets(K)")
            .model("LLAMA3", provider="OLMA", model_name=model_name)
            .action("ASK", prompt="Answer.", model="LLAMA3", ask_user=False)
            .import_into(ph)
        )
        result = await ph.command.start_and_send("Hello", action="ASK")
    assert result.status is ProcessStatus.COMPLETED, result.error
    assert [body["model"] for body in upstream.requests] == [sent]
    assert upstream.paths == ["/v1/chat/completions"]


async def test_a_prefix_of_another_vendor_is_refused_before_any_call(
    tmp_path: Path, upstream: Upstream
) -> None:
    upstream.script(Reply(completion("Hi.")))
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'v.db'}", secrets_file=None)
    async with Pilothouse(settings) as ph:
        await (
            CatalogBuilder()
            .provider("OLMA", kind="openai-compatible", base_url=upstream.base_url)
            .model("GEMINI", provider="OLMA", model_name="google-genai/gemini-2.0-flash")
            .action("ASK", prompt="Answer.", model="GEMINI", ask_user=False)
            .import_into(ph)
        )
        with pytest.raises(ProviderConfigError, match="the prefix google-genai/ names a google"):
            await ph.command.start_and_send("Hello", action="ASK")
    assert upstream.requests == []


async def test_the_connectors_model_at_a_base_url_is_sent_as_written(
    tmp_path: Path, upstream: Upstream
) -> None:
    # Seed 003: "on OpenRouter prefix with provider, e.g. openai/gpt-5.4-nano".
    # The connector's model parameter is the server's id, not a Vantiq name.
    from pilothouse.types import AdHocRun, ModelEndpoint

    upstream.script(Reply(completion("Hi.")))
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'v.db'}",
        secrets_file=None,
        egress_allow=["127.0.0.1"],
    )
    async with Pilothouse(settings) as ph:
        run = await ph.command.run_adhoc(
            AdHocRun(
                name="my-agent",
                message="Hello",
                model=ModelEndpoint(base_url=upstream.base_url, model_name="openai/gpt-5.4-nano"),
            )
        )
    assert run.result.output == "Hi."
    assert [body["model"] for body in upstream.requests] == ["openai/gpt-5.4-nano"]
