"""Hostile inputs get the same 4xx on every face and both stores, and write nothing.

The same requests (a NUL character, a lone surrogate, a 5,000-digit integer,
NaN, loosely typed values, an unknown field) go to SQLite and PostgreSQL
through the REST routes, the OpenAI face, /v1/invoke and JSON-RPC; each
answer is reduced to (status or JSON-RPC code, the field it names) and must
be the expected one, so both stores answer alike. The facade and the CLI get
the same inputs; the MCP face too, over real loopback HTTP.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
import httpx
import httpx2
import mcp_types as mt
import pytest
from fastapi import FastAPI
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from server_helpers import auth, serve_on_loopback
from sqlalchemy import text
from typer.testing import CliRunner, Result

from pilothouse.cli import app as cli_app
from pilothouse.errors import CatalogValidationError, InvalidFieldError
from pilothouse.server._invoke import parse_invoke
from pilothouse.server._state import ServerState
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import CatalogBuilder
from pilothouse.types import MemoryScope

pytestmark = pytest.mark.anyio

NUL = "a\x00b"
SURROGATE = "a\ud800b"
HUGE = "9" * 5000
CHAT = [{"role": "user", "content": "hi"}]
TABLES = ("conversation", "message", "memory_record", "action", "configuration")


@pytest.fixture
def server_settings(database_url: str) -> Settings:
    # SQLite and PostgreSQL, each seeded with the examples and ECHO.
    return Settings(database_url=database_url, secrets_file=None)


def _path(value: str) -> str:
    return quote(value, safe="", errors="surrogatepass")


def _json(value: Any) -> bytes:
    # json.dumps writes a lone surrogate as its \ud800 escape, as a client would.
    return json.dumps(value).encode()


def _with_huge(document: str) -> bytes:
    # A number no JSON encoder of Python writes: spliced into the text.
    return document.replace('"HUGE"', HUGE).encode()


def _answer(response: httpx.Response) -> tuple[int, str | None]:
    """(status, or the JSON-RPC error code; the field the error names)."""
    body = response.json()
    if "jsonrpc" in body:
        error = body["error"]
        data = error.get("data") or {}
        errors = data.get("errors") or []
        field = errors[0].get("field") if errors else data.get("detail", "").split(":")[0]
        return error["code"], field
    if isinstance(body.get("error"), dict):  # OpenAI's shape
        return response.status_code, body["error"].get("param")
    errors = body.get("errors") or []
    if errors:
        return response.status_code, errors[0].get("field")
    return response.status_code, body.get("detail", "").split(":")[0]


async def _rows(state: ServerState) -> dict[str, int]:
    database = Database(state.settings.database_url)
    try:
        async with database.engine.connect() as connection:
            return {
                table: (
                    await connection.execute(text(f"SELECT count(*) FROM {table}"))
                ).scalar_one()
                for table in TABLES
            }
    finally:
        await database.dispose()


def _cases(uuid: str) -> list[tuple[str, str, str, bytes | None, str, tuple[int, str]]]:
    """(id, method, path, body, content type, expected answer) of every hostile request."""
    rpc = "pilothouse/{}/v1"
    json_type, yaml_type = "application/json", "application/yaml"
    huge_yaml = f"configurations:\n  - code: BIG\n    name: n\n    max_tokens: {HUGE}\n"
    cases: list[tuple[str, str, str, bytes | None, str, tuple[int, str]]] = []
    for label, bad in (("nul", NUL), ("surrogate", SURROGATE)):
        body = _json
        cases += [
            (
                f"{label} start action",
                "POST",
                "/v1/conversations",
                body({"action": bad}),
                json_type,
                (422, "action"),
            ),
            (
                f"{label} message text",
                "POST",
                f"/v1/conversations/{uuid}/messages",
                body({"text": bad}),
                json_type,
                (422, "text"),
            ),
            (
                f"{label} input data",
                "POST",
                f"/v1/conversations/{uuid}/messages",
                body({"text": "hi", "input_data": {"city": bad}}),
                json_type,
                (422, "input_data.city"),
            ),
            (
                f"{label} invoke model",
                "POST",
                "/v1/invoke",
                body({"agentName": "x", "model": bad, "message": "hi"}),
                json_type,
                (400, "model"),
            ),
            (
                f"{label} openai model",
                "POST",
                "/v1/chat/completions",
                body({"model": bad, "messages": CHAT}),
                json_type,
                (400, "model"),
            ),
            (
                f"{label} openai content",
                "POST",
                "/v1/chat/completions",
                body({"model": "action:ECHO", "messages": [{"role": "user", "content": bad}]}),
                json_type,
                (400, "messages[0].content"),
            ),
            (
                f"{label} memory add",
                "POST",
                "/v1/memory",
                body({"scope": "user", "user_id": "u1", "content": bad}),
                json_type,
                (422, "content"),
            ),
            (
                f"{label} memory user",
                "POST",
                "/v1/memory",
                body({"scope": "user", "user_id": bad, "content": "c"}),
                json_type,
                (422, "scope.user_id"),
            ),
            (
                f"{label} memory search",
                "POST",
                "/v1/memory/search",
                body({"query": bad, "scopes": [{"scope": "user", "user_id": "u1"}]}),
                json_type,
                (422, "query"),
            ),
            (
                f"{label} catalog put",
                "PUT",
                "/v1/catalog",
                body({"actions": [{"code": "ZZ", "name": bad}]}),
                json_type,
                (422, "actions[0].name"),
            ),
        ]
    # A NUL in a path or a lookup key: PostgreSQL failed where SQLite found nothing.
    cases += [
        (
            "nul get conversation",
            "GET",
            f"/v1/conversations/{_path(NUL)}",
            None,
            json_type,
            (422, "uuid"),
        ),
        (
            "nul cancel",
            "POST",
            f"/v1/conversations/{_path(NUL)}/cancel",
            None,
            json_type,
            (422, "uuid"),
        ),
        (
            "nul send",
            "POST",
            f"/v1/conversations/{_path(NUL)}/messages",
            _json({"text": "hi"}),
            json_type,
            (422, "uuid"),
        ),
        (
            "nul recover",
            "POST",
            f"/v1/conversations/{_path(NUL)}/recover",
            _json({"retry": False}),
            json_type,
            (422, "uuid"),
        ),
        (
            "nul catalog code",
            "GET",
            f"/v1/catalog/actions/{_path(NUL)}",
            None,
            json_type,
            (422, "key"),
        ),
        (
            "nul memory id",
            "GET",
            f"/v1/memory/{_path(NUL)}?scope=user&user_id=u1",
            None,
            json_type,
            (422, "memory_id"),
        ),
        (
            "nul collection",
            "POST",
            f"/v1/knowledge/collections/{_path(NUL)}/search",
            _json({"query": "x"}),
            json_type,
            (422, "collection"),
        ),
        (
            "nul rpc uuid",
            "POST",
            "/jsonrpc",
            _json(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": rpc.format("query/getConversation"),
                    "params": {"uuid": NUL},
                }
            ),
            json_type,
            (-32004, "uuid"),
        ),
        (
            "nul rpc text",
            "POST",
            "/jsonrpc",
            _json(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": rpc.format("command/startAndSend"),
                    "params": {"action": "ECHO", "text": NUL},
                }
            ),
            json_type,
            (-32004, "text"),
        ),
    ]
    # Numbers: a 5,000-digit integer, NaN.
    cases += [
        (
            "huge catalog json",
            "PUT",
            "/v1/catalog",
            _with_huge('{"configurations": [{"code": "BIG", "name": "n", "max_tokens": "HUGE"}]}'),
            json_type,
            (422, "configurations[0].max_tokens"),
        ),
        (
            "huge catalog yaml",
            "PUT",
            "/v1/catalog",
            huge_yaml.encode(),
            yaml_type,
            (422, "configurations[0].max_tokens"),
        ),
        (
            "huge input data",
            "POST",
            f"/v1/conversations/{uuid}/messages",
            _with_huge('{"text": "hi", "input_data": {"n": "HUGE"}}'),
            json_type,
            (422, "input_data.n"),
        ),
        (
            "huge invoke",
            "POST",
            "/v1/invoke",
            _with_huge('{"agentName": "x", "message": "hi", "maxTokens": "HUGE"}'),
            json_type,
            (400, "maxTokens"),
        ),
        (
            "huge openai",
            "POST",
            "/v1/chat/completions",
            _with_huge('{"model": "action:ECHO", "messages": [], "max_tokens": "HUGE"}'),
            json_type,
            (400, "max_tokens"),
        ),
        (
            "huge rpc",
            "POST",
            "/jsonrpc",
            _with_huge(
                '{"jsonrpc": "2.0", "id": 1, "method": "'
                + rpc.format("query/listConversations")
                + '", "params": {"limit": "HUGE"}}'
            ),
            json_type,
            (-32602, "limit"),
        ),
        (
            "huge memory metadata",
            "POST",
            "/v1/memory",
            _with_huge(
                '{"scope": "user", "user_id": "u", "content": "c", "metadata": {"n": "HUGE"}}'
            ),
            json_type,
            (422, "metadata.n"),
        ),
        (
            "nan memory metadata",
            "POST",
            "/v1/memory",
            b'{"scope": "user", "user_id": "u", "content": "c", "metadata": {"n": NaN}}',
            json_type,
            (422, "metadata.n"),
        ),
    ]
    # Loosely typed values and unknown fields.
    invoke = {"agentName": "x", "model": "SMOLLM2", "message": "hi"}
    cases += [
        (
            "openai stream text",
            "POST",
            "/v1/chat/completions",
            _json({"model": "action:ECHO", "stream": "yes", "messages": CHAT}),
            json_type,
            (400, "stream"),
        ),
        (
            "invoke temperature bool",
            "POST",
            "/v1/invoke",
            _json({**invoke, "temperature": True}),
            json_type,
            (400, "temperature"),
        ),
        (
            "invoke memory yes",
            "POST",
            "/v1/invoke",
            _json({**invoke, "useChatMemory": "yes"}),
            json_type,
            (400, "useChatMemory"),
        ),
        (
            "invoke chat log yes",
            "POST",
            "/v1/invoke",
            _json({**invoke, "persistChatLog": "yes"}),
            json_type,
            (400, "persistChatLog"),
        ),
        (
            "attachment not base64",
            "POST",
            f"/v1/conversations/{uuid}/messages",
            _json({"text": "hi", "attachments": [{"media_type": "image/png", "data": "!!!"}]}),
            json_type,
            (422, "attachments[0].data"),
        ),
        (
            "extra field",
            "POST",
            "/v1/conversations",
            _json({"action": "ECHO", "bogus": 1}),
            json_type,
            (422, "bogus"),
        ),
        (
            "rpc limit text",
            "POST",
            "/jsonrpc",
            _json(
                {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": rpc.format("query/listConversations"),
                    "params": {"limit": "5"},
                }
            ),
            json_type,
            (-32602, "limit"),
        ),
    ]
    return cases


async def test_every_face_answers_hostile_input_alike_on_both_stores_and_writes_nothing(
    client: httpx.AsyncClient, admin_key: str, server_state: ServerState
) -> None:
    created = await client.post(
        "/v1/conversations", json={"action": "ECHO"}, headers=auth(admin_key)
    )
    uuid = created.json()["uuid"]
    before = await _rows(server_state)
    answers: dict[str, tuple[int, str | None]] = {}
    expected: dict[str, tuple[int, str]] = {}
    for name, method, path, body, content_type, wanted in _cases(uuid):
        headers = {**auth(admin_key), "content-type": content_type}
        response = await client.request(method, path, content=body, headers=headers)
        answers[name] = _answer(response)
        expected[name] = wanted
    assert answers == expected
    assert await _rows(server_state) == before


async def test_the_facade_refuses_the_same_inputs_naming_the_parameter(
    server_state: ServerState,
) -> None:
    ph = server_state.facade("default")
    before = await _rows(server_state)
    scope = MemoryScope("user", user_id="u1")
    calls: Sequence[tuple[Any, str]] = [
        (lambda: ph.query.get_conversation(NUL), "uuid"),
        (lambda: ph.command.cancel(NUL), "uuid"),
        (lambda: ph.query.find_action_by_code(NUL), "code"),
        (lambda: ph.command.start_conversation(action=NUL), "action"),
        (lambda: ph.memory.add(SURROGATE, scope), "content"),
        (lambda: ph.memory.add("c", MemoryScope("user", user_id=NUL)), "scope.user_id"),
        (lambda: ph.memory.search(SURROGATE, scope), "query"),
        (lambda: ph.memory.add("c", scope, metadata={"n": float("nan")}), "metadata.n"),
        (lambda: ph.query.list_conversations(limit=10**30), "limit"),
        (lambda: ph.knowledge.search(NUL, "q"), "collection"),
    ]
    for call, field in calls:
        with pytest.raises(InvalidFieldError) as caught:
            await call()
        assert caught.value.field == field
    huge = f"configurations:\n  - code: BIG\n    name: n\n    max_tokens: {HUGE}\n"
    with pytest.raises(CatalogValidationError) as refused:
        await ph.catalog.import_text(huge, source="body")
    assert [(i.field, i.line) for i in refused.value.issues] == [
        ("configurations[0].max_tokens", 4)
    ]
    assert await _rows(server_state) == before


async def test_the_facade_refuses_a_python_callers_wrong_types_alike_on_both_stores(
    server_state: ServerState,
) -> None:
    # Unchecked, these reached the database: SQLite stored a bool or a 2 MB
    # text as a conversation's uuid and bytes as its memory id, where
    # PostgreSQL failed with a raw driver error; bytes in input data failed
    # deep in the turn with a TypeError from json.
    ph = server_state.facade("default")
    before = await _rows(server_state)
    calls: Sequence[tuple[Any, str, str]] = [
        (lambda: ph.command.start_and_send(True, action="ECHO"), "text", "must be a string,"),  # pyright: ignore[reportArgumentType]
        (
            lambda: ph.command.start_and_send("hi", action=b"ECHO"),  # pyright: ignore[reportArgumentType]
            "action",
            "must be a string, not bytes",
        ),
        (
            lambda: ph.command.start_and_send("hi", action="ECHO", agent=True),  # pyright: ignore[reportArgumentType]
            "agent",
            "must be a string or None, not bool",
        ),
        (
            lambda: ph.command.start_and_send("hi", action="ECHO", memory_id=b"m"),  # pyright: ignore[reportArgumentType]
            "memory_id",
            "must be a string or None, not bytes",
        ),
        (
            lambda: ph.command.start_and_send("hi", action="ECHO", conversation_uuid=True),  # pyright: ignore[reportArgumentType]
            "conversation_uuid",
            "must be a string or None, not bool",
        ),
        (
            lambda: ph.command.start_and_send("hi", action="ECHO", conversation_uuid="x" * 100_000),
            "conversation_uuid",
            "is not a UUID in its usual form",
        ),
        (
            lambda: ph.command.start_and_send(
                "hi", action="ECHO", conversation_uuid="123E4567-E89B-12D3-A456-426614174000"
            ),
            "conversation_uuid",
            "is not a UUID in its usual form",
        ),
        (
            lambda: ph.command.start_and_send(
                "hi", action="ECHO", input_data={"document": {"pages": [b"%PDF"]}}
            ),
            "input_data.document.pages[0]",
            "must be a JSON value",
        ),
        (
            lambda: ph.command.start_and_send("hi", action="ECHO", input_data={1: "one"}),  # pyright: ignore[reportArgumentType]
            "input_data (a key)",
            "must be a string, not int",
        ),
        (lambda: ph.query.list_conversations(limit=True), "limit", "must be an integer"),
        (lambda: ph.query.list_conversations(limit="10"), "limit", "must be an integer"),  # pyright: ignore[reportArgumentType]
    ]
    for call, field, problem in calls:
        with pytest.raises(InvalidFieldError) as caught:
            await call()
        assert caught.value.field == field
        assert problem in str(caught.value), str(caught.value)
    assert await _rows(server_state) == before


def _cli(url: str, *args: str) -> Result:
    return CliRunner().invoke(cli_app, ["--database-url", url, *args])


async def test_the_cli_prints_one_line_and_exits_2_for_the_same_inputs(
    server_state: ServerState, database_url: str, tmp_path: Path
) -> None:
    before = await _rows(server_state)
    catalog = tmp_path / "huge.yaml"
    catalog.write_text(f"configurations:\n  - code: BIG\n    name: n\n    max_tokens: {HUGE}\n")
    runs = {
        "import": (("catalog", "import", str(catalog)), "configurations[0].max_tokens"),
        "metadata": (
            (
                "memory",
                "add",
                "c",
                "--scope",
                "user",
                "--user",
                "u",
                "--metadata",
                '{"n": ' + HUGE + "}",
            ),
            "metadata.n",
        ),
        "show": (("conversations", "show", NUL), "uuid"),
        "memory": (("memory", "add", SURROGATE, "--scope", "user", "--user", "u"), "content"),
    }
    for name, (args, field) in runs.items():
        result = await anyio.to_thread.run_sync(_cli, database_url, *args)
        assert result.exit_code == 2, (name, result.output)
        assert "Traceback" not in result.output, name
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and field in lines[0], (name, result.stderr)
    assert await _rows(server_state) == before


@pytest.fixture
async def base_url(app: FastAPI) -> AsyncIterator[str]:
    async with serve_on_loopback(app) as url:
        yield url


async def test_the_mcp_face_refuses_the_same_inputs_as_tool_errors(
    base_url: str, api_key: str, server_state: ServerState
) -> None:
    before = await _rows(server_state)
    headers = {"Authorization": f"Bearer {api_key}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        opened = streamable_http_client(f"{base_url}/mcp", http_client=http)
        async with Client(opened, mode="legacy") as client:
            calls = [
                ("action_ECHO", {"message": NUL, "input": "x"}),
                ("action_ECHO", {"message": "hi", "input": NUL}),
                # A lookup key: PostgreSQL failed on it where SQLite found nothing.
                ("pilothouse_answer", {"conversation_uuid": NUL, "answers": {"q": "a"}}),
            ]
            for tool, arguments in calls:
                result = await client.call_tool(tool, arguments)
                assert result.is_error, tool
                first = result.content[0]
                assert isinstance(first, mt.TextContent)
                assert "which cannot be stored" in first.text, (tool, first.text)
    assert await _rows(server_state) == before


async def test_a_rest_upload_reports_a_binary_file_and_writes_the_valid_one(
    client: httpx.AsyncClient, admin_key: str, server_state: ServerState
) -> None:
    catalog = (
        CatalogBuilder(scripted=False)
        .add("vector_stores", code="EMBED")
        .add("document_collections", code="HANDBOOK", store="EMBED", collection_name="handbook")
    )
    await server_state.pilothouse.catalog.import_text(catalog.yaml())
    base = "/v1/knowledge/collections/HANDBOOK"
    upload = await client.post(
        f"{base}/documents",
        files=[
            ("files", ("parking.md", b"# Parking\n\nVisitors park in lot B.", "text/markdown")),
            ("files", ("nul.txt", b"Lunch\x00 is at noon.", "text/plain")),
        ],
        headers=auth(admin_key),
    )
    assert upload.status_code == 200, upload.text
    documents = {d["source"]: d for d in upload.json()["documents"]}
    assert documents["parking.md"]["status"] == "added"
    assert documents["nul.txt"]["status"] == "failed"
    assert "a binary file, not text" in documents["nul.txt"]["error"]
    listed = await client.get(f"{base}/documents", headers=auth(admin_key))
    assert [d["source"] for d in listed.json()["items"]] == ["parking.md"]


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ({"useChatMemory": "true", "persistChatLog": "false"}, (True, False)),
        ({"useChatMemory": "false", "persistChatLog": "true"}, (False, True)),
        ({"useChatMemory": True, "persistChatLog": ""}, (True, None)),
        ({"persistChatLog": None}, (False, None)),
    ],
)
def test_the_connectors_text_forms_stay_accepted(
    flags: dict[str, Any], expected: tuple[bool, bool | None]
) -> None:
    # A BPMN input parameter is text (seed 003): "true"/"false", numbers as text.
    body = parse_invoke(
        _json(
            {
                "agentName": "x",
                "message": "hi",
                "temperature": "0.7",
                "chatMemoryMaxMessages": "20",
                "pgPort": "5432",
                "minRagScore": "0.7",
                **flags,
            }
        )
    )
    assert (body.use_chat_memory, body.persist_chat_log) == expected
    assert (body.temperature, body.chat_memory_max_messages, body.pg_port) == (0.7, 20, 5432)
