"""The run loop end to end against the real local model (SmolLM2-135M on llama.cpp).

Each test gets a fresh SQLite database with ``examples/catalog`` imported;
one llama.cpp server (the session's ``local_model_servers``) answers them all,
except the CLI test, whose subprocess starts its own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ports import free_port

from pilothouse.api import Pilothouse
from pilothouse.catalog._enums import (
    FinishReason,
    MessageRole,
    ProcessStatus,
    SchemaDirection,
    TimelineKind,
)
from pilothouse.providers._local import LocalModelServers
from pilothouse.runtime import TextDelta, TurnEvent, TurnFinished, TurnResult
from pilothouse.settings import Settings
from pilothouse.store import ConversationView

pytestmark = [pytest.mark.real, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "examples" / "catalog"
BRAND_DOCUMENT = (
    "Acme Rockets builds small reusable rockets for weather satellites. "
    "Its brand promise is on-time launches at a fair price. "
    "The company was founded in 2019 and has flown forty missions."
)
COMPETITOR_TEXT = (
    "Acme Rockets competes with Orbital Express (orbitalexpress.com), which sells "
    "cheaper launches, and with Skyward Launch (skyward.io), which flies heavier loads."
)

# Catalog additions for these tests: a 3-message memory window, a long free
# generation to cancel, and a provider nobody answers for.
EXTRA_CATALOG = """\
memory_strategies:
  - code: WIN3
    name: Last 3 messages
    type: CHAT
    kind: WINDOW
    window_size: 3
configurations:
  - code: SHRT
    name: Short, deterministic answers
    max_tokens: 24
    temperature: 0
    retry_count: 0
    retry_delay: 0
  - code: ONER
    name: One quick retry
    max_tokens: 16
    retry_count: 1
    retry_delay: 0.01
providers:
  - code: DOWN
    name: A server that is not running
    kind: openai-compatible
    base_url: http://127.0.0.1:{port}/v1
models:
  - code: DOWNMODEL
    provider: DOWN
    model_name: nothing-listens
actions:
  - code: CHAT3
    name: Chat with a 3-message memory window
    model: SMOLLM2
    configuration: SHRT
    memory_strategy: WIN3
    prompt: Answer the user in one short sentence.
    ask_user: false
  - code: RAMBLE
    name: A long answer
    model: SMOLLM2
    configuration: DFLT
    prompt: Write a very long, detailed story. Never stop early.
    ask_user: false
  - code: UNREACHABLE
    name: Ask a provider that is down
    model: DOWNMODEL
    configuration: ONER
    prompt: Say hello.
    ask_user: false
