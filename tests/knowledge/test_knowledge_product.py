"""Knowledge in the product: ``ph.knowledge`` and the retrieval advisor of the turn.

The advisor is checked through what the scripted model is told (the numbered
sources in the system prompt) and what the timeline records (chunk ids,
scores, sources; nothing passing the threshold; the answer's citations).
Runs on SQLite and PostgreSQL (the ``database`` fixture), with the packaged
MiniLM.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pilothouse.api import Pilothouse, SyncPilothouse
from pilothouse.errors import NotFoundError, PilothouseError
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import CatalogBuilder, ScriptedModel
from pilothouse.types import (
    FileDocument,
    IngestProgress,
    MessageRole,
    ProcessStatus,
    TextDocument,
    TimelineKind,
)

pytestmark = pytest.mark.anyio

HANDBOOK = [
    TextDocument(
        "hb:travel",
        "# Travel\n\nBook trains for trips under four hours. Flights need a manager's approval.",
        "markdown",
        metadata={"department": "hr"},
    ),
    TextDocument(
        "hb:expenses",
        "# Expenses\n\nSubmit receipts within 30 days. Meals are reimbursed up to 25 EUR a day.",
        "markdown",
        metadata={"department": "finance"},
    ),
    TextDocument(
        "hb:security",
        "# Security\n\nLock your laptop when you leave your desk. Report lost badges at once.",
        "markdown",
        metadata={"department": "it"},
    ),
]


def _catalog() -> CatalogBuilder:
    return (
        CatalogBuilder()
        .add("vector_stores", code="EMBED")
        .add(
            "document_collections",
            code="HANDBOOK",
            store="EMBED",
            collection_name="handbook",
            similarity_threshold=0.25,
        )
        .add(
            "document_collections",
            code="STRICT",
            store="EMBED",
            collection_name="handbook",
            similarity_threshold=0.95,
        )
        .add(
            "models",
            code="MINILM",
            provider="LOCL",
            model_name="all-MiniLM-L6-v2",
            capabilities=["EM"],
            dimension=384,
            max_input_tokens=256,
        )
        .add(
            "document_collections",
            code="RETIRED",
            store="EMBED",
            collection_name="retired",
            active=False,
        )
        .provider("LOCL", kind="local")
        .action("ASK", prompt="Answer questions about the handbook.", collections=["HANDBOOK"])
        .action("ASKSTRICT", prompt="Answer strictly.", collections=["STRICT"])
        .action("PLAIN", prompt="Answer without documents.")
    )


@pytest.fixture
async def ph(database: Database) -> AsyncIterator[Pilothouse]:
    async with Pilothouse(Settings(), database=database) as facade:
        await _catalog().import_into(facade)
        yield facade


def _system(model: ScriptedModel, index: int = 0) -> str:
    """The system prompt of the model's request ``index``."""
    return str(getattr(model.requests[index].messages[0].parts[0], "content", ""))


def _retrieval_events(timeline: list[Any]) -> list[dict[str, Any]]:
    return [e.data for e in timeline if e.kind is TimelineKind.RETRIEVAL]


async def test_ingest_search_list_reingest_and_delete_through_the_facade(
    ph: Pilothouse, tmp_path: Path
) -> None:
    seen: list[IngestProgress] = []
    notes = tmp_path / "notes.md"
    notes.write_text("# Parking\n\nVisitors park in lot B behind the main building.\n")
    result = await ph.knowledge.ingest(
        "HANDBOOK",
        [*HANDBOOK, notes, FileDocument("upload.txt", b"The canteen opens at noon.", "upload.txt")],
        metadata={"edition": "2026"},
        progress=seen.append,
    )
    assert [d.status for d in result.documents] == ["added"] * 5
    assert [e.event for e in seen].count("done") == 5
    again = await ph.knowledge.ingest("HANDBOOK", HANDBOOK, metadata={"edition": "2026"})
    assert [d.status for d in again.documents] == ["unchanged"] * 3

    found = await ph.knowledge.search("HANDBOOK", "Where do visitors park their cars?")
    assert found.status == "ok"
    assert found.hits[0].source == str(notes.resolve())
    assert found.hits[0].metadata["edition"] == "2026"
    filtered = await ph.knowledge.search(
        "HANDBOOK", "rules", filters={"department": "finance"}, top_k=1, threshold=-1.0
    )
    assert [h.source for h in filtered.hits] == ["hb:expenses"]

    sources = {d.source for d in await ph.knowledge.documents("HANDBOOK")}
    assert sources == {
        "hb:travel",
        "hb:expenses",
        "hb:security",
        str(notes.resolve()),
        "upload.txt",
    }
    redone = await ph.knowledge.reingest("HANDBOOK", [HANDBOOK[0]])
    assert [d.status for d in redone.documents] == ["added"]
    assert await ph.knowledge.delete_document("HANDBOOK", "upload.txt")
    assert not await ph.knowledge.delete_document("HANDBOOK", "upload.txt")
    with pytest.raises(NotFoundError):
        await ph.knowledge.search("NOPE", "anything")


