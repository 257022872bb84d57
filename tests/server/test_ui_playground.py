"""The playground in the browser UI, through the app (scripted model, SQLite file).

Login by cookie, the page and its fragments, a streamed chat that names its
conversation, per-prompt edits as forks (the parent's audit rows untouched),
questions answered inline, custom-schema tool results, export and import,
settings written to the catalog with optimistic concurrency.
"""

from __future__ import annotations

import json
import re
from decimal import Decimal

import httpx
import pytest
from server_helpers import parse_sse

from pilothouse.server._state import ServerState
from pilothouse.server._ui._base import plain_decimal
from pilothouse.server._ui._trace import status_name
from pilothouse.testing import Reply, ScriptedModel, ToolCall

pytestmark = pytest.mark.anyio


async def _login(client: httpx.AsyncClient, key: str) -> None:
    # A browser names the page's origin on every POST; the UI refuses any other.
    client.headers["Origin"] = "http://testserver"
    response = await client.post("/login", data={"api_key": key})
    assert response.status_code == 303, response.text
    assert response.headers["location"] == "/playground"
    cookie = response.headers["set-cookie"]
    assert "httponly" in cookie.lower() and "samesite=strict" in cookie.lower()


async def _chat(client: httpx.AsyncClient, **body: object) -> list[tuple[str, dict[str, object]]]:
    response = await client.post("/ui/chat", json=body)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/event-stream")
    return parse_sse(response.text)


async def test_pages_need_a_login_and_a_bad_key_is_refused(
    client: httpx.AsyncClient, api_key: str
) -> None:
    page = await client.get("/playground")
    assert page.status_code == 303 and page.headers["location"] == "/login"
    assert (await client.get("/")).headers["location"] == "/login"
    client.headers["Origin"] = "http://testserver"
    wrong = await client.post("/login", data={"api_key": "ph_nope_nope"})
    assert wrong.status_code == 401
    assert "unknown or revoked" in wrong.text
    empty = await client.post("/login", data={"api_key": "  "})
    assert empty.status_code == 401 and "Enter an API key" in empty.text
    await _login(client, api_key)
    assert (await client.get("/")).headers["location"] == "/playground"
    page = await client.get("/playground")
    assert page.status_code == 200
    # Targets of the example catalog, with labels for the controls.
    assert 'value="action:ECHO"' in page.text and 'value="agent:WRITER"' in page.text
    assert '<label for="prompt">Prompt</label>' in page.text
    out = await client.post("/logout")
    assert out.status_code == 303
    assert (await client.get("/playground")).status_code == 303


