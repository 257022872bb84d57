"""What the record holds for turns on the packaged default model (Qwen2.5-Coder-0.5B).

A real llama.cpp server answers (the session's ``local_model_servers``,
asked for the default model by name): a turn stopped mid-stream counts the
tokens it used, and the record, the AI marker and the model call's span name
the model that answered, never a catalog name no installed file serves.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from pilothouse.api import Pilothouse
from pilothouse.providers import ProviderConfigError
from pilothouse.providers._local import LocalModelServers
from pilothouse.runtime import TextDelta, TurnFinished
from pilothouse.settings import Settings
from pilothouse.store import ConversationView
from pilothouse.types import MessageRole, ProcessStatus, TimelineKind

pytestmark = [pytest.mark.real, pytest.mark.anyio]

# The id the server answers with: the GGUF file it loaded.
SERVED = "qwen2.5-coder-0.5b-instruct-q4_k_m"

CATALOG = """\
providers:
  - code: QWN
    name: The packaged default model, named
    kind: local
    settings: {model_path: qwen2.5-coder-0.5b}
  - code: DEFL
    name: The default local provider
    kind: local
models:
  - code: QWEN05
    provider: QWN
    model_name: Qwen2.5-Coder-0.5B-Instruct
    capabilities: [FC, SR]
    input_price: 0.5
    output_price: 1.5
    context_window: 4096
  - code: SMOLONQWEN
    provider: DEFL
    model_name: SmolLM2-135M-Instruct
    capabilities: [FC, SR]
    context_window: 4096
configurations:
  - code: LONG
    name: Long, deterministic answers
    max_tokens: 300
    temperature: 0
    retry_count: 0
    retry_delay: 0
  - code: SHRT
    name: Short, deterministic answers
    max_tokens: 12
    temperature: 0
    retry_count: 0
    retry_delay: 0
actions:
  - code: RAMBLE
    name: A long answer
    model: QWEN05
    configuration: LONG
    prompt: Write a very long, detailed story. Never stop early.
    ask_user: false
  - code: HELLO
    name: A short answer
    model: QWEN05
    configuration: SHRT
    prompt: Answer in one short sentence.
    ask_user: false
  - code: MISNAMED
    name: A model the default provider does not serve
    model: SMOLONQWEN
    configuration: SHRT
    prompt: Answer in one short sentence.
    ask_user: false
"""


@pytest.fixture
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    """Spans of the turns, through the global provider the run loop looks up."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: provider)
    yield exporter
    provider.shutdown()


@pytest.fixture
async def ph(
    tmp_path: Path, local_model_servers: LocalModelServers, qwen_base_url: str
) -> AsyncIterator[Pilothouse]:
    del qwen_base_url  # started once for the session, before the turns
    catalog = tmp_path / "catalog.yaml"
    catalog.write_text(CATALOG, encoding="utf-8")
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'pilothouse.db'}")
    async with Pilothouse(settings, local_servers=local_model_servers) as facade:
        await facade.catalog.import_files([catalog])
        yield facade


def events_of(transcript: ConversationView, kind: TimelineKind) -> list[dict[str, Any]]:
    return [event.data for event in transcript.timeline if event.kind is kind]


async def test_a_turn_cancelled_mid_stream_records_the_tokens_it_used(ph: Pilothouse) -> None:
    conversation = await ph.command.start_conversation(action="RAMBLE")
    received: list[str] = []
    finished: list[TurnFinished] = []
    cancelled: list[bool] = []
    async for event in ph.command.stream_message(conversation.uuid, "Tell me about the sea."):
        if isinstance(event, TextDelta):
            received.append(event.text)
            if len(received) == 5 and not cancelled:
                cancelled.append(await ph.command.cancel(conversation.uuid))
        elif isinstance(event, TurnFinished):
            finished.append(event)
    assert cancelled == [True]
    (done,) = finished
    result = done.result
    assert result.status is ProcessStatus.TERMINATED
    # The prompt was read and some text was written: both are spend.
    assert result.input_tokens > 0
    assert result.output_tokens > 0
    assert result.usage_estimated is True  # the server reports usage only at the end
    assert result.cost > 0
    assert result.as_json()["usage_estimated"] is True

    transcript = await ph.query.get_transcript(conversation.uuid)
    assert transcript.status is ProcessStatus.TERMINATED
    assert (transcript.input_tokens, transcript.output_tokens) == (
        result.input_tokens,
        result.output_tokens,
    )
    assert transcript.estimated_cost == result.cost
    assert transcript.response_model == SERVED
    partial = transcript.messages[-1]
    assert partial.role is MessageRole.ASSISTANT
    data = partial.data or {}
    assert data["interrupted"] is True
    usage = data["turn_usage"]
    assert usage["usage_estimated"] is True
    assert (usage["input_tokens"], usage["output_tokens"]) == (
        result.input_tokens,
        result.output_tokens,
    )
    assert Decimal(usage["cost"]) == result.cost
    # The answer so far was written by the packaged model, and says so.
    assert data["ai"]["model"] == SERVED
    (response,) = events_of(transcript, TimelineKind.RESPONSE)
    assert response["interrupted"] is True
    assert response["usage_estimated"] is True
    assert response["output_tokens"] == result.output_tokens


async def test_the_record_and_the_span_name_the_model_that_answered(
    ph: Pilothouse, spans: InMemorySpanExporter
) -> None:
    result = await ph.command.start_and_send("Say hello.", action="HELLO")
    assert result.status is ProcessStatus.COMPLETED, result.error
    assert result.ai_meta is not None
    assert result.ai_meta["model"] == SERVED
    conversation = await ph.query.get_conversation(result.conversation_uuid)
    assert conversation.response_model == SERVED
    (call,) = [span for span in spans.get_finished_spans() if span.name.startswith("chat ")]
    attributes = dict(call.attributes or {})
    assert attributes["gen_ai.request.model"] == "Qwen2.5-Coder-0.5B-Instruct"
    assert attributes["gen_ai.response.model"] == SERVED


async def test_a_local_model_name_no_installed_file_serves_is_refused(ph: Pilothouse) -> None:
    # The default local provider serves the packaged Qwen model, whatever
    # the catalog's model calls itself: SmolLM2 would be recorded falsely.
    servers = LocalModelServers()  # the product's default model; nothing is started
    async with Pilothouse(ph.settings, local_servers=servers) as facade:
        with pytest.raises(ProviderConfigError) as refused:
            await facade.command.start_and_send("Say hello.", action="MISNAMED")
        message = str(refused.value)
        assert "SMOLONQWEN" in message
        assert "SmolLM2-135M-Instruct" in message
        assert SERVED in message
        assert "Installed local models: qwen2.5-coder-0.5b" in message
        assert "settings.model_path" in message
        # Refused before anything was written.
        assert (await facade.query.list_conversations()).items == []
    assert servers.running() == []