async def test_a_tenant_sees_only_its_own_collections(ph: Pilothouse) -> None:
    await ph.knowledge.ingest("HANDBOOK", HANDBOOK[:1])
    other = ph.for_tenant("acme")
    # The other tenant has no such collection: the same 404 as a missing one.
    with pytest.raises(NotFoundError):
        await other.knowledge.documents("HANDBOOK")


async def test_the_advisor_gives_the_model_numbered_sources_and_records_them(
    ph: Pilothouse,
    database: Database,
) -> None:
    await ph.knowledge.ingest("HANDBOOK", HANDBOOK)
    model = ScriptedModel(["Submit receipts within 30 days [1]."])
    async with Pilothouse(Settings(), database=database, model=model) as run:
        result = await run.command.start_and_send(
            "How long may I wait before handing in receipts?", action="ASK"
        )
        transcript = await run.query.get_transcript(result.conversation_uuid)
    assert result.status is ProcessStatus.COMPLETED
    system = _system(model)
    assert "Answer from the numbered sources" in system
    assert "[1] Expenses (hb:expenses; Expenses)" in system
    assert "Submit receipts within 30 days" in system
    searched, cited = _retrieval_events(transcript.timeline)
    assert searched["status"] == "context"
    search = searched["searches"][0]
    assert search["collection"] == "HANDBOOK" and search["top_k"] == 4
    assert search["threshold"] == 0.25
    first = search["hits"][0]
    assert first["n"] == 1 and first["source"] == "hb:expenses" and first["chunk_id"]
    assert first["similarity"] >= 0.25
    assert cited["status"] == "citations"
    assert cited["citations"] == [
        {"n": 1, "chunk_id": first["chunk_id"], "source": "hb:expenses", "title": "Expenses"}
    ]
    answer = transcript.messages[-1]
    assert answer.data is not None and answer.data["citations"][0]["source"] == "hb:expenses"
    # The stored user message is the user's own text, without the context.
    (asked,) = [m for m in transcript.messages if m.role is MessageRole.USER]
    assert asked.content == "How long may I wait before handing in receipts?"


async def test_nothing_passing_the_threshold_is_said_to_the_model_and_the_timeline(
    ph: Pilothouse,
    database: Database,
) -> None:
    await ph.knowledge.ingest("STRICT", HANDBOOK)
    model = ScriptedModel(["The documents do not cover it."])
    async with Pilothouse(Settings(), database=database, model=model) as run:
        result = await run.command.start_and_send("Who won the 1954 World Cup?", action="ASKSTRICT")
        transcript = await run.query.get_transcript(result.conversation_uuid)
    system = _system(model)
    assert "found nothing relevant enough" in system
    assert "STRICT: best similarity" in system and "below the threshold 0.95" in system
    (event,) = _retrieval_events(transcript.timeline)
    assert event["status"] == "nothing_found" and event["hits"] == 0
    assert event["searches"][0]["status"] == "nothing_passed_threshold"
    assert event["detail"].startswith("no context: STRICT: best similarity")


