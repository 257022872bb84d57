from __future__ import annotations

import inspect
import threading
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from pilothouse._sync import sync_iterator_annotation
from pilothouse.api import (
    CatalogApi,
    CommandApi,
    EventApi,
    KeyApi,
    KnowledgeApi,
    MemoryApi,
    Pilothouse,
    QueryApi,
    SyncCatalogApi,
    SyncCommandApi,
    SyncEventApi,
    SyncKeyApi,
    SyncKnowledgeApi,
    SyncMemoryApi,
    SyncPilothouse,
    SyncQueryApi,
)
from pilothouse.catalog._enums import (
    McpTransport,
    MessageRole,
    ProcessStatus,
    ProviderKind,
    ToolKind,
)
from pilothouse.catalog._models import (
    Action,
    Agent,
    Application,
    Configuration,
    McpClient,
    Model,
    Provider,
    Tool,
)
from pilothouse.errors import InvalidStateError, NotFoundError
from pilothouse.settings import Settings
from pilothouse.store import Database, NewMessage, SqlTurnStore, TurnBatch
from pilothouse.testing import Reply, ScriptedModel
from pilothouse.types import AdHocRun, TextDelta, TurnFinished

pytestmark = pytest.mark.anyio


async def seed_catalog(db: Database, tenant: str = "default") -> None:
    """A minimal catalog: model, configuration, actions, agents, a tool, an MCP client."""
    async with db.sessions.begin() as session:
        provider = Provider(tenant=tenant, code="TEST", kind=ProviderKind.TEST)
        model = Model(tenant=tenant, code="TESTM", provider=provider, model_name="test")
        configuration = Configuration(tenant=tenant, code="DFLT", max_tokens=256)
        summarize = Action(
            tenant=tenant,
            code="SUMMARIZE",
            model=model,
            configuration=configuration,
            prompt="Summarize.",
        )
        quiet = Action(
            tenant=tenant,
            code="QUIET",
            model=model,
            configuration=configuration,
            prompt="Hush.",
            audit=False,
        )
        retired = Action(
            tenant=tenant,
            code="RETIRED",
            model=model,
            configuration=configuration,
            prompt="Old.",
            active=False,
        )
        application = Application(tenant=tenant, code="CRM")
        analyst = Agent(
            tenant=tenant, code="ANALYST", application=application, goal_action=summarize
        )
        idle = Agent(tenant=tenant, code="IDLE", application=application, active=False)
        tool = Tool(tenant=tenant, code="WEATHER", name="get_weather", kind=ToolKind.PYTHON)
        mcp = McpClient(tenant=tenant, name="time", transport=McpTransport.STDIO, command="t")
        session.add_all([summarize, quiet, retired, analyst, idle, tool, mcp])


@pytest.fixture
async def ph(database: Database) -> AsyncIterator[Pilothouse]:
    await seed_catalog(database)
    async with Pilothouse(Settings(database_url=database.url), database=database) as facade:
        yield facade


async def test_start_conversation_records_a_not_started_conversation(ph: Pilothouse) -> None:
    conversation = await ph.command.start_conversation(
        action="SUMMARIZE", agent="ANALYST", memory_id="m-1"
    )
    assert conversation.status is ProcessStatus.NOT_STARTED
    assert (conversation.agent_code, conversation.action_code) == ("ANALYST", "SUMMARIZE")
    assert (conversation.tenant, conversation.memory_id, conversation.audit) == (
        "default",
        "m-1",
        True,
    )
    found = await ph.query.find_conversation(conversation.uuid)
    assert found is not None and found.uuid == conversation.uuid
    assert (await ph.query.get_conversation(conversation.uuid)).uuid == conversation.uuid


async def test_start_conversation_without_agent(ph: Pilothouse) -> None:
    conversation = await ph.command.start_conversation(action="SUMMARIZE")
    assert conversation.agent_code is None
    assert conversation.memory_id == conversation.uuid