async def test_a_streamed_chat_names_the_conversation_after_its_first_prompt(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    await _login(client, api_key)
    scripted.script.steps.append(Reply("Hello there, friend."))
    events = await _chat(client, target="action:ECHO", text="Say hello to my friend")
    names = [name for name, _ in events]
    assert names[0] == "conversation" and "delta" in names
    assert names[-2:] == ["finished", "named"]
    uuid = str(events[0][1]["uuid"])
    finished = dict(events[-2][1])
    assert finished["status"] == "CO" and finished["output"] == "Hello there, friend."
    assert events[-1][1]["title"] == "Say hello to my friend"
    listed = await client.get("/ui/conversations", params={"c": uuid})
    assert "Say hello to my friend" in listed.text
    chat = await client.get(f"/ui/conversations/{uuid}")
    assert "Hello there, friend." in chat.text and "Edit prompt" in chat.text
    page = await client.get("/playground", params={"c": uuid})
    assert page.status_code == 200 and 'value="action:ECHO" selected' in page.text
    assert "Hello there, friend." in page.text
    missing = await client.get("/playground", params={"c": "no-such-conversation"})
    assert missing.status_code == 200 and "The first prompt names the conversation" in missing.text
    # A second turn continues the same conversation and keeps its title.
    scripted.script.steps.append(Reply("Second."))
    events = await _chat(client, conversation=uuid, target="action:ECHO", text="Again")
    assert events[-1][1]["title"] == "Say hello to my friend"
    ph = server_state.pilothouse
    messages = await ph.query.get_conversation_messages(uuid)
    assert [m.content for m in messages if m.role.value != "SY"] == [
        "Say hello to my friend",
        "Hello there, friend.",
        "Again",
        "Second.",
    ]


async def test_a_refused_turn_ends_the_stream_with_an_error_event(
    client: httpx.AsyncClient, api_key: str
) -> None:
    await _login(client, api_key)
    events = await _chat(client, target="action:NOPE", text="hi")
    assert events[-1][0] == "error"
    assert "NOPE" in str(events[-1][1]["detail"])
    events = await _chat(client, target="action:ECHO", text="hi", options={"warmth": 1})
    assert events[-1] == ("error", dict(events[-1][1]))
    assert "options.warmth" in str(events[-1][1]["detail"])


async def _conversation(
    client: httpx.AsyncClient, scripted: ScriptedModel, *turns: tuple[str, str]
) -> str:
    uuid: str | None = None
    for prompt, answer in turns:
        scripted.script.steps.append(Reply(answer))
        body: dict[str, object] = {"target": "action:ECHO", "text": prompt}
        if uuid:
            body["conversation"] = uuid
        events = await _chat(client, **body)
        uuid = str(events[0][1]["uuid"])
    assert uuid is not None
    return uuid


async def _sequences(server_state: ServerState, uuid: str) -> list[tuple[int, str, str]]:
    messages = await server_state.pilothouse.query.get_conversation_messages(uuid)
    # The recorded system prompts (SY) are audit records, not chat.
    return [(m.sequence, m.role.value, m.content) for m in messages if m.role.value != "SY"]


async def test_editing_a_prompt_forks_and_never_changes_the_recorded_messages(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    await _login(client, api_key)
    uuid = await _conversation(client, scripted, ("one", "A1"), ("two", "A2"), ("three", "A3"))
    before = await _sequences(server_state, uuid)
    second = next(seq for seq, role, text in before if text == "two")
    ph = server_state.pilothouse

    # Save only: the prompt's text changes, the answers stay.
    saved = await client.post(
        f"/ui/conversations/{uuid}/prompts/{second}", data={"op": "save", "text": "TWO"}
    )
    assert saved.status_code == 200, saved.text
    fork = saved.json()["conversation"]
    assert fork != uuid and saved.json()["submit"] is None
    assert [t for _, _, t in await _sequences(server_state, fork)] == [
        "one", "A1", "TWO", "A2", "three", "A3",
    ]  # fmt: skip
    # The parent is as it was, hidden from the list, and both timelines record the fork.
    assert await _sequences(server_state, uuid) == before
    assert (await ph.history.get(uuid)).hidden
    child = await ph.history.get(fork)
    assert child.parent_uuid == uuid and child.title == "one"
    parent_view = await ph.query.get_transcript(uuid)
    assert any(e.kind.value == "fork" and e.data["fork"] == fork for e in parent_view.timeline)
    listed = (await client.get("/ui/conversations")).text
    assert fork in listed and uuid not in listed

    # Submit: the prompt and everything after it are replaced by the new turn.
    # The fork numbers its own messages (its recorded system prompts are its own).
    in_fork = next(seq for seq, _, text in await _sequences(server_state, fork) if text == "TWO")
    submit = await client.post(
        f"/ui/conversations/{fork}/prompts/{in_fork}", data={"op": "submit", "text": "deux"}
    )
    body = submit.json()
    assert body["submit"] == "deux"
    assert [t for _, _, t in await _sequences(server_state, body["conversation"])] == ["one", "A1"]
    scripted.script.steps.append(Reply("B2"))
    await _chat(client, conversation=body["conversation"], target="action:ECHO", text="deux")
    edited = body["conversation"]
    assert [t for _, _, t in await _sequences(server_state, edited)] == ["one", "A1", "deux", "B2"]

    # Delete one prompt (and its answer), then delete with all following.
    deleted = await client.post(f"/ui/conversations/{uuid}/prompts/{second}", data={"op": "delete"})
    assert [t for _, _, t in await _sequences(server_state, deleted.json()["conversation"])] == [
        "one", "A1", "three", "A3",
    ]  # fmt: skip
    cut = await client.post(
        f"/ui/conversations/{uuid}/prompts/{second}", data={"op": "delete_following"}
    )
    assert [t for _, _, t in await _sequences(server_state, cut.json()["conversation"])] == [
        "one",
        "A1",
    ]
    # Submit again appends the same prompt to the same conversation: no fork.
    in_edited = next(s for s, _, text in await _sequences(server_state, edited) if text == "deux")
    again = await client.post(
        f"/ui/conversations/{edited}/prompts/{in_edited}", data={"op": "resubmit"}
    )
    assert again.json() == {"conversation": edited, "submit": "deux"}
    assert await _sequences(server_state, uuid) == before


async def test_prompt_edits_refuse_what_is_no_prompt(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    await _login(client, api_key)
    uuid = await _conversation(client, scripted, ("one", "A1"))
    # 1 is the recorded system prompt (SY), 2 the prompt, 3 its answer.
    answer_seq = 3
    refused = await client.post(
        f"/ui/conversations/{uuid}/prompts/{answer_seq}", data={"op": "delete"}
    )
    assert refused.status_code == 422
    assert "no prompt" in refused.json()["detail"]
    empty = await client.post(
        f"/ui/conversations/{uuid}/prompts/2", data={"op": "save", "text": ""}
    )
    assert empty.status_code == 422 and "empty" in empty.json()["detail"]
    unknown = await client.post(f"/ui/conversations/{uuid}/prompts/2", data={"op": "zap"})
    assert unknown.status_code == 422


async def test_a_question_is_answered_inline(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    await _login(client, api_key)
    question = {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]}
    scripted.script.steps.append(ToolCall("AskUserQuestion", question, call_id="q1"))
    events = await _chat(client, target="action:ECHO", text="Order a shirt")
    uuid = str(events[0][1]["uuid"])
    assert dict(events[-2][1])["status"] == "WA"
    chat = (await client.get(f"/ui/conversations/{uuid}")).text
    assert "Which size?" in chat and 'name="answer:size"' in chat and 'value="M"' in chat
    scripted.script.steps.append(Reply("Size M it is."))
    answered = await client.post(f"/ui/conversations/{uuid}/answers", data={"answer:size": "M"})
    assert answered.status_code == 200, answered.text
    assert answered.json()["status"] == "CO"
    chat = (await client.get(f"/ui/conversations/{uuid}")).text
    assert "Size M it is." in chat and 'name="answer:size"' not in chat


def _turn_lines(html: str) -> list[str]:
    return re.findall(r'<p class="turn-meta turn-cost">(.*?)</p>', html)


def _line(result: dict[str, object]) -> str:
    """The line the live chat shows for a finished turn (playground.js), from its result."""
    cost = plain_decimal(result["cost"])
    return (
        f"This turn: {result['input_tokens']} in / {result['output_tokens']} out tokens"
        f" · cost ${cost} · {status_name(result['status'])}"
    )


async def test_each_turn_shows_its_tokens_and_cost_after_a_reload(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    await _login(client, api_key)
    ph = server_state.pilothouse
    model = await ph.catalog.get("models", "SCRIPTEDM")
    # Priced, so every turn has a cost of its own (per million tokens).
    await ph.catalog.update(
        "models",
        "SCRIPTEDM",
        {**model.document, "input_price": 2.5, "output_price": 10},
        expected_version=model.version,
    )
    scripted.script.steps.append(Reply("A priced answer of six words.", input_tokens=120))
    first = await _chat(client, target="action:ECHO", text="First question")
    uuid = str(first[0][1]["uuid"])
    question = {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]}
    scripted.script.steps.append(ToolCall("AskUserQuestion", question, call_id="q9"))
    second = await _chat(client, conversation=uuid, target="action:ECHO", text="Order a shirt")
    scripted.script.steps.append(Reply("Size M it is.", input_tokens=300))
    answered = await client.post(f"/ui/conversations/{uuid}/answers", data={"answer:size": "M"})
    assert answered.status_code == 200, answered.text
    results = [
        dict(first[-2][1]),
        dict(second[-2][1]),
        answered.json(),
    ]
    assert [r["status"] for r in results] == ["CO", "WA", "CO"]
    assert all(Decimal(str(r["cost"])) > 0 for r in results)
    # The reloaded chat shows each turn's line, in order, as the live chat showed it.
    chat = (await client.get(f"/ui/conversations/{uuid}")).text
    assert _turn_lines(chat) == [_line(r) for r in results]
    # From the records: the last message each turn wrote carries its usage.
    recorded = [
        m.data["turn_usage"]
        for m in await ph.query.get_conversation_messages(uuid)
        if m.data and "turn_usage" in m.data
    ]
    assert recorded == [
        {
            "input_tokens": r["input_tokens"],
            "output_tokens": r["output_tokens"],
            "cost": r["cost"],
            "usage_estimated": r["usage_estimated"],
            "status": r["status"],
        }
        for r in results
    ]
    # The header's totals are the turns' sums.
    view = await ph.query.get_transcript(uuid)
    assert view.estimated_cost == sum(Decimal(str(r["cost"])) for r in results)
    assert f"cost ${plain_decimal(view.estimated_cost)}" in chat


@pytest.mark.parametrize(
    ("recorded", "shown"),
    [
        ("7.5E-7", "0.00000075"),
        ("0.00015000", "0.00015"),
        ("0E-8", "0"),
        ("0.000000", "0"),
        ("12.50", "12.5"),
        ("3", "3"),
        ("1.5E+2", "150"),
    ],
)
def test_costs_are_shown_as_plain_decimals(recorded: str, shown: str) -> None:
    assert plain_decimal(recorded) == shown
    assert plain_decimal(Decimal(recorded)) == shown


async def test_export_then_import_gives_a_new_conversation_with_the_same_messages(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    await _login(client, api_key)
    uuid = await _conversation(client, scripted, ("Export me", "Sure."))
    exported = await client.get(f"/ui/conversations/{uuid}/export")
    assert exported.status_code == 200
    assert "attachment" in exported.headers["content-disposition"]
    document = exported.json()
    assert document["format"] == "pilothouse.conversation/1"
    assert document["title"] == "Export me"
    imported = await client.post(
        "/ui/conversations/import",
        files={"file": ("c.json", json.dumps(document), "application/json")},
    )
    assert imported.status_code == 303
    new_uuid = imported.headers["location"].split("c=")[1]
    assert new_uuid != uuid
    assert [t for _, _, t in await _sequences(server_state, new_uuid)] == ["Export me", "Sure."]
    view = await server_state.pilothouse.query.get_transcript(new_uuid)
    assert any(e.kind.value == "import" and e.data["source_uuid"] == uuid for e in view.timeline)
    # The imported conversation goes on like any other.
    scripted.script.steps.append(Reply("Continued."))
    events = await _chat(client, conversation=new_uuid, target="action:ECHO", text="More")
    assert dict(events[-2][1])["output"] == "Continued."

    bad = await client.post(
        "/ui/conversations/import", files={"file": ("c.json", b"{not json", "application/json")}
    )
    assert bad.status_code == 422 and "not a JSON export" in bad.text
    wrong = await client.post(
        "/ui/conversations/import",
        files={"file": ("c.json", json.dumps({"format": "x"}), "application/json")},
    )
    assert wrong.status_code == 422 and "format" in wrong.text


async def test_rename_delete_and_the_timeline_viewer(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    await _login(client, api_key)
    uuid = await _conversation(client, scripted, ("first", "ok"))
    renamed = await client.post(f"/ui/conversations/{uuid}/rename", data={"title": "Shirts"})
    assert renamed.status_code == 200 and "Shirts" in renamed.text
    blank = await client.post(f"/ui/conversations/{uuid}/rename", data={"title": "   "})
    assert blank.status_code == 422
    timeline = await client.get(f"/ui/conversations/{uuid}/timeline")
    assert "rename" in timeline.text and "request" in timeline.text
    deleted = await client.post(f"/ui/conversations/{uuid}/delete")
    assert deleted.status_code == 200 and uuid not in deleted.text
    # Hidden, not erased: the transcript and its timeline are still there.
    view = await server_state.pilothouse.query.get_transcript(uuid)
    assert [m.content for m in view.messages if m.role.value != "SY"] == ["first", "ok"]
    assert view.timeline[-1].kind.value == "hide"


async def test_settings_update_and_duplicate_the_configuration_optimistically(
    client: httpx.AsyncClient, admin_key: str, server_state: ServerState
) -> None:
    await _login(client, admin_key)
    panel = await client.get("/ui/settings", params={"target": "action:ECHO"})
    assert "configuration" in panel.text and 'id="opt-temperature"' in panel.text
    version = int(re.search(r'name="version" value="(\d+)"', panel.text).group(1))  # type: ignore[union-attr]
    form = {"target": "action:ECHO", "version": str(version), "temperature": "0.7"}
    updated = await client.post("/ui/configurations/DFLT", data=form)
    assert updated.status_code == 200 and "updated" in updated.text
    stored = await server_state.pilothouse.catalog.get("configurations", "DFLT")
    assert stored.document["temperature"] == 0.7 and stored.version == version + 1
    stale = await client.post("/ui/configurations/DFLT", data=form)
    assert stale.status_code == 409 and "changed by someone else" in stale.text
    duplicate = await client.post(
        "/ui/configurations/DFLT/duplicate",
        data={"target": "action:ECHO", "version": "0", "temperature": "1.1", "new_code": "WARM"},
    )
    assert "WARM created" in duplicate.text
    copy = await server_state.pilothouse.catalog.get("configurations", "WARM")
    assert copy.document["temperature"] == 1.1
    again = await client.post(
        "/ui/configurations/DFLT/duplicate",
        data={"target": "action:ECHO", "new_code": "WARM"},
    )
    assert "exists already" in again.text


async def test_settings_writes_need_an_admin_key(client: httpx.AsyncClient, api_key: str) -> None:
    await _login(client, api_key)
    panel = await client.get("/ui/settings", params={"target": "action:ECHO"})
    assert "Update configuration" not in panel.text
    refused = await client.post("/ui/configurations/DFLT", data={"version": "1"})
    assert refused.status_code == 403


async def test_system_prompt_and_template_loader(
    client: httpx.AsyncClient, admin_key: str, server_state: ServerState
) -> None:
    await _login(client, admin_key)
    shown = await client.get(
        "/ui/system-prompt", params={"target": "action:SUMBRAND", "instruction": "Answer in JSON."}
    )
    assert "readonly" in shown.text and "Answer in JSON." in shown.text
    assert "{document}" in shown.text
    bare = await client.get("/ui/system-prompt", params={"target": "model:QWEN05"})
    assert "bare model" in bare.text
    loaded = await client.get("/ui/template", params={"target": "action:SUMBRAND"})
    assert 'data-placeholder="document"' in loaded.text
    entry = await server_state.pilothouse.catalog.get("actions", "SUMBRAND")
    saved = await client.post(
        "/ui/template/SUMBRAND",
        data={"prompt": "Summarize {document} briefly.", "version": str(entry.version)},
    )
    assert "saved" in saved.text
    stale = await client.post(
        "/ui/template/SUMBRAND", data={"prompt": "x {document}", "version": str(entry.version)}
    )
    assert stale.status_code == 409
    after = await server_state.pilothouse.catalog.get("actions", "SUMBRAND")
    assert after.document["prompt"] == "Summarize {document} briefly."


@pytest.mark.parametrize(
    "path",
    [
        "/static/vendor/htmx.min.js",
        "/static/vendor/alpine.min.js",
        "/static/vendor/swagger-ui-bundle.js",
        "/static/vendor/redoc.standalone.js",
        "/static/app.css",
        "/static/playground.js",
    ],
)
async def test_assets_are_served_locally(client: httpx.AsyncClient, path: str) -> None:
    response = await client.get(path)
    assert response.status_code == 200 and len(response.content) > 1000


async def test_api_docs_load_no_cdn(client: httpx.AsyncClient) -> None:
    for path in ("/docs", "/redoc"):
        page = await client.get(path)
        assert page.status_code == 200
        assert "/static/vendor/" in page.text
        assert "cdn" not in page.text.lower() and "googleapis" not in page.text


async def test_a_custom_schema_tool_result_is_submitted_inline(
    client: httpx.AsyncClient, admin_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    ph = server_state.pilothouse
    await ph.catalog.create(
        "tools",
        {
            "code": "INVOICE",
            "name": "extract_invoice",
            "kind": "schema",
            "description": "The application stores the invoice.",
            "input_schema": {"type": "object", "properties": {"total": {"type": "number"}}},
        },
    )
    await ph.catalog.create(
        "actions",
        {
            "code": "BILL",
            "model": "SCRIPTEDM",
            "configuration": "DFLT",
            "prompt": "File invoices: {input}",
            "tools": ["INVOICE"],
        },
    )
    await _login(client, admin_key)
    scripted.script.steps.append(ToolCall("extract_invoice", {"total": 42}, call_id="i1"))
    events = await _chat(client, target="action:BILL", text="Total is 42")
    uuid = str(events[0][1]["uuid"])
    finished = dict(events[-2][1])
    assert finished["finish_reason"] == "TC"
    assert finished["tool_calls"] == [
        {"id": "i1", "name": "extract_invoice", "arguments": {"total": 42}}
    ]
    chat = (await client.get(f"/ui/conversations/{uuid}")).text
    assert "Result of extract_invoice" in chat and 'name="call_id" value="i1"' in chat
    scripted.script.steps.append(Reply("Stored, thanks."))
    done = await client.post(
        f"/ui/conversations/{uuid}/tool-results",
        data={"call_id": "i1", "result": '{"stored": true}'},
    )
    assert done.status_code == 200, done.text
    assert done.json()["output"] == "Stored, thanks."
    assert '{"stored": true}' in str(scripted.requests[-1].messages[-1])
    chat = (await client.get(f"/ui/conversations/{uuid}")).text
    assert "Result of extract_invoice" not in chat and "Stored, thanks." in chat
    again = await client.post(
        f"/ui/conversations/{uuid}/tool-results", data={"call_id": "i1", "result": "plain"}
    )
    assert again.status_code == 409


async def test_a_bare_model_chats_through_an_adhoc_run(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    await _login(client, api_key)
    scripted.script.steps.append(Reply("Bare hello, streamed in pieces."))
    events = await _chat(client, target="model:SCRIPTEDM", text="Hi model", instruction="Be terse.")
    uuid = str(events[0][1]["uuid"])
    names = [name for name, _ in events]
    # Streamed as a governed turn: the status, the model's pieces one by one, the result.
    assert names == [
        "conversation",
        "status",
        *["delta"] * 5,
        "status",
        "finished",
        "named",
    ], names
    deltas = [str(data["text"]) for name, data in events if name == "delta"]
    assert deltas == ["Bare ", "hello, ", "streamed ", "in ", "pieces."]
    finished = next(data for name, data in events if name == "finished")
    assert finished["status"] == "CO" and finished["output"] == "Bare hello, streamed in pieces."
    assert {data.get("conversation_uuid") for name, data in events if name == "delta"} == {uuid}
    # Just the model: no tool is offered (not even AskUserQuestion).
    assert [t.name for t in scripted.requests[0].info.function_tools] == []
    scripted.script.steps.append(Reply("Again."))
    events = await _chat(
        client,
        conversation=uuid,
        target="model:SCRIPTEDM",
        text="More",
        options={"temperature": 0.3},
    )
    assert events[0][1]["uuid"] == uuid
    page = await client.get("/playground", params={"c": uuid})
    assert 'value="model:SCRIPTEDM" selected' in page.text
    assert _line(dict(finished)) in _turn_lines(page.text)
    messages = await server_state.pilothouse.query.get_conversation_messages(uuid)
    # Each ad-hoc run records its system prompt (with the extra one) before the turn.
    assert [m.content for m in messages if m.role.value != "SY"] == [
        "Hi model",
        "Bare hello, streamed in pieces.",
        "More",
        "Again.",
    ]
    assert "Be terse." in next(m.content for m in messages if m.role.value == "SY")


async def test_edit_prompt_with_template_loads_the_values_it_was_sent_with(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    await _login(client, api_key)
    scripted.script.steps.append(Reply("A summary."))
    events = await _chat(
        client, target="action:SUMBRAND", text="Summarize.", input={"document": "Acme rockets"}
    )
    uuid = str(events[0][1]["uuid"])
    chat = (await client.get(f"/ui/conversations/{uuid}")).text
    assert "Edit prompt with template" in chat
    loaded = await client.get(
        "/ui/template", params={"target": "action:SUMBRAND", "c": uuid, "sequence": 2}
    )
    assert re.search(r'data-placeholder="document"[^>]*>Acme rockets</textarea>', loaded.text)
    # A prompt sent without template values offers the plain edit only.
    echo = await _conversation(client, scripted, ("plain", "ok"))
    assert "Edit prompt with template" not in (await client.get(f"/ui/conversations/{echo}")).text


async def test_a_bare_models_chat_exports_and_imports_back(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    await _login(client, api_key)
    scripted.script.steps.append(Reply("Apples are red."))
    events = await _chat(client, target="model:SCRIPTEDM", text="Name a fruit.")
    uuid = str(events[0][1]["uuid"])
    exported = await client.get(f"/ui/conversations/{uuid}/export")
    document = exported.json()
    assert document["conversation"]["action_code"] == "INVOKE"
    imported = await client.post(
        "/ui/conversations/import",
        files={"file": ("c.json", exported.content, "application/json")},
    )
    assert imported.status_code == 303, imported.text
    page = await client.get(imported.headers["location"])
    assert "Apples are red." in page.text, page.text
    assert 'value="model:SCRIPTEDM" selected' in page.text
    # The system prompt the run recorded is shown once.
    assert page.text.count("<summary>System prompt</summary>") == 1


async def test_a_fork_shows_its_system_prompt_once(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    await _login(client, api_key)
    scripted.script.steps.extend([Reply("A blue shirt."), Reply("A red one.")])
    events = await _chat(client, target="action:ECHO", text="A shirt, please.")
    uuid = str(events[0][1]["uuid"])
    page = await client.get("/playground", params={"c": uuid})
    sequence = re.search(r'data-sequence="(\d+)"', page.text).group(1)  # type: ignore[union-attr]
    edited = await client.post(
        f"/ui/conversations/{uuid}/prompts/{sequence}",
        data={"op": "submit", "text": "A red shirt."},
    )
    fork = edited.json()["conversation"]
    await _chat(client, conversation=fork, target="action:ECHO", text="A red shirt.")
    page = await client.get("/playground", params={"c": fork})
    assert "A red one." in page.text
    assert page.text.count("<summary>System prompt</summary>") == 1


async def test_each_prompt_shows_its_run_trace_in_words(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    await _login(client, api_key)
    scripted.script.steps.append(Reply("Traced."))
    events = await _chat(client, target="action:ECHO", text="Trace me")
    uuid = str(events[0][1]["uuid"])
    chat = (await client.get(f"/ui/conversations/{uuid}")).text
    trace = re.search(r'<details class="trace">(.*?)</details>', chat, re.S)
    assert trace is not None, chat
    steps = re.sub(r"<[^>]+>", " ", trace.group(1))
    assert "not started → running" in steps and "running → completed" in steps
    assert "model call" in steps and "model answer" in steps and " ms" in steps
    assert "out tokens" in steps and "{" not in steps  # words, not JSON
    assert _turn_lines(chat)[-1].endswith(" · completed")


async def test_view_code_gives_the_same_call_from_a_program(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel
) -> None:
    import html

    await _login(client, api_key)
    scripted.script.steps.extend([Reply("Coded."), Reply("Bare.")])
    events = await _chat(client, target="action:ECHO", text="It's <code>")
    chat = html.unescape((await client.get(f"/ui/conversations/{events[0][1]['uuid']}")).text)
    assert "<summary>View code</summary>" in chat
    assert "curl -s http://testserver/v1/conversations" in chat
    assert """-d '{"text": "It'\\''s <code>"}'""" in chat  # the shell quote survives
    assert "ph.command.start_conversation(\n        action='ECHO'" in chat
    assert "model='action:ECHO'" in chat and "os.environ['PILOTHOUSE_KEY']" in chat
    assert '"agentName": "playground"' in chat
    assert api_key not in chat  # the key is never written out
    events = await _chat(client, target="model:SCRIPTEDM", text="Hi")
    chat = html.unescape((await client.get(f"/ui/conversations/{events[0][1]['uuid']}")).text)
    assert "curl http://testserver/v1/invoke" in chat and "AdHocRun(name='playground'" in chat
    assert '"model": "SCRIPTEDM"' in chat
