"""The playground's RAG toggle, through the app: scripted model, packaged MiniLM.

Seed 004 ("Testing Semantic Index"): a RAG switch at the bottom of the
Settings panel chooses a collection; the "Q&A LLM" setting chooses either
the playground's current settings or the collection's own model, in which
case the playground's model and settings are not used.
"""

from __future__ import annotations

import httpx
import pytest
from server_helpers import ExamplesAnd, parse_sse

from database_templates import Seed
from pilothouse.server._state import ServerState
from pilothouse.testing import Reply, ScriptedModel
from pilothouse.types import MessageRole, TextDocument, TimelineEventView, TimelineKind

pytestmark = pytest.mark.anyio

EXTRA = """
models:
  - code: MINILM
    provider: SCRP
    model_name: all-MiniLM-L6-v2
    capabilities: [EM]
    dimension: 384
    max_input_tokens: 256
  - code: RETIRED
    provider: SCRP
    model_name: retired
    active: false
vector_stores:
  - code: EMBED
document_collections:
  - code: HANDBOOK
    name: Staff handbook
    store: EMBED
    collection_name: handbook
    similarity_threshold: 0.2
    qa_model: SCRIPTEDM
  - code: NOTES
    store: EMBED
    collection_name: notes
  - code: GONE
    store: EMBED
    collection_name: gone
    qa_model: RETIRED
  - code: OLD
    store: EMBED
    collection_name: old
    qa_model: SCRIPTEDM
    active: false
"""

TEXT = TextDocument(
    "hb:expenses",
    "# Expenses\n\nSubmit receipts within 30 days. Meals are reimbursed up to 25 EUR a day.",
    "markdown",
)


@pytest.fixture
def database_seed() -> Seed:
    return ExamplesAnd(EXTRA)


async def _login(client: httpx.AsyncClient, key: str) -> None:
    # A browser names the page's origin on every POST; the UI refuses any other.
    client.headers["Origin"] = "http://testserver"
    response = await client.post("/login", data={"api_key": key})
    assert response.status_code == 303, response.text


async def _chat(client: httpx.AsyncClient, **body: object) -> list[tuple[str, dict[str, object]]]:
    response = await client.post("/ui/chat", json=body)
    assert response.status_code == 200, response.text
    return parse_sse(response.text)


def _searched(timeline: list[TimelineEventView]) -> list[str]:
    found: list[str] = []
    for event in timeline:
        if event.kind is TimelineKind.RETRIEVAL and "searches" in event.data:
            found += [s["collection"] for s in event.data["searches"]]
    return found


async def test_the_settings_panel_offers_the_tenants_collections_and_their_own_models(
    client: httpx.AsyncClient, api_key: str
) -> None:
    await _login(client, api_key)
    page = (await client.get("/playground")).text
    assert "<legend>RAG</legend>" in page
    assert 'id="rag-on" role="switch"' in page
    assert '<label for="rag-collection">Document collection</label>' in page
    assert '<option value="HANDBOOK" data-qa-model="SCRIPTEDM">HANDBOOK — Staff handbook' in page
    assert '<option value="NOTES" data-qa-model="">NOTES</option>' in page
    assert 'value="OLD"' not in page  # inactive
    assert "<legend>Q&amp;A LLM</legend>" in page
    assert "Playground settings" in page and "Collection's model" in page