"""


@pytest.fixture
async def ph(tmp_path: Path, local_model_servers: LocalModelServers) -> AsyncIterator[Pilothouse]:
    extra = tmp_path / "extra.yaml"
    extra.write_text(EXTRA_CATALOG.replace("{port}", str(free_port())), encoding="utf-8")
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'pilothouse.db'}")
    async with Pilothouse(settings, local_servers=local_model_servers) as facade:
        await facade.catalog.import_files([CATALOG, extra])
        yield facade


def kinds(transcript: ConversationView) -> list[TimelineKind]:
    return [event.kind for event in transcript.timeline]


def events_of(transcript: ConversationView, kind: TimelineKind) -> list[dict[str, Any]]:
    return [event.data for event in transcript.timeline if event.kind is kind]


async def test_streamed_answer_is_recorded_with_usage_and_ai_marker(ph: Pilothouse) -> None:
    conversation = await ph.command.start_conversation(action="SUMBRAND", agent="WRITER")
    events: list[TurnEvent] = [
        event
        async for event in ph.command.stream_message(
            conversation.uuid,
            "Summarize it.",
            input_data={"document": BRAND_DOCUMENT},
            # Enough for several deltas; fewer tokens keep the test quick.
            runtime_config={"max_tokens": 40},
        )
    ]
    deltas = [event.text for event in events if isinstance(event, TextDelta)]
    assert len(deltas) > 1
    finished = events[-1]
    assert isinstance(finished, TurnFinished)
    result = finished.result
    assert result.status is ProcessStatus.COMPLETED
    assert result.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
    assert result.input_tokens > 0
    assert result.output_tokens > 0

    transcript = await ph.query.get_transcript(conversation.uuid)
    assert transcript.status is ProcessStatus.COMPLETED
    assert (transcript.input_tokens, transcript.output_tokens) == (
        result.input_tokens,
        result.output_tokens,
    )
    assert [m.role for m in transcript.messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
    ]
    answer = transcript.messages[2]
    assert answer.content == "".join(deltas) == result.output
    assert answer.content.strip()
    marker = (answer.data or {})["ai"]
    assert marker["aiGenerated"] is True
    assert marker["runId"]
    assert marker["provider"] == "LOCL"
    assert isinstance(marker["model"], str) and marker["model"]
    assert marker["generatedAt"]
    assert result.ai_meta == marker
    (request,) = events_of(transcript, TimelineKind.REQUEST)
    assert request["stream"] is True
    (response,) = events_of(transcript, TimelineKind.RESPONSE)
    # The local server reports usage on a stream's last chunk (llama-cpp-python
    # alone reports none, and the runner had to estimate it).
    assert response["usage_estimated"] is False
    assert response["input_tokens"] > 0
    assert 0 < response["output_tokens"] <= 40  # max_tokens is honoured


async def test_structured_output_action_returns_schema_valid_items(ph: Pilothouse) -> None:
    action = await ph.query.find_action_by_code("COMPETITORS")
    assert action is not None
    (output,) = [s for s in action.schemas if s.direction is SchemaDirection.OUTPUT]
    schema = {"type": "array", "items": output.json_schema}

    conversation = await ph.command.start_conversation(action="COMPETITORS", agent="ANALYST")
    result = await ph.command.send_message(
        conversation.uuid, "Who are the competitors?", input_data={"document": COMPETITOR_TEXT}
    )

    assert result.status is ProcessStatus.COMPLETED, result.error
    assert isinstance(result.output, list)
    items: list[Any] = result.output
    assert items
    for item in items:
        assert isinstance(item, dict)
        assert isinstance(item["name"], str)
    jsonschema.validate(items, schema)
    messages = await ph.query.get_conversation_messages(conversation.uuid)
    assert json.loads(messages[-1].content) == items


async def test_cancelled_stream_keeps_the_partial_answer(ph: Pilothouse) -> None:
    conversation = await ph.command.start_conversation(action="RAMBLE")
    received: list[str] = []
    finished: list[TurnFinished] = []
    cancelled: list[bool] = []
    async for event in ph.command.stream_message(
        conversation.uuid, "Tell me about the sea.", runtime_config={"max_tokens": 400}
    ):
        if isinstance(event, TextDelta):
            received.append(event.text)
            if len(received) == 3 and not cancelled:
                cancelled.append(await ph.command.cancel(conversation.uuid))
        elif isinstance(event, TurnFinished):
            finished.append(event)
    assert cancelled == [True]
    assert len(finished) == 1
    result = finished[0].result
    assert result.status is ProcessStatus.TERMINATED

    transcript = await ph.query.get_transcript(conversation.uuid)
    assert transcript.status is ProcessStatus.TERMINATED
    assert [m.role for m in transcript.messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
    ]
    partial = transcript.messages[2]
    assert (partial.data or {})["interrupted"] is True
    assert partial.content == result.text
    # A delta may be cut between being kept and being delivered, never the reverse.
    assert partial.content.startswith("".join(received))
    assert len(received) >= 3
    (cancel,) = events_of(transcript, TimelineKind.CANCEL)
    assert cancel["partial_chars"] == len(partial.content)
    assert events_of(transcript, TimelineKind.STATUS_CHANGE)[-1] == {"from": "RU", "to": "TE"}


async def test_window_memory_limits_the_history_of_later_turns(ph: Pilothouse) -> None:
    conversation = await ph.command.start_conversation(action="CHAT3")
    results: list[TurnResult] = []
    for text in ("My name is Ada.", "I live in Paris.", "What is my name?"):
        result = await ph.command.send_message(conversation.uuid, text)
        assert result.status is ProcessStatus.COMPLETED, result.error
        results.append(result)

    transcript = await ph.query.get_transcript(conversation.uuid)
    assert [m.sequence for m in transcript.messages] == [1, 2, 3, 4, 5, 6, 7]
    assert [m.role for m in transcript.messages] == [
        MessageRole.SYSTEM,
        *[MessageRole.USER, MessageRole.ASSISTANT] * 3,
    ]
    # Model messages per request: the first turn sends the user message alone
    # (the system prompt rides in the same request), the second the whole
    # 3-message history, and the third still 3 where full memory would send 5.
    requests = events_of(transcript, TimelineKind.REQUEST)
    assert [r["messages"] for r in requests] == [1, 3, 3]
    changes = events_of(transcript, TimelineKind.STATUS_CHANGE)
    assert [c["to"] for c in changes] == ["RU", "CO"] * 3
    # Each result reports its own turn's usage; the conversation sums them.
    responses = events_of(transcript, TimelineKind.RESPONSE)
    assert [(r.input_tokens, r.output_tokens) for r in results] == [
        (e["input_tokens"], e["output_tokens"]) for e in responses
    ]
    assert transcript.input_tokens == sum(r.input_tokens for r in results)
    assert transcript.output_tokens == sum(r.output_tokens for r in results)


async def test_provider_down_fails_the_turn_after_its_retry(ph: Pilothouse) -> None:
    conversation = await ph.command.start_conversation(action="UNREACHABLE")
    result = await ph.command.send_message(conversation.uuid, "Hello?")

    assert result.status is ProcessStatus.FAILED
    assert result.error is not None
    assert "connect" in result.error.lower()
    transcript = await ph.query.get_transcript(conversation.uuid)
    assert transcript.status is ProcessStatus.FAILED
    assert transcript.error_detail == result.error
    assert [(m.sequence, m.role, m.content) for m in transcript.messages][1:] == [
        (2, MessageRole.USER, "Hello?")
    ]
    assert transcript.messages[0].role is MessageRole.SYSTEM
    assert kinds(transcript) == [
        TimelineKind.STATUS_CHANGE,
        TimelineKind.REQUEST,
        TimelineKind.ERROR,
        TimelineKind.RETRY,
        TimelineKind.REQUEST,
        TimelineKind.ERROR,
        TimelineKind.ERROR,
        TimelineKind.STATUS_CHANGE,
    ]
    first, _, retry, second, last_error, detail, to_failed = [
        e.data for e in transcript.timeline[1:]
    ]
    assert (first["attempt"], retry["attempt"], second["attempt"]) == (1, 2, 2)
    assert retry["delay"] <= 0.01
    assert "connect" in last_error["error"].lower()
    assert detail["detail"] == result.error
    assert to_failed == {"from": "RU", "to": "FA"}
    # Nothing lost: the conversation row, its system prompt and message are all still there.
    page = await ph.query.list_conversations(action="UNREACHABLE")
    assert [c.uuid for c in page.items] == [conversation.uuid]
    assert len(await ph.query.get_conversation_messages(conversation.uuid)) == 2


def pilothouse_cli(database_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-c",
            "from pilothouse.cli import main; main()",
            "--database-url",
            database_url,
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=ROOT,
        check=False,
    )


def test_cli_imports_runs_and_shows_a_conversation(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'cli.db'}"
    imported = pilothouse_cli(url, "catalog", "import", str(CATALOG))
    assert imported.returncode == 0, imported.stderr

    ran = pilothouse_cli(
        url,
        "run",
        "SUMBRAND",
        "--input",
        f"document={BRAND_DOCUMENT}",
        "--set",
        "max_tokens=32",
        "Summarize.",
        "--json",
    )
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert result["status"] == "CO"
    assert isinstance(result["output"], str) and result["output"].strip()
    assert result["ai_meta"]["provider"] == "LOCL"

    shown = pilothouse_cli(url, "conversations", "show", result["conversation_uuid"], "--json")
    assert shown.returncode == 0, shown.stderr
    transcript = json.loads(shown.stdout)
    assert transcript["status"] == "CO"
    assert [(m["role"], m["sequence"]) for m in transcript["messages"]] == [
        ("SY", 1),
        ("US", 2),
        ("AS", 3),
    ]
    assert transcript["messages"][2]["content"] == result["output"]
    timeline = [event["kind"] for event in transcript["timeline"]]
    assert timeline == ["status_change", "request", "response", "status_change"]
