"""Two tenants on one service for the cross-tenant walk: their catalogs, A's objects, A's rows.

Tenant A (``acme``) owns one object of every kind a request can name: a
catalog whose texts carry :data:`MARK`, conversations in four states, chat
memory, scoped memory records, a pending extraction job, a document of a
collection, an erasure event, a gateway call and an API key. Tenant B
(``bravo``) has the same catalog codes with its own texts (never the mark),
so a route that resolved a code or an id in the wrong tenant answers with
A's text, and an admin key. :func:`dump_rows` reads every row A owns, for a
before/after comparison.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from server_helpers import import_yaml
from sqlalchemy.ext.asyncio import AsyncConnection

from pilothouse.server._state import ServerState
from pilothouse.store import Database, NewGatewayCall, record_gateway_call
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel
from pilothouse.types import MemoryScope, TextDocument

A = "acme"
B = "bravo"
MARK = "qx-acme-private-7301"
"""In every text of A's (catalog, messages, memory, documents, key name): never in B's sight."""

MEMORY_ID = "acme-chat"
"""A's chat memory id (B may well pick the same one: it must stay B's own)."""


def catalog(mark: str) -> str:
    """One tenant's catalog: the same codes for both, ``mark`` in its texts."""
    builder = (
        CatalogBuilder()
        .provider("LOCL", kind="local")
        .model(
            "MINILM",
            provider="LOCL",
            model_name="all-MiniLM-L6-v2",
            capabilities=["EM"],
            dimension=384,
            max_input_tokens=256,
        )
        .add("memory_strategies", code="SCPD", kind="SCOPED", window_size=10)
        .add("vector_stores", code="EMBED")
        .add("document_collections", code="HANDBOOK", store="EMBED", collection_name="handbook")
        .action(
            "ECHO",
            name=f"Echo {mark}",
            goal_description=f"Answers questions for {mark}.",
            prompt=f"You are the assistant of {mark}.",
            memory_strategy="SCPD",
        )
        .application("APP", name=f"App of {mark}")
        .agent("HELPER", application="APP", goal_action="ECHO", prompt=f"Helper of {mark}.")
        .skill("GREET", prompt=f"Greet the user of {mark}.", name=f"Greeting {mark}")
        .add(
            "tools",
            code="ADD",
            name="add",
            kind="python",
            implementation="mcp_tool_helpers:add",
            description=f"Add two numbers for {mark}.",
        )
        # A virtual MCP server of the same code in both tenants: B's path
        # must serve B's bundle of B's tools.
        .add(
            "virtual_servers", code="DESK", name=f"Desk of {mark}", actions=["ECHO"], tools=["ADD"]
        )
    )
    if mark == MARK:
        # Codes B does not have at all: a lookup must not fall through to A's.
        builder = builder.action(
            "ACMEONLY", prompt=f"Only {mark} has this.", name=f"Acme only {mark}"
        ).configuration("ACFG", max_tokens=64, name=f"Acme configuration {mark}")
        # A budget whose name and ledger row B must never see.
        builder = builder.add("budgets", code="ACMEBDGT", name=f"Budget of {mark}", turns=1_000_000)
        # A virtual server only A has: B's key at its path reads it as unknown.
        builder = builder.add(
            "virtual_servers", code="ACMEVS", name=f"Servers of {mark}", actions=["ACMEONLY"]
        )
    return builder.yaml()


async def seed_tenants(database: Database) -> None:
    """A's and B's catalogs (a template seed: compared by identity, seeded once)."""
    await import_yaml(database, A, [], catalog(MARK))
    await import_yaml(database, B, [], catalog("bravo"))


@dataclass(frozen=True)
class World:
    """A's objects and B's key, as a walk names them."""

    b_key: str
    b_prefix: str
    a_key: str
    """An admin key of A's (the walk's control: A's own key does read A's text)."""
    done: str
    """A's completed conversation (uuid)."""
    new: str
    """A's conversation not started (NS)."""
    waiting: str
    """A's conversation waiting for answers (WA)."""
    stuck: str
    """A's stuck conversation (ST)."""
    memory_record: str
    """A's user-scope memory record (user ``alice``) id."""
    org_record: str
    """A's organization-scope memory record id."""
    document: str
    """The source of A's document in ``HANDBOOK``."""
    ingest_job: str
    """A's finished background ingestion job (its result names a source holding MARK)."""
    export_copy: str
    """A's completed conversation exported, A's texts taken out: what B might upload."""

    @property
    def conversations(self) -> tuple[str, ...]:
        """Every conversation uuid of A's."""
        return (self.done, self.new, self.waiting, self.stuck)


ALICE = MemoryScope("user", user_id="alice")