async def test_rag_with_playground_settings_searches_the_collection_for_an_action(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    ph = server_state.pilothouse
    await ph.knowledge.ingest("HANDBOOK", [TEXT])
    await _login(client, api_key)
    scripted.script.steps.append(Reply("Within 30 days [1]."))
    events = await _chat(
        client,
        target="action:ECHO",
        text="How long may I wait before handing in receipts?",
        options={"temperature": 0.2},
        rag={"collection": "HANDBOOK", "answer_with": "playground"},
    )
    names = [name for name, _ in events]
    assert names[:2] == ["rag", "conversation"] and names[-2:] == ["finished", "named"]
    assert events[0][1] == {"collection": "HANDBOOK", "answer_with": "playground", "model": None}
    uuid = str(events[1][1]["uuid"])
    view = await ph.query.get_transcript(uuid)
    assert view.action_code == "ECHO"
    assert _searched(view.timeline) == ["HANDBOOK"]
    # The model was given the collection's text as a numbered source.
    system = str(getattr(scripted.requests[-1].messages[0].parts[0], "content", ""))
    assert "Submit receipts within 30 days" in system
    chat = (await client.get(f"/ui/conversations/{uuid}")).text
    assert "RAG: searched collection <strong>HANDBOOK</strong>" in chat
    assert "answered with the playground settings" in chat
    timeline = (await client.get(f"/ui/conversations/{uuid}/timeline")).text
    assert "<td>retrieval</td>" in timeline and "hb:expenses" in timeline

    # Switching to the collection's model in that action's conversation starts an ad-hoc one.
    scripted.script.steps.append(Reply("25 EUR [1]."))
    own = await _chat(
        client,
        conversation=uuid,
        target="action:ECHO",
        text="Meals?",
        rag={"collection": "HANDBOOK", "answer_with": "collection"},
    )
    assert [name for name, _ in own][-2:] == ["finished", "named"], own
    adhoc = str(own[1][1]["uuid"])
    assert adhoc != uuid
    assert (await ph.query.get_transcript(adhoc)).action_code == "INVOKE"


async def test_rag_with_the_collections_model_runs_it_without_the_panels_settings(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    ph = server_state.pilothouse
    await ph.knowledge.ingest("HANDBOOK", [TEXT])
    await _login(client, api_key)
    scripted.script.steps.append(Reply("Meals up to 25 EUR [1]."))
    events = await _chat(
        client,
        target="action:ECHO",
        text="How much is reimbursed for meals?",
        rag={"collection": "HANDBOOK", "answer_with": "collection"},
    )
    assert events[0] == (
        "rag",
        {"collection": "HANDBOOK", "answer_with": "collection", "model": "SCRIPTEDM"},
    )
    uuid = str(events[1][1]["uuid"])
    assert events[-2][0] == "finished"
    view = await ph.query.get_transcript(uuid)
    # An ad-hoc run on the collection's model, not the ECHO action.
    assert view.action_code == "INVOKE"
    assert _searched(view.timeline) == ["HANDBOOK"]
    system = next(m for m in view.messages if m.role is MessageRole.SYSTEM)
    assert system.data is not None
    assert system.data["invoke"]["playground_rag"] == {
        "collection": "HANDBOOK",
        "answer_with": "collection",
    }
    assert "Answer the user" not in system.content  # ECHO's prompt is not used
    chat = (await client.get(f"/ui/conversations/{uuid}")).text
    assert "answered by the collection's model <strong>SCRIPTEDM</strong>" in chat

    # A second prompt continues that ad-hoc conversation.
    scripted.script.steps.append(Reply("Again [1]."))
    again = await _chat(
        client,
        conversation=uuid,
        target="action:ECHO",
        text="And for trains?",
        rag={"collection": "HANDBOOK", "answer_with": "collection"},
    )
    assert again[1][1]["uuid"] == uuid
    assert _searched((await ph.query.get_transcript(uuid)).timeline) == ["HANDBOOK", "HANDBOOK"]

    # The playground's sliders are refused rather than ignored.
    refused = await _chat(
        client,
        target="action:ECHO",
        text="x",
        options={"temperature": 0.5},
        rag={"collection": "HANDBOOK", "answer_with": "collection"},
    )
    assert refused[-1][0] == "error"
    assert "options: not used when the collection's model answers" in str(refused[-1][1]["detail"])


async def test_rag_on_a_bare_model_is_an_adhoc_run_with_the_collection(
    client: httpx.AsyncClient, api_key: str, scripted: ScriptedModel, server_state: ServerState
) -> None:
    ph = server_state.pilothouse
    await ph.knowledge.ingest("NOTES", [TEXT])
    await _login(client, api_key)
    scripted.script.steps.append(Reply("30 days [1]."))
    events = await _chat(
        client,
        target="model:SCRIPTEDM",
        text="receipts deadline",
        options={"temperature": 0.1},
        rag={"collection": "NOTES"},
    )
    assert events[0] == (
        "rag",
        {"collection": "NOTES", "answer_with": "playground", "model": "SCRIPTEDM"},
    )
    uuid = str(events[1][1]["uuid"])
    assert _searched((await ph.query.get_transcript(uuid)).timeline) == ["NOTES"]
    chat = (await client.get(f"/ui/conversations/{uuid}")).text
    assert "RAG: searched collection <strong>NOTES</strong>" in chat
    assert "by model <strong>SCRIPTEDM</strong>" in chat


async def test_rag_refusals_name_the_field(client: httpx.AsyncClient, api_key: str) -> None:
    await _login(client, api_key)
    cases = [
        ({"collection": "NOPE"}, "retrieval.collections[0]: 'NOPE' is not a document collection"),
        (
            {"collection": "NOTES", "answer_with": "collection"},
            "rag.answer_with: document collection 'NOTES' has no qa_model",
        ),
        (
            {"collection": "NOPE", "answer_with": "collection"},
            "rag.collection: 'NOPE' is not a document collection",
        ),
        (
            {"collection": "OLD", "answer_with": "collection"},
            "rag.collection: document collection 'OLD' is inactive",
        ),
        ({"collection": "OLD"}, "retrieval.collections[0]: document collection 'OLD' is inactive"),
        (
            {"collection": "GONE", "answer_with": "collection"},
            "rag.answer_with: the qa_model 'RETIRED' of collection 'GONE' is inactive",
        ),
    ]
    for rag, message in cases:
        events = await _chat(client, target="action:ECHO", text="x", rag=rag)
        assert events[-1][0] == "error", events
        assert message in str(events[-1][1]["detail"])
    bad = await client.post(
        "/ui/chat",
        json={"target": "action:ECHO", "text": "x", "rag": {"collection": "X", "answer_with": "x"}},
    )
    assert bad.status_code == 422


async def test_the_rest_catalog_reads_and_refuses_qa_model(
    client: httpx.AsyncClient, admin_key: str
) -> None:
    headers = {"Authorization": f"Bearer {admin_key}"}
    got = await client.get("/v1/catalog/document_collections/HANDBOOK", headers=headers)
    assert got.status_code == 200 and got.json()["qa_model"] == "SCRIPTEDM"
    bad = {"code": "EMQA", "store": "EMBED", "collection_name": "x", "qa_model": "MINILM"}
    response = await client.post("/v1/catalog/document_collections", json=bad, headers=headers)
    assert response.status_code == 422
    (error,) = response.json()["errors"]
    assert error["field"] == "qa_model"
    assert error["rule"].startswith("model 'MINILM' is an embedding model (capability EM)")


async def test_the_rest_api_refuses_an_unknown_or_inactive_collection_with_a_4xx(
    client: httpx.AsyncClient, api_key: str, server_state: ServerState
) -> None:
    headers = {"Authorization": f"Bearer {api_key}"}
    started = await client.post("/v1/conversations", json={"action": "ECHO"}, headers=headers)
    uuid = started.json()["uuid"]
    for codes, message in (
        (["NOPE"], "retrieval.collections[0]: 'NOPE' is not a document collection"),
        (["NOTES", "OLD"], "retrieval.collections[1]: document collection 'OLD' is inactive"),
    ):
        response = await client.post(
            f"/v1/conversations/{uuid}/messages",
            json={"text": "x", "runtimeConfig": {"retrieval": {"collections": codes}}},
            headers=headers,
        )
        assert 400 <= response.status_code < 500, response.text
        assert message in response.text
    # Nothing was written: the conversation never took a message.
    assert await server_state.pilothouse.query.get_conversation_messages(uuid) == []