async def test_runtime_config_overrides_top_k_and_threshold_per_call(
    ph: Pilothouse,
    database: Database,
) -> None:
    await ph.knowledge.ingest("HANDBOOK", HANDBOOK)
    model = ScriptedModel(["ok", "ok"])
    async with Pilothouse(Settings(), database=database, model=model) as run:
        result = await run.command.start_and_send(
            "office rules",
            action="ASK",
            runtime_config={"retrieval": {"topK": 1, "similarityThreshold": -1.0}},
        )
        transcript = await run.query.get_transcript(result.conversation_uuid)
        event = _retrieval_events(transcript.timeline)[0]
        assert event["searches"][0]["top_k"] == 1 and event["searches"][0]["threshold"] == -1.0
        assert len(event["searches"][0]["hits"]) == 1
        off = await run.command.start_and_send(
            "office rules", action="ASK", runtime_config={"retrieval": {"enabled": False}}
        )
        (skipped,) = _retrieval_events(
            (await run.query.get_transcript(off.conversation_uuid)).timeline
        )
        assert skipped["status"] == "disabled"
        with pytest.raises(PilothouseError, match="retrieval: unknown key 'top'"):
            await run.command.start_and_send(
                "x", action="ASK", runtime_config={"retrieval": {"top": 3}}
            )
        with pytest.raises(PilothouseError, match="'top_k' must be a whole number"):
            await run.command.start_and_send(
                "x", action="ASK", runtime_config={"retrieval": {"top_k": 0}}
            )
    assert "Sources:" not in _system(model, 1)


async def test_runtime_config_collections_replace_the_actions_own_for_one_turn(
    ph: Pilothouse,
    database: Database,
) -> None:
    await ph.knowledge.ingest("HANDBOOK", HANDBOOK)
    model = ScriptedModel(["Within 30 days [1].", "plain", "ok"])
    async with Pilothouse(Settings(), database=database, model=model) as run:
        # PLAIN links no collection: this turn searches HANDBOOK all the same.
        result = await run.command.start_and_send(
            "How long may I wait before handing in receipts?",
            action="PLAIN",
            runtime_config={"retrieval": {"collections": ["HANDBOOK"]}},
        )
        transcript = await run.query.get_transcript(result.conversation_uuid)
        searched, cited = _retrieval_events(transcript.timeline)
        assert searched["status"] == "context"
        assert [s["collection"] for s in searched["searches"]] == ["HANDBOOK"]
        assert searched["searches"][0]["hits"][0]["source"] == "hb:expenses"
        assert cited["citations"][0]["source"] == "hb:expenses"
        (asked,) = [m for m in transcript.messages if m.role is MessageRole.USER]
        assert asked.data == {"retrieval": {"collections": ["HANDBOOK"]}}
        # The next turn of the same conversation, without it, is the action's own again.
        await run.command.send_message(result.conversation_uuid, "hello")
        after = await run.query.get_transcript(result.conversation_uuid)
        assert len(_retrieval_events(after.timeline)) == 2

        # ASKSTRICT's own STRICT (threshold 0.95) is replaced by HANDBOOK.
        swapped = await run.command.start_and_send(
            "receipts deadline",
            action="ASKSTRICT",
            runtime_config={"retrieval": {"collections": ["HANDBOOK"], "top_k": 1}},
        )
        (event, *_) = _retrieval_events(
            (await run.query.get_transcript(swapped.conversation_uuid)).timeline
        )
        assert [(s["collection"], s["top_k"]) for s in event["searches"]] == [("HANDBOOK", 1)]

        for codes, message in (
            (["NOPE"], r"retrieval.collections\[0\]: 'NOPE' is not a document collection"),
            (["HANDBOOK", "RETIRED"], r"\[1\]: document collection 'RETIRED' is inactive"),
            ([], "'collections' is empty"),
            ("HANDBOOK", "'collections' must be a list"),
        ):
            with pytest.raises(PilothouseError, match=message):
                await run.command.start_and_send(
                    "x", action="PLAIN", runtime_config={"retrieval": {"collections": codes}}
                )
    assert "[1] Expenses (hb:expenses; Expenses)" in _system(model)