async def build_world(state: ServerState, scripted: ScriptedModel, database: Database) -> World:
    """Make A's objects through A's own facade, and B's key."""
    a = state.facade(A)
    scripted.script.steps.append(Reply(f"Noted, {MARK} reply."))
    done = await a.command.start_and_send(
        f"Remember {MARK} for me.",
        action="ECHO",
        memory_id=MEMORY_ID,
        runtime_config={"user_id": "alice"},
    )
    [job] = await a.memory.jobs()
    assert job["status"] == "pending", job
    new = (await a.command.start_conversation(action="ECHO")).uuid
    waiting = (await a.command.start_conversation(action="ECHO", memory_id=MEMORY_ID)).uuid
    stuck = (await a.command.start_conversation(action="ECHO")).uuid
    from pilothouse.store import Conversation

    async with database.sessions() as session, session.begin():
        # The states a crash or a question leaves; what B may do to them is the point.
        for uuid, status in ((waiting, "WA"), (stuck, "ST")):
            await session.execute(
                sa.update(Conversation).where(Conversation.uuid == uuid).values(status=status)
            )
    record = await a.memory.add(f"Alice's locker code is {MARK}.", ALICE, importance=0.9)
    org = await a.memory.add(
        f"Orders of {MARK} ship free.", MemoryScope("organization"), memory_type="policy"
    )
    source = "acme:handbook"
    result = await a.knowledge.ingest(
        "HANDBOOK", [TextDocument(source=source, text=f"The vault of {MARK} opens at nine.")]
    )
    assert result.count("added") == 1, result
    job = await a.knowledge.start_ingest(
        "HANDBOOK", [TextDocument(source=f"acme:{MARK}", text="The lift is on the left.")]
    )
    for _ in range(400):
        if (await a.knowledge.ingest_job(job.job_id)).status != "running":
            break
        await asyncio.sleep(0.05)
    assert (await a.knowledge.ingest_job(job.job_id)).status == "done"
    await a.memory.erase_user("zed", reason=f"asked by {MARK}")
    await record_gateway_call(
        database,
        NewGatewayCall(
            tenant=A,
            gateway="ACMEGW",
            tool=f"get_{MARK.replace('-', '_')}",
            operation=f"GET /vault/{MARK}",
            via="mcp",
            key_prefix=None,
            conversation_uuid=done.conversation_uuid,
            call_id=None,
            status_code=200,
            outcome="ok",
            latency_ms=1.0,
        ),
    )
    # A's dataset of its recorded turn, and a replay run of it: B names both.
    scripted.script.steps.append(Reply(f"Replayed, {MARK}."))
    await a.evaluation.create_dataset("aset", from_conversations=True, action="ECHO")
    await a.evaluation.replay("aset", run="arun")
    a_key, _ = await state.pilothouse.keys.create(tenant=A, name=f"ops {MARK}", admin=True)
    exported = json.dumps(await a.history.export(done.conversation_uuid), default=str)
    b_key, b_info = await state.pilothouse.keys.create(tenant=B, name="bravo admin", admin=True)
    # B's own memory of a user named alike, so B's lists are not empty.
    await state.facade(B).memory.add("Alice of bravo likes tea.", ALICE)
    return World(
        b_key=b_key,
        b_prefix=b_info.prefix,
        a_key=a_key,
        done=done.conversation_uuid,
        new=new,
        waiting=waiting,
        stuck=stuck,
        memory_record=record.id,
        org_record=org.id,
        document=source,
        ingest_job=job.job_id,
        export_copy=exported.replace(MARK, "copied"),
    )


NOT_TENANT_DATA: Mapping[str, str] = {
    "alembic_version": "the schema's revision: the deployment's, not a tenant's",
    "turn_owner": "the service processes holding turn leases: the deployment's",
    "knowledge_chunk_fts": "SQLite's full-text index of knowledge_chunk (dumped with it)",
    "knowledge_chunk_fts_config": "SQLite's full-text index internals",
    "knowledge_chunk_fts_data": "SQLite's full-text index internals",
    "knowledge_chunk_fts_docsize": "SQLite's full-text index internals",
    "knowledge_chunk_fts_idx": "SQLite's full-text index internals",
}
"""Tables without tenant rows, each with why; every other table must be A-attributable."""

_OWNED_BY: Mapping[str, tuple[str, str, str]] = {
    # Columns without a declared foreign key that still name A's rows:
    # (column, parent table, the parent's column it holds).
    "knowledge_chunk": ("collection_id", "document_collection", "id"),
    "ui_session": ("key_prefix", "api_key", "prefix"),
}


def _owner_conditions(connection: sa.Connection, tenant: str) -> dict[str, Any]:
    """For each table, the statement selecting the rows ``tenant`` owns."""
    inspector = sa.inspect(connection)
    metadata = sa.MetaData()
    metadata.reflect(connection)
    statements: dict[str, Any] = {}
    tables = metadata.tables
    for name, table in sorted(tables.items()):
        if name in NOT_TENANT_DATA:
            continue
        if "tenant" in table.c:
            statements[name] = sa.select(table).where(table.c.tenant == tenant)
            continue
        links: list[tuple[str, str, str]] = [
            (fk["constrained_columns"][0], fk["referred_table"], fk["referred_columns"][0])
            for fk in inspector.get_foreign_keys(name)
            if len(fk["constrained_columns"]) == 1
        ]
        if name in _OWNED_BY:
            links.append(_OWNED_BY[name])
        owned = [
            table.c[column].in_(
                sa.select(tables[parent].c[held]).where(tables[parent].c.tenant == tenant)
            )
            for column, parent, held in links
            if "tenant" in tables[parent].c
        ]
        if not owned:
            raise AssertionError(
                f"table {name} has neither a tenant column nor a link to a tenant's row: "
                "say whose its rows are (tenant_world.NOT_TENANT_DATA or _OWNED_BY)"
            )
        statements[name] = sa.select(table).where(sa.or_(*owned))
    return statements


def _rows(connection: sa.Connection, tenant: str) -> dict[str, list[str]]:
    dump: dict[str, list[str]] = {}
    for name, statement in _owner_conditions(connection, tenant).items():
        rows = connection.execute(statement).mappings().all()
        dump[name] = sorted(repr(sorted(row.items())) for row in rows)
    return dump


async def dump_rows(database: Database, tenant: str) -> dict[str, list[str]]:
    """Every row ``tenant`` owns, per table, as sorted text (to compare before and after)."""
    async with database.engine.connect() as connection:
        return await _run(connection, tenant)


async def _run(connection: AsyncConnection, tenant: str) -> dict[str, list[str]]:
    return await connection.run_sync(_rows, tenant)