async def test_audit_follows_argument_then_action_then_settings(database: Database) -> None:
    await seed_catalog(database)
    settings = Settings(database_url=database.url, audit=False)
    async with Pilothouse(settings, database=database) as ph:
        assert (await ph.command.start_conversation(action="SUMMARIZE")).audit is False
        assert (await ph.command.start_conversation(action="SUMMARIZE", audit=True)).audit is True
    async with Pilothouse(Settings(database_url=database.url), database=database) as ph:
        assert (await ph.command.start_conversation(action="QUIET")).audit is False
        assert (await ph.command.start_conversation(action="SUMMARIZE")).audit is True


async def test_unknown_action_or_agent_is_not_found(ph: Pilothouse) -> None:
    with pytest.raises(NotFoundError, match="action 'NOPE' not found"):
        await ph.command.start_conversation(action="NOPE", agent="ANALYST")
    with pytest.raises(NotFoundError, match="agent 'NOBODY' not found"):
        await ph.command.start_conversation(action="SUMMARIZE", agent="NOBODY")
    assert (await ph.query.list_conversations()).total == 0


async def test_inactive_action_or_agent_is_refused(ph: Pilothouse) -> None:
    with pytest.raises(InvalidStateError, match="action 'RETIRED' is inactive"):
        await ph.command.start_conversation(action="RETIRED", agent="ANALYST")
    with pytest.raises(InvalidStateError, match="agent 'IDLE' is inactive"):
        await ph.command.start_conversation(action="SUMMARIZE", agent="IDLE")
    assert (await ph.query.list_conversations()).total == 0


async def test_another_tenants_catalog_is_invisible(database: Database) -> None:
    await seed_catalog(database, tenant="acme")
    async with Pilothouse(Settings(database_url=database.url), database=database) as ph:
        assert await ph.query.find_action_by_code("SUMMARIZE") is None
        with pytest.raises(NotFoundError, match="action 'SUMMARIZE' not found"):
            await ph.command.start_conversation(action="SUMMARIZE")
    async with Pilothouse(
        Settings(database_url=database.url), tenant="acme", database=database
    ) as ph:
        conversation = await ph.command.start_conversation(action="SUMMARIZE", agent="ANALYST")
        assert conversation.tenant == "acme"
    async with Pilothouse(
        Settings(database_url=database.url, tenant="acme"), database=database
    ) as ph:
        assert ph.tenant == "acme"
        assert await ph.query.find_conversation(conversation.uuid) is not None


async def test_catalog_finders(ph: Pilothouse) -> None:
    assert [a.code for a in await ph.query.get_all_actions()] == ["QUIET", "SUMMARIZE"]
    everything = await ph.query.get_all_actions(include_inactive=True)
    assert [a.code for a in everything] == ["QUIET", "RETIRED", "SUMMARIZE"]
    action = await ph.query.find_action_by_code("SUMMARIZE")
    assert action is not None
    assert (action.model.model_name, action.configuration.max_tokens) == ("test", 256)
    retired = await ph.query.find_action_by_code("RETIRED")
    assert retired is not None and retired.active is False
    agent = await ph.query.find_agent_by_code("ANALYST")
    assert agent is not None and agent.goal_action is not None
    assert (agent.application.code, agent.goal_action.code) == ("CRM", "SUMMARIZE")
    tool = await ph.query.find_tool_by_code("WEATHER")
    assert tool is not None and tool.name == "get_weather"
    mcp = await ph.query.find_mcp_client_by_name("time")
    assert mcp is not None and mcp.transport is McpTransport.STDIO
    assert await ph.query.find_action_by_code("NOPE") is None
    assert await ph.query.find_agent_by_code("NOPE") is None
    assert await ph.query.find_tool_by_code("NOPE") is None
    assert await ph.query.find_mcp_client_by_name("nope") is None


