"""The compile's Core reading of the catalog matches the ORM's, view by view.

``CatalogReader`` replaced the ORM loads of the compile (to keep
the first turn off the ORM). The ORM stays the reference: every view field
is compared with the mapped row's attribute of the same name, through every
relationship, on a catalog that uses every one of them, on the runtime
tests' catalog and on the examples.
"""

from __future__ import annotations

import dataclasses
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from runtime_catalog import seed_catalog
from sqlalchemy import Connection, Table, inspect, select
from sqlalchemy.orm import Session

from database_templates import Seed
from pilothouse.catalog import import_catalog
from pilothouse.catalog._enums import (
    Cardinality,
    ExecutionPolicy,
    McpTransport,
    MemoryKind,
    ProviderKind,
    SchemaDirection,
    ToolKind,
    VectorStoreKind,
)
from pilothouse.catalog._models import (
    Action,
    ActionAdvisor,
    ActionCollection,
    ActionMcpClient,
    ActionSchema,
    ActionSkill,
    ActionTool,
    ActionType,
    Advisor,
    AdvisorType,
    Agent,
    AgentType,
    Application,
    Configuration,
    DocumentCollection,
    McpClient,
    McpClientType,
    MemoryStrategy,
    MemoryStrategyType,
    Model,
    Persona,
    PersonaType,
    Provider,
    Skill,
    SkillDependency,
    SkillTool,
    SkillType,
    Tool,
    ToolType,
    VectorStore,
    VectorStoreType,
)
from pilothouse.catalog._read import CatalogReader
from pilothouse.catalog._views import (
    ActionTypeView,
    ActionView,
    AgentView,
    DocumentCollectionView,
    McpClientView,
    ModelView,
    SkillView,
    ToolView,
    TypeView,
)
from pilothouse.errors import InvalidStateError
from pilothouse.store import Database

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).parents[2] / "examples" / "catalog"


@pytest.fixture
def database_seed() -> Seed | None:
    """An empty catalog: each test seeds its own (this directory's default is the runtime one)."""
    return None


def _same(view: Any, row: Any, path: str) -> list[str]:
    """Where ``view`` and the mapped ``row`` differ, as dotted paths."""
    if dataclasses.is_dataclass(view):
        if row is None:
            return [f"{path}: view present, row None"]
        problems: list[str] = []
        for field in dataclasses.fields(view):
            problems += _same(
                getattr(view, field.name), getattr(row, field.name), f"{path}.{field.name}"
            )
        return problems
    if isinstance(view, tuple):
        rows = list(row)
        if len(rows) != len(view):
            return [f"{path}: {len(view)} views, {len(rows)} rows"]
        out: list[str] = []
        for index, (item, other) in enumerate(zip(view, rows, strict=True)):
            out += _same(item, other, f"{path}[{index}]")
        return out
    if view != row or type(view) is not type(row):
        return [f"{path}: view {view!r} != row {row!r}"]
    return []


def _compare_all(sync: Session, connection: Connection) -> int:
    """Compare every action and agent of tenant ``default``; return how many."""
    reader = CatalogReader(connection, "default")
    compared = 0
    for action in sync.scalars(select(Action).where(Action.tenant == "default")):
        view = reader.action(action.code)
        assert isinstance(view, ActionView)
        assert _same(view, action, action.code) == []
        compared += 1
    for agent in sync.scalars(select(Agent).where(Agent.tenant == "default")):
        view = reader.agent(agent.code)
        assert isinstance(view, AgentView)
        assert _same(view, agent, agent.code) == []
        compared += 1
    return compared


async def _compare(database: Database) -> int:
    def work(connection: Connection) -> int:
        # One connection for both readings: the ORM loads lazily through the
        # same transaction the reader uses.
        with Session(bind=connection) as sync:
            return _compare_all(sync, connection)

    return await database.transaction(work)


def _types() -> dict[str, Any]:
    return {
        "persona": PersonaType(code="VOIC", name="Voices", description="how it speaks"),
        "skill": SkillType(code="KNOW", name="Knowledge"),
        "tool": ToolType(code="LOOK", name="Lookups", description="read-only"),
        "mcp": McpClientType(code="SRV", name="Servers"),
        "advisor": AdvisorType(code="SAFE"),
        "store": VectorStoreType(code="EMB"),
        "memory": MemoryStrategyType(code="WIN"),
        "action": ActionType(code="EXTR", name="Extract", constraint_prompt="Only facts."),
        "agent": AgentType(code="HELP", name="Helpers"),
    }


