"""``pilothouse serve`` exports its spans over OTLP/HTTP as the ``OTEL_*`` variables say.

A real OTLP receiver (``otlp_receiver``, decoding with the
``opentelemetry-proto`` classes) and a real scripted OpenAI-compatible
upstream run on loopback; ``pilothouse serve --log-format json`` runs as a
subprocess with only the standard variables set. One turn calls a script
tool: the request, turn, model-call and tool-call spans arrive in one trace
(the caller's ``traceparent``) with the GenAI semantic conventions'
attributes, and every JSON log line of the request names its request,
conversation and trace.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from fault_upstream import Reply, completion, running_upstream
from live_serve import PILOTHOUSE, prepare_database
from otlp_receiver import ReceivedSpan, otlp_receiver
from ports import free_port

pytestmark = [pytest.mark.real]

CATALOG = """\
providers:
  - code: OTLP
    kind: openai-compatible
    base_url: {base_url}
models:
  - code: OTLPMODEL
    provider: OTLP
    model_name: mock
    capabilities: [FC]
configurations:
  - code: OTLC
    max_tokens: 64
    temperature: 0.2
    retry_count: 0
tools:
  - code: WORDS
    name: count_words
    kind: script
    description: Count the words of a text.
    input_schema:
      type: object
      properties: {{text: {{type: string}}}}
      required: [text]
    implementation: |
      import json, sys
      args = json.load(sys.stdin)
      print(json.dumps({{"words": len(args["text"].split())}}))
actions:
  - code: COUNTER
    name: Count words
    model: OTLPMODEL
    configuration: OTLC
    prompt: Count.
    tools: [WORDS]
    ask_user: false