async def test_an_action_without_collections_retrieves_nothing(
    ph: Pilothouse,
    database: Database,
) -> None:
    model = ScriptedModel(["plain"])
    async with Pilothouse(Settings(), database=database, model=model) as run:
        result = await run.command.start_and_send("hello", action="PLAIN")
        transcript = await run.query.get_transcript(result.conversation_uuid)
    assert _retrieval_events(transcript.timeline) == []
    assert "Sources" not in _system(model)


async def test_a_failing_search_fails_the_turn_rather_than_answering_without_context(
    ph: Pilothouse,
    database: Database,
) -> None:
    # The collection's store is deactivated after the action was compiled.
    model = ScriptedModel(["never"])
    async with Pilothouse(Settings(), database=database, model=model) as run:
        await run.catalog.update(
            "vector_stores", "EMBED", {"code": "EMBED", "active": False}, expected_version=1
        )
        result = await run.command.start_and_send("hello", action="ASK")
    assert result.status is ProcessStatus.FAILED
    assert "retrieval from collection HANDBOOK failed" in (result.error or "")
    assert "vector store EMBED is inactive" in (result.error or "")
    assert model.requests == []


async def test_embed_with_a_catalog_model_and_refusals(ph: Pilothouse) -> None:
    result = await ph.knowledge.embed("MINILM", ["first text", "second text"])
    assert result.dimension == 384 and len(result.vectors) == 2
    assert abs(sum(x * x for x in result.vectors[0]) - 1.0) < 1e-4
    assert result.tokens == 4
    with pytest.raises(NotFoundError, match="not an embedding model"):
        await ph.knowledge.embed("SCRIPTED", ["x"])
    with pytest.raises(NotFoundError, match="not an active model"):
        await ph.knowledge.embed("NOPE", ["x"])


async def test_caller_urls_are_checked_against_the_egress_policy(ph: Pilothouse) -> None:
    result = await ph.knowledge.ingest("HANDBOOK", ["http://127.0.0.1:9/secret.txt"])
    (document,) = result.documents
    assert document.status == "failed"
    assert "private, local or reserved address" in (document.error or "")


def test_the_sync_facade_ingests_and_searches(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}")
    with SyncPilothouse(settings) as ph:
        ph.catalog.import_text(_catalog().yaml())
        assert ph.knowledge.ingest("HANDBOOK", HANDBOOK).count("added") == 3
        hits = ph.knowledge.search("HANDBOOK", "lost badge").hits
        assert hits[0].source == "hb:security"


async def test_adhoc_pgvector_table_parameters_are_checked_and_a_failing_store_fails_the_turn(
    ph: Pilothouse, database: Database
) -> None:
    from pilothouse.errors import InvalidFieldError
    from pilothouse.providers._local import _free_loopback_port
    from pilothouse.types import AdHocRun, ModelEndpoint, PgVectorTable

    port = _free_loopback_port()  # nothing listens there
    table = PgVectorTable(host="127.0.0.1", port=port, password="pg-secret-0042")
    settings = Settings(egress_allow=["127.0.0.1"])
    model = ScriptedModel(["never"])
    async with Pilothouse(settings, database=database, model=model) as run:
        with pytest.raises(InvalidFieldError) as not_em:
            await run.command.run_adhoc(
                AdHocRun(
                    "Bot",
                    "hi",
                    "SCRIPTED",
                    pgvector=PgVectorTable("127.0.0.1", embedding_model="SCRIPTED"),
                )
            )
        assert not_em.value.field == "embedding_model_name"
        with pytest.raises(InvalidFieldError, match="give baseUrl"):
            await run.command.run_adhoc(
                AdHocRun(
                    "Bot",
                    "hi",
                    "SCRIPTED",
                    pgvector=PgVectorTable("127.0.0.1", embedding_model="te3"),
                )
            )
        with pytest.raises(InvalidFieldError, match="512.*384"):
            await run.command.run_adhoc(
                AdHocRun(
                    "Bot", "hi", "SCRIPTED", pgvector=PgVectorTable("127.0.0.1", dimension=512)
                )
            )
        # A model named at the run's endpoint embeds the query there; a catalog
        # EM model by its code. Either way an unreachable store fails the turn.
        endpoint = ModelEndpoint(base_url=f"http://127.0.0.1:{port}/v1", model_name="chat")
        for run_model, embedding in ((endpoint, "text-embedding-3-small"), ("SCRIPTED", "MINILM")):
            result = await run.command.run_adhoc(
                AdHocRun(
                    "Bot",
                    "hi",
                    run_model,
                    pgvector=PgVectorTable(
                        "127.0.0.1",
                        port=port,
                        password="pg-secret-0042",
                        embedding_model=embedding,
                        dimension=384 if embedding == "MINILM" else 512,
                    ),
                    memory=None,
                )
            )
            assert result.result.status is ProcessStatus.FAILED
            error = result.result.error or ""
            assert "retrieval from collection INVOKE failed" in error
            assert "pg-secret-0042" not in error
        result = await run.command.run_adhoc(
            AdHocRun("Bot", "hi", "SCRIPTED", pgvector=table, memory=None)
        )
        assert f"cannot use 127.0.0.1:{port}/postgres" in (result.result.error or "")
    assert model.requests == []