async def test_conversation_reads(ph: Pilothouse) -> None:
    conversation = await ph.command.start_conversation(action="SUMMARIZE", agent="ANALYST")
    writer = SqlTurnStore(ph._shared.database)
    handle = await writer.begin_turn(ph.tenant, conversation.uuid)
    await writer.write(
        handle,
        TurnBatch(
            messages=[
                NewMessage(MessageRole.USER, "plan"),
                NewMessage(MessageRole.QUESTION, "Where?"),
            ],
            status=ProcessStatus.WAITING,
        ),
    )
    messages = await ph.query.get_conversation_messages(conversation.uuid)
    assert [m.content for m in messages] == ["plan", "Where?"]
    assert [q.content for q in await ph.query.get_pending_questions(conversation.uuid)] == [
        "Where?"
    ]
    page = await ph.query.list_conversations(status=ProcessStatus.WAITING)
    assert [c.uuid for c in page.items] == [conversation.uuid]
    transcript = await ph.query.get_transcript(conversation.uuid)
    assert [m.role for m in transcript.messages] == [MessageRole.USER, MessageRole.QUESTION]

    assert await ph.query.find_conversation("missing") is None
    for method in (
        ph.query.get_conversation,
        ph.query.get_conversation_messages,
        ph.query.get_pending_questions,
        ph.query.get_transcript,
    ):
        with pytest.raises(NotFoundError, match="conversation 'missing' not found"):
            await method("missing")


async def test_facade_makes_a_fresh_database_usable_and_closes_what_it_opened(
    tmp_path: Path,
) -> None:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'fresh.db'}")
    ph = Pilothouse(settings)
    # No context manager and no setup step: the first call creates the schema.
    assert await ph.query.find_action_by_code("SUMMARIZE") is None
    assert (await ph.schema_revision()).is_current
    await ph.aclose()


async def test_shared_database_is_left_open(database: Database) -> None:
    async with Pilothouse(Settings(database_url=database.url), database=database):
        pass
    assert await database.schema_is_current()


def seeded_settings(tmp_path: Path) -> Settings:
    """Settings of a fresh SQLite file holding the minimal catalog (for the sync facade)."""
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'sync.db'}")

    async def seed() -> None:
        db = Database(settings.database_url)
        await db.ensure_schema()
        await seed_catalog(db)
        await db.dispose()

    anyio.run(seed)
    return settings


def test_sync_wrapper_works_from_plain_sync_code(tmp_path: Path) -> None:
    settings = seeded_settings(tmp_path)
    with SyncPilothouse(settings) as ph:
        loop_thread = ph._portal.call(threading.current_thread)
        assert loop_thread is not threading.current_thread()
        assert ph.tenant == "default"
        conversation = ph.command.start_conversation(action="SUMMARIZE", agent="ANALYST")
        assert conversation.status is ProcessStatus.NOT_STARTED
        found = ph.query.find_conversation(conversation.uuid)
        assert found is not None and found.uuid == conversation.uuid
        assert ph.query.list_conversations(agent="ANALYST").total == 1
        assert ph.query.get_transcript(conversation.uuid).messages == []
        assert [a.code for a in ph.query.get_all_actions()] == ["QUIET", "SUMMARIZE"]
        with pytest.raises(NotFoundError, match="action 'NOPE' not found"):
            ph.command.start_conversation(action="NOPE")
        # Attributes that are not coroutines pass through unchanged.
        assert ph.command.tenant == "default"
        assert "start_conversation" in dir(ph.command)
    ph.close()  # closing twice is harmless
    # The background event loop's thread is gone.
    loop_thread.join(timeout=5)
    assert not loop_thread.is_alive()


