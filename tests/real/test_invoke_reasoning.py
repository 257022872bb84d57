"""The BPMN connector's reasoning parameters at a baseUrl (seed 003), against a real server.

``reasoningEffort`` is forwarded (the body's ``reasoning_effort``) whatever
the model; ``reasoningSummary`` switches to the Responses API, as it does for
OpenAI itself. The server is a real HTTP server on loopback.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fault_upstream import Reply, Upstream, completion, running_upstream

from pilothouse.api import Pilothouse
from pilothouse.providers import ModelOptions
from pilothouse.settings import Settings
from pilothouse.types import AdHocRun, ModelEndpoint

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def upstream() -> Iterator[Upstream]:
    with running_upstream() as up:
        yield up


def _settings(tmp_path: Path) -> Settings:
    return Settings(
        database_url=f"sqlite+aiosqlite:///{tmp_path / 'r.db'}",
        secrets_file=None,
        egress_allow=["127.0.0.1"],
    )


async def test_reasoning_effort_reaches_an_openai_compatible_server(
    tmp_path: Path, upstream: Upstream
) -> None:
    upstream.script(Reply(completion("Thought it through.")))
    async with Pilothouse(_settings(tmp_path)) as ph:
        result = await ph.command.run_adhoc(
            AdHocRun(
                name="Thinker",
                message="Why?",
                model=ModelEndpoint(base_url=upstream.base_url, model_name="qwen3"),
                options=ModelOptions(reasoning_effort="high"),
            )
        )
    assert result.result.output == "Thought it through."
    assert upstream.paths == ["/v1/chat/completions"]
    assert upstream.requests[0]["reasoning_effort"] == "high"


async def test_reasoning_summary_switches_to_the_responses_api(
    tmp_path: Path, upstream: Upstream
) -> None:
    upstream.script(Reply({"error": {"message": "not here", "type": "x"}}, status=404))
    async with Pilothouse(_settings(tmp_path)) as ph:
        await ph.command.run_adhoc(
            AdHocRun(
                name="Thinker",
                message="Why?",
                model=ModelEndpoint(base_url=upstream.base_url, model_name="qwen3"),
                options=ModelOptions(reasoning_effort="low", reasoning_summary="concise"),
            )
        )
    assert upstream.paths[0] == "/v1/responses"
    assert upstream.requests[0]["reasoning"] == {"effort": "low", "summary": "concise"}
