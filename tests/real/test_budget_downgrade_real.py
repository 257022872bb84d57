"""A ``downgrade`` budget switches turns to its cheaper model on real llama.cpp servers.

The action's model is the packaged Qwen2.5-Coder-0.5B, the budget's
``downgrade_to`` the small SmolLM2-135M, each served by its own real
llama.cpp server (the session's ``local_model_servers``). Once the budget's
one turn is spent, the next turn runs on SmolLM2: the conversation records
the model that answered, the timeline both models, and the usage report
counts each turn under the model that answered.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pilothouse.api import Pilothouse
from pilothouse.providers._local import LocalModelServers
from pilothouse.settings import Settings
from pilothouse.types import ProcessStatus, TimelineKind

pytestmark = [pytest.mark.real, pytest.mark.anyio]

CATALOG = """\
providers:
  - code: QWN
    kind: local
    settings: {model_path: qwen2.5-coder-0.5b}
  - code: SML
    kind: local
    settings: {model_path: smollm2}
models:
  - code: QWEN05
    provider: QWN
    model_name: Qwen2.5-Coder-0.5B-Instruct
    capabilities: [SR]
    input_price: 5
    output_price: 15
    context_window: 4096
  - code: SMOL
    provider: SML
    model_name: SmolLM2-135M-Instruct
    capabilities: [SR]
    input_price: 0.1
    output_price: 0.1
    context_window: 2048
configurations:
  - code: SHRT
    max_tokens: 8
    temperature: 0
    retry_count: 0
    retry_delay: 0
actions:
  - code: HELLO
    model: QWEN05
    configuration: SHRT
    prompt: Answer in one short sentence.
    ask_user: false
budgets:
  - code: ONETURN
    scope: action
    match: HELLO
    period: day
    turns: 1
    on_limit: downgrade
    downgrade_to: SMOL
"""


class Downgrades:
    """A meter that keeps only the downgrades it is told of."""

    def __init__(self) -> None:
        self.seen: list[dict[str, Any]] = []

    def budget_downgrade(self, **labels: Any) -> None:
        self.seen.append(labels)

    def turn(self, **labels: Any) -> None:
        del labels

    model_call = retry = tool_call = queue_wait = budget_alert = turn


async def test_the_turn_past_the_limit_runs_on_the_downgrade_model(
    tmp_path: Path,
    local_model_servers: LocalModelServers,
    qwen_base_url: str,
    local_llm_base_url: str,
) -> None:
    del qwen_base_url, local_llm_base_url  # both servers started once for the session
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG, encoding="utf-8")
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'pilothouse.db'}")
    meter = Downgrades()
    async with Pilothouse(settings, local_servers=local_model_servers, meter=meter) as ph:
        await ph.catalog.import_files([catalog])
        first = await ph.command.start_and_send("Say hello.", action="HELLO")
        second = await ph.command.start_and_send("Say hello.", action="HELLO")
        before = await ph.query.get_transcript(first.conversation_uuid)
        after = await ph.query.get_transcript(second.conversation_uuid)
        by_model = await ph.query.usage(group_by=["model"])
    assert first.status is ProcessStatus.COMPLETED, first.error
    assert second.status is ProcessStatus.COMPLETED, second.error
    # The servers answer with the GGUF file each loaded.
    assert before.response_model is not None and "qwen" in before.response_model.lower()
    assert after.response_model is not None and "smollm2" in after.response_model.lower()
    assert not [e for e in before.timeline if e.kind is TimelineKind.BUDGET]
    (event,) = [e.data for e in after.timeline if e.kind is TimelineKind.BUDGET]
    assert event["requested_model"] == "QWEN05" and event["model"] == "SMOL"
    assert event["budget"] == "ONETURN" and event["limit"] == "turns"
    # Priced at SmolLM2's prices, far below what the same turn costs on Qwen.
    assert 0 < second.cost < first.cost
    # The usage report counts each turn under the model that answered.
    assert sorted(row.group["model"] or "" for row in by_model) == sorted(
        [before.response_model, after.response_model]
    )
    assert all(row.conversations == 1 for row in by_model)
    assert meter.seen == [{"budget": "ONETURN", "model": "SMOL"}]