async def seed_everything(database: Database) -> None:
    """A catalog that fills every column and relationship a view has."""
    async with database.sessions.begin() as session:
        t = _types()
        provider = Provider(
            code="OAI",
            name="OpenAI",
            kind=ProviderKind.OPENAI,
            base_url="http://127.0.0.1:9/v1",
            api_key="@secrets(OPENAI_KEY)",
            headers={"X-Team": "erp"},
            settings={"organization": "acme"},
            description="the vendor",
        )
        chat = Model(
            code="GPT",
            provider=provider,
            model_name="gpt-4o-mini",
            input_price=Decimal("0.15"),
            output_price=Decimal("0.6"),
            capabilities=["FC", "JM"],
            context_window=128000,
            description="chat",
        )
        embedder = Model(
            code="EMB",
            provider=provider,
            model_name="text-embedding-3-small",
            capabilities=["EM"],
            dimension=1536,
            max_input_tokens=8191,
            query_prefix="query: ",
            document_prefix="passage: ",
        )
        config = Configuration(
            code="PREC",
            name="precise",
            temperature=0.1,
            top_p=0.9,
            top_k=40,
            max_tokens=512,
            stop=["END"],
            presence_penalty=0.5,
            frequency_penalty=0.25,
            retry_count=3,
            retry_delay=0.5,
        )
        persona = Persona(code="CLERK", name="Clerk", type=t["persona"], prompt="You are a clerk.")
        lookup = Tool(
            code="LOOKUP",
            name="lookup",
            type=t["tool"],
            kind=ToolKind.REST,
            implementation="http://127.0.0.1:9/lookup",
            description="Look a thing up.",
            input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
            output_schema={"type": "object"},
            policy=ExecutionPolicy.AUTHORIZED,
            settings={"method": "GET"},
            release="2.1.0",
        )
        remote = Tool(
            code="REMOTE",
            name="remote_time",
            kind=ToolKind.MCP,
            implementation="clock:get_time",
            description="The time.",
        )
        inactive_tool = Tool(code="OFF", name="off", kind=ToolKind.PYTHON, active=False)
        clock = McpClient(
            name="clock",
            type=t["mcp"],
            transport=McpTransport.STDIO,
            command="python",
            args=["-m", "clock"],
            env={"TZ": "UTC"},
            headers={},
            confidential_headers=["Authorization"],
            description="A clock.",
            input_schema={"type": "object"},
            output_schema={"type": "string"},
        )
        other = McpClient(
            name="files",
            transport=McpTransport.STREAMABLE_HTTP,
            url="http://127.0.0.1:9/mcp",
            active=False,
        )
        parent = Skill(code="BASE", name="Base", type=t["skill"], prompt="Be careful.")
        basic = Skill(code="FACTS", prompt="Know facts.", release="1.2.0")
        skill = Skill(
            code="RESEARCH",
            name="Research",
            description="Finds things.",
            prompt="Research first.\nThen answer.",
            parent=parent,
            execution="event",
        )
        skill.dependencies = [SkillDependency(depends_on=basic, position=1)]
        skill.tools = [
            SkillTool(tool=lookup, position=0, access_level="write"),
            SkillTool(tool=remote, position=1),
        ]
        basic.tools = [SkillTool(tool=lookup, position=0)]
        guard = Advisor(
            code="GUARD",
            name="Guard",
            type=t["advisor"],
            implementation="content-filter",
            default_order=100,
            settings={"blocked_terms": ["falcon"]},
        )
        store = VectorStore(
            code="LOCAL",
            name="Local",
            type=t["store"],
            kind=VectorStoreKind.EMBEDDED,
            default_collection="docs",
            settings={"path": "x"},
        )
        collection = DocumentCollection(
            code="DOCS",
            name="Docs",
            store=store,
            collection_name="docs",
            similarity_threshold=0.3,
            top_k=6,
            embedding_model=embedder,
            chunk_size=400,
            chunk_overlap=40,
            qa_model=chat,
        )
        memory = MemoryStrategy(
            code="WIN",
            name="Window",
            type=t["memory"],
            kind=MemoryKind.WINDOW,
            window_size=8,
            token_budget=4000,
            settings={},
        )
        action = Action(
            code="EXTRACT",
            name="Extract",
            goal_description="Facts from text.",
            type=t["action"],
            model=chat,
            configuration=config,
            persona=persona,
            memory_strategy=memory,
            prompt="Extract the facts of {document}.",
            audit=False,
            question_timeout=60,
            ask_user=False,
            progressive_disclosure=True,
        )
        action.schemas = [
            ActionSchema(direction=SchemaDirection.INPUT, json_schema={"type": "object"}),
            ActionSchema(
                direction=SchemaDirection.OUTPUT,
                cardinality=Cardinality.LIST,
                json_schema={"type": "object", "properties": {"fact": {"type": "string"}}},
            ),
        ]
        action.skills = [ActionSkill(skill=skill, position=0), ActionSkill(skill=basic, position=1)]
        action.tools = [
            ActionTool(tool=remote, position=0),
            ActionTool(tool=lookup, position=1),
            ActionTool(tool=inactive_tool, position=2),
        ]
        action.mcp_clients = [
            ActionMcpClient(mcp_client=clock, position=0),
            ActionMcpClient(mcp_client=other, position=1),
        ]
        action.advisors = [ActionAdvisor(advisor=guard, order=5, position=0)]
        action.collections = [ActionCollection(collection=collection, position=0)]
        plain = Action(code="PLAIN", model=chat, configuration=config, prompt="Say hi.")
        application = Application(code="ERP", name="The ERP", system_prompt="You help ERP users.")
        session.add_all(
            [
                action,
                plain,
                Agent(
                    code="HELPER",
                    name="Helper",
                    application=application,
                    type=t["agent"],
                    prompt="Help.",
                    goal_action=action,
                ),
                Agent(code="BARE", application=application),
            ]
        )