@pytest.mark.parametrize(
    ("sync_half", "async_half"),
    [
        (SyncQueryApi, QueryApi),
        (SyncCommandApi, CommandApi),
        (SyncCatalogApi, CatalogApi),
        (SyncKeyApi, KeyApi),
        (SyncKnowledgeApi, KnowledgeApi),
        (SyncMemoryApi, MemoryApi),
        (SyncEventApi, EventApi),
        (SyncPilothouse, Pilothouse),
    ],
)
def test_sync_facade_offers_every_async_method_with_its_signature(
    sync_half: type[Any], async_half: type[Any]
) -> None:
    """The typed sync facade names each method; one the async facade gains fails here."""

    def public(cls: type[Any]) -> set[str]:
        return {
            name
            for name, value in vars(cls).items()
            if not name.startswith("_") and (callable(value) or hasattr(value, "__get__"))
        }

    # Pilothouse's async close is aclose; the sync one close.
    renamed = {"aclose": "close"}
    assert {renamed.get(n, n) for n in public(async_half)} <= public(sync_half)
    if sync_half is SyncPilothouse:
        # Plain methods on both sides: compared on the classes, self included.
        for name in public(async_half) - set(renamed):
            expected = inspect.signature(getattr(Pilothouse, name))
            if expected.return_annotation == "Pilothouse":
                expected = expected.replace(return_annotation="SyncPilothouse")
            if name == "lease":
                # An async context manager on one side, a plain one on the other.
                expected = expected.replace(return_annotation="Generator[list[StuckConversation]]")
            assert inspect.signature(getattr(SyncPilothouse, name)) == expected, name
        assert inspect.signature(SyncPilothouse.__init__) == inspect.signature(Pilothouse.__init__)
        return
    settings = Settings(database_url="sqlite+aiosqlite:///:memory:")
    facade = Pilothouse(settings)
    target = {
        QueryApi: facade.query,
        CommandApi: facade.command,
        CatalogApi: facade.catalog,
        KeyApi: facade.keys,
        KnowledgeApi: facade.knowledge,
        MemoryApi: facade.memory,
        EventApi: facade.events,
    }[async_half]
    # No portal: reading a method's signature calls nothing.
    wrapped = sync_half(target, None)
    for name in public(async_half):
        expected = inspect.signature(getattr(target, name))
        if inspect.isasyncgenfunction(getattr(async_half, name)):
            returns = str(expected.return_annotation)
            assert returns.startswith(("AsyncIterator[", "AsyncGenerator["))
            expected = expected.replace(return_annotation=sync_iterator_annotation(returns))
        assert inspect.signature(getattr(wrapped, name)) == expected, name


def test_sync_streams_are_iterators_that_can_stop_early(tmp_path: Path) -> None:
    settings = seeded_settings(tmp_path)
    model = ScriptedModel([Reply("alpha beta gamma"), Reply("again")])
    with SyncPilothouse(settings, model=model) as ph:
        events = ph.command.start_and_stream("go", action="SUMMARIZE")
        first = next(events)
        assert first.conversation_uuid
        events.close()
        assert list(ph.command.start_and_stream("again", action="SUMMARIZE"))


def test_a_sync_adhoc_stream_yields_the_pieces_then_the_result(tmp_path: Path) -> None:
    settings = seeded_settings(tmp_path)
    model = ScriptedModel([Reply("alpha beta gamma")])
    with SyncPilothouse(settings, model=model) as ph:
        events = list(ph.command.stream_adhoc(AdHocRun(name="A", message="go", model="TESTM")))
    texts = [e.text for e in events if isinstance(e, TextDelta)]
    assert texts == ["alpha ", "beta ", "gamma"]
    last = events[-1]
    assert isinstance(last, TurnFinished) and last.result.text == "alpha beta gamma"


def test_egress_allow_reads_comma_separated_hosts_and_refuses_nonsense(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PILOTHOUSE_EGRESS_ALLOW", "10.0.0.0/8, model-server.internal,127.0.0.1")
    assert Settings().egress_allow == ["10.0.0.0/8", "model-server.internal", "127.0.0.1"]
    monkeypatch.setenv("PILOTHOUSE_EGRESS_ALLOW", "10.0.0.0/99")
    with pytest.raises(ValueError, match="neither a host nor a network"):
        Settings()