"""

TOOL_CALL = {
    "id": "call_words_1",
    "type": "function",
    "function": {"name": "count_words", "arguments": json.dumps({"text": "a b c"})},
}
TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
TRACEPARENT = f"00-{TRACE_ID}-00f067aa0ba902b7-01"
MESSAGES_SPAN = "POST /v1/conversations/{uuid}/messages"


def _by_name(spans: list[ReceivedSpan], prefix: str) -> ReceivedSpan:
    matching = [s for s in spans if s.name.startswith(prefix)]
    assert len(matching) == 1, "\n".join(str(s) for s in spans if s.trace_id == TRACE_ID)
    (span,) = matching
    return span


def _serve(database_url: str, port: int, log: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    with log.open("w") as out:
        return subprocess.Popen(
            [
                PILOTHOUSE,
                "--database-url",
                database_url,
                "serve",
                "--port",
                str(port),
                "--grace",
                "5",
                "--log-format",
                "json",
                "--log-level",
                "info",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env={
                **{k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
                "PILOTHOUSE_SECRETS_FILE": "",
                "PILOTHOUSE_EGRESS_ALLOW": "127.0.0.1",
                # A single-tenant test deployment: the script runs without bwrap.
                "PILOTHOUSE_SCRIPT_TOOLS": "trusted",
                **env,
            },
        )


def _wait_ready(process: subprocess.Popen[bytes], root: str, log: Path) -> None:
    deadline = time.monotonic() + 60
    while True:
        assert process.poll() is None, log.read_text()
        try:
            if httpx.get(f"{root}/healthz", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "pilothouse serve did not start in 60 s"
        time.sleep(0.2)


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def test_a_turn_s_spans_reach_a_real_otlp_receiver_with_gen_ai_attributes_and_logs_name_them(
    tmp_path: Path,
) -> None:
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'otlp.db'}"
    with running_upstream() as upstream, otlp_receiver() as receiver:
        key = prepare_database(database_url, tmp_path, CATALOG.format(base_url=upstream.base_url))
        upstream.script(
            Reply(completion(tool_calls=[TOOL_CALL])), Reply(completion("There are 3 words."))
        )
        port = free_port()
        root = f"http://127.0.0.1:{port}"
        log = tmp_path / "serve.log"
        process = _serve(
            database_url,
            port,
            log,
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": receiver.endpoint,
                "OTEL_SERVICE_NAME": "pilothouse-otlp-test",
                "OTEL_BSP_SCHEDULE_DELAY": "100",
            },
        )
        try:
            _wait_ready(process, root, log)
            headers = {
                "Authorization": f"Bearer {key}",
                "traceparent": TRACEPARENT,
                "X-Request-ID": "req-otlp-1",
            }
            with httpx.Client(base_url=f"{root}/v1", timeout=60) as http:
                created = http.post(
                    "/conversations", json={"action": "COUNTER"}, headers={"X-API-Key": key}
                )
                assert created.status_code == 201, created.text
                uuid = created.json()["uuid"]
                answer = http.post(
                    f"/conversations/{uuid}/messages", json={"text": "a b c"}, headers=headers
                )
            assert answer.status_code == 200, answer.text
            assert answer.json()["status"] == "CO", answer.text
            assert answer.headers["x-request-id"] == "req-otlp-1"

            # The request's own span ends after the turn's, and the batch
            # exporter may send the two apart: wait for the span asserted on,
            # not for any POST (the conversation's creation is one too).
            spans = receiver.wait_for(
                lambda spans: (
                    any(s.name == MESSAGES_SPAN and s.kind == 2 for s in spans)
                    and any(s.name.startswith("invoke_agent") for s in spans)
                )
            )
        finally:
            _stop(process)
    assert receiver.paths and set(receiver.paths) == {"/v1/traces"}
    (request,) = [s for s in spans if s.name == MESSAGES_SPAN and s.kind == 2]
    turn = _by_name(spans, "invoke_agent COUNTER")
    chats = [s for s in spans if s.name == "chat mock"]
    tool = _by_name(spans, "execute_tool count_words")
    ours = [request, turn, tool, *chats]
    assert len(chats) == 2  # the tool call, then the answer
    # One trace, the caller's; spans nest request > ... > turn > model calls and tool call.
    assert {s.trace_id for s in ours} == {TRACE_ID}
    assert request.parent_span_id == "00f067aa0ba902b7"
    parents = {s.span_id: s.parent_span_id for s in spans}
    ancestor = turn.parent_span_id
    while ancestor in parents and ancestor != request.span_id:
        ancestor = parents[ancestor]
    assert ancestor == request.span_id, "the turn runs inside the request's span"
    assert {s.parent_span_id for s in [tool, *chats]} == {turn.span_id}
    assert {s.resource["service.name"] for s in ours} == {"pilothouse-otlp-test"}

    assert request.attributes["http.route"] == "/v1/conversations/{uuid}/messages"
    assert request.attributes["http.response.status_code"] == 200
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.agent.name"] == "COUNTER"
    assert turn.attributes["gen_ai.conversation.id"] == uuid
    chat = chats[0]
    assert chat.attributes["gen_ai.operation.name"] == "chat"
    assert chat.attributes["gen_ai.provider.name"] == "openai-compatible"
    assert chat.attributes["gen_ai.request.model"] == "mock"
    assert chat.attributes["gen_ai.request.temperature"] == pytest.approx(0.2)
    assert chat.attributes["gen_ai.request.max_tokens"] == 64
    assert chat.attributes["gen_ai.response.model"] == "mock"
    assert chat.attributes["gen_ai.response.finish_reasons"] == ["tool_call"]
    assert chat.attributes["gen_ai.usage.input_tokens"] == 5
    assert chat.attributes["gen_ai.usage.output_tokens"] == 3
    assert tool.attributes == {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "count_words",
        "gen_ai.tool.call.id": "call_words_1",
    }
    # The deprecated attribute is gone, and no content leaves in a span.
    for span in ours:
        assert "gen_ai.system" not in span.attributes
        assert "a b c" not in json.dumps(span.attributes)

    lines: list[dict[str, Any]] = []
    for line in log.read_text().splitlines():
        if line.startswith("{"):
            lines.append(json.loads(line))
    ours_logged = [entry for entry in lines if entry["request_id"] == "req-otlp-1"]
    assert ours_logged, lines
    for entry in ours_logged:
        assert entry["conversation_id"] == uuid
        assert entry["trace_id"] == TRACE_ID
    assert any(entry["logger"] == "uvicorn.access" for entry in ours_logged)
    assert any("tracing: spans of service 'pilothouse-otlp-test'" in e["message"] for e in lines)
    # The API key appears nowhere in the logs.
    assert key not in log.read_text()


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"OTEL_TRACES_EXPORTER": "zipkin"}, "OTEL_TRACES_EXPORTER"),
        (
            {
                "OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4317",
                "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
            },
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ),
        ({"OTEL_METRICS_EXPORTER": "otlp"}, "OTEL_METRICS_EXPORTER"),
    ],
)
def test_serve_refuses_otel_settings_it_cannot_honour_at_start(
    tmp_path: Path, env: dict[str, str], named: str
) -> None:
    database_url = f"sqlite+aiosqlite:///{tmp_path / 'refused.db'}"
    log = tmp_path / "serve.log"
    process = _serve(database_url, free_port(), log, env)
    assert process.wait(timeout=60) == 2
    text = log.read_text()
    assert f"error: {named}:" in text