async def test_every_relationship_reads_the_same_through_core_and_the_orm(
    database: Database,
) -> None:
    await seed_everything(database)
    assert await _compare(database) == 4

    def read(connection: Connection) -> tuple[ActionView | None, AgentView | None]:
        reader = CatalogReader(connection, "default")
        return reader.action("EXTRACT"), reader.agent("HELPER")

    action, agent = await database.transaction(read)
    # What the comparison walked is really there (a comparison of empty
    # tuples would pass on a reader that read nothing).
    assert action is not None and agent is not None
    assert isinstance(action.type, ActionTypeView)
    assert action.type.constraint_prompt == "Only facts."
    assert isinstance(action.model, ModelView) and action.model.provider.code == "OAI"
    research = action.skills[0].skill
    assert isinstance(research, SkillView)
    assert research.parent is not None and research.parent.code == "BASE"
    assert [d.depends_on.code for d in research.dependencies] == ["FACTS"]
    assert [(t.tool.code, t.access_level) for t in research.tools] == [
        ("LOOKUP", "write"),
        ("REMOTE", "read"),
    ]
    # A row named from several places is one view.
    assert research.tools[0].tool is action.tools[1].tool
    assert research.dependencies[0].depends_on is action.skills[1].skill
    assert [c.mcp_client.name for c in action.mcp_clients] == ["clock", "files"]
    assert action.advisors[0].order == 5
    collection = action.collections[0].collection
    assert isinstance(collection, DocumentCollectionView)
    assert collection.embedding_model is not None and collection.embedding_model.dimension == 1536
    assert collection.qa_model is action.model
    assert [s.cardinality for s in action.schemas] == [Cardinality.ITEM, Cardinality.LIST]
    assert agent.goal_action is not None and agent.goal_action.code == "EXTRACT"
    assert isinstance(agent.type, TypeView) and agent.application.code == "ERP"


async def test_the_runtime_catalog_reads_the_same(database: Database) -> None:
    await seed_catalog(database)
    assert await _compare(database) >= 8


async def test_the_example_catalog_reads_the_same(database: Database) -> None:
    await import_catalog(database, "default", [EXAMPLES])
    assert await _compare(database) >= 6


async def test_absent_codes_and_other_tenants_read_as_none(database: Database) -> None:
    await seed_everything(database)

    def read(connection: Connection) -> list[Any]:
        mine, theirs = CatalogReader(connection, "default"), CatalogReader(connection, "other")
        return [
            mine.action("NOPE"),
            mine.agent("NOPE"),
            theirs.action("EXTRACT"),
            theirs.agent("HELPER"),
            mine.mcp_clients(["clock", "nope"]),
            theirs.mcp_clients(["clock"]),
            mine.collections(["DOCS", "NOPE"]),
            mine.mcp_clients([]),
        ]

    found = await database.transaction(read)
    assert found[:4] == [None, None, None, None]
    assert list(found[4]) == ["clock"] and isinstance(found[4]["clock"], McpClientView)
    assert found[5] == {}
    assert found[6] == {"DOCS": True}
    assert found[7] == {}


async def test_a_skill_cycle_written_past_validation_is_refused_not_followed(
    database: Database,
) -> None:
    """The catalog refuses cycles on write; a database edited by hand must not hang a compile."""
    await seed_everything(database)

    def loop(connection: Connection) -> None:
        skill = inspect(Skill).local_table
        assert isinstance(skill, Table)
        ids = dict(connection.execute(select(skill.c.code, skill.c.id)).all())
        connection.execute(
            skill.update().where(skill.c.code == "BASE").values(parent_id=ids["RESEARCH"])
        )

    await database.transaction(loop)
    with pytest.raises(InvalidStateError, match="depends on itself"):
        await database.transaction(lambda c: CatalogReader(c, "default").action("EXTRACT"))


def test_every_view_has_every_column_of_its_table() -> None:
    """A column added to a mapped class without its view fails here, not in a compile."""
    pairs: list[tuple[type[Any], type[Any]]] = [
        (ActionView, Action),
        (AgentView, Agent),
        (ToolView, Tool),
        (McpClientView, McpClient),
        (SkillView, Skill),
        (ModelView, Model),
        (DocumentCollectionView, DocumentCollection),
        (ActionTypeView, ActionType),
        (TypeView, ToolType),
    ]
    for view, mapped in pairs:
        columns = {attr.key for attr in inspect(mapped).column_attrs}
        fields = {field.name for field in dataclasses.fields(view)}
        assert columns <= fields, (view.__name__, columns - fields)