SKILL_TOPICS = [
    ("WEATHER", "Get the weather forecast for a city."),
    ("INVOICE", "Create an invoice for a customer order."),
    ("FLIGHTS", "Search and book flights between airports."),
    ("HOTELS", "Find and reserve hotel rooms."),
    ("PAYROLL", "Run the monthly payroll for employees."),
    ("TRANSLT", "Translate a text into another language."),
    ("CALENDAR", "Schedule meetings in a calendar."),
    ("STOCKS", "Look up stock prices and market data."),
    ("RECIPES", "Suggest cooking recipes from ingredients."),
    ("SHIPPING", "Track parcels and shipments."),
    ("TAXES", "Estimate income taxes."),
    ("NEWS", "Summarize today's news headlines."),
    ("FITNESS", "Plan a workout routine."),
    ("MUSIC", "Recommend songs and playlists."),
]


async def test_use_skill_offers_the_skills_matching_the_request_when_there_are_many(
    database: Database,
) -> None:
    catalog = CatalogBuilder()
    for code, description in SKILL_TOPICS:
        catalog.skill(code, prompt=f"Use {code}.", description=description)
    # use_skill exists with progressive disclosure, the per-action switch.
    catalog.action(
        "MANY",
        prompt="Help.",
        skills=[code for code, _ in SKILL_TOPICS],
        progressive_disclosure=True,
    )
    catalog.skill("ONE", prompt="Use ONE.", description="A single skill.")
    catalog.action("FEW", prompt="Help.", skills=["ONE", "WEATHER"], progressive_disclosure=True)
    model = ScriptedModel(["ok", "ok"])
    async with Pilothouse(Settings(), database=database, model=model) as ph:
        await catalog.import_into(ph)
        await ph.command.start_and_send("Will it rain in Hamburg tomorrow?", action="MANY")
        await ph.command.start_and_send("Will it rain in Hamburg tomorrow?", action="FEW")

    def offered(index: int) -> list[str]:
        tools = {t.name: t for t in model.requests[index].info.function_tools}
        return list(tools["use_skill"].parameters_json_schema["properties"]["skill"]["enum"])

    many = offered(0)
    assert len(many) == 8 and many[0] == "WEATHER"
    # Few skills: every one is offered, in catalog order.
    assert offered(1) == ["ONE", "WEATHER"]


async def test_a_closed_adhoc_store_refuses_to_open_a_new_pool(database: Database) -> None:
    # An ad-hoc store evicted (closed) while a search still held it must not
    # open a pool nobody would ever close again.
    from pilothouse.knowledge import Knowledge
    from pilothouse.knowledge._errors import KnowledgeSetupError

    knowledge = Knowledge(database)
    collection = knowledge.adhoc_collection(
        "default",
        connection="postgresql://postgres@127.0.0.1:1/nowhere",
        password=None,
        table="langchain4j_embeddings",
        top_k=3,
        threshold=0.0,
        model=None,
        dimension=384,
    )
    backend = knowledge.backend(collection)
    await knowledge.aclose()
    with pytest.raises(KnowledgeSetupError, match="was closed"):
        await backend.pool()  # pyright: ignore[reportAttributeAccessIssue]
