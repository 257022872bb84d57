"""Round trips to PostgreSQL per governed turn, counted on the wire.

A loopback proxy between pilothouse and the server reads the server's
messages and counts ReadyForQuery: the server sends one at the end of each
exchange the client waits for (a simple query such as BEGIN, a prepare, a
statement's Sync; a pipelined executemany ends in one). That is the round
trip count, whatever the driver does inside. A step too large for one
statement is written statement by statement, with the same rows.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from sqlalchemy import select
from sqlalchemy.engine import make_url

from pilothouse.api import Pilothouse
from pilothouse.catalog import Action, Configuration, Model, Provider
from pilothouse.catalog._enums import MessageRole, ProviderKind, TimelineKind
from pilothouse.providers import SecretResolver
from pilothouse.settings import Settings
from pilothouse.store import (
    Database,
    Message,
    NewEvent,
    NewMessage,
    SqlTurnStore,
    TimelineEvent,
    TurnBatch,
)
from pilothouse.store._steps import MAX_ROWS
from pilothouse.testing import CatalogBuilder, Reply, ScriptedModel, ToolCall, override
from pilothouse.tools import ToolRegistry

pytestmark = [pytest.mark.anyio, pytest.mark.postgres]

TURN_ROUND_TRIPS = 2
"""A first turn: the catalog check with the conversation and its first step; the ending."""

NEXT_TURN_ROUND_TRIPS = 4
"""A later turn: the conversation's codes (to compile its action before anything is
written), its state, the take with its first step, the ending."""


@pytest.fixture(params=[pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(postgres_database_url: str) -> str:
    """Only PostgreSQL: the round trips are asyncpg's."""
    return postgres_database_url


class WireCounter:
    """A TCP proxy to PostgreSQL that counts the server's ReadyForQuery messages."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.ready = 0
        self.port = 0
        self._server: asyncio.Server | None = None
        self.executed: list[str] = []
        """The SQL of each statement the client ran, in order (prepared once, bound each time)."""
        self._prepared: dict[bytes, str] = {}

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        assert self._server is not None
        self._server.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        await asyncio.gather(
            self._pipe(reader, up_writer, count=False),
            self._pipe(up_reader, writer, count=True),
        )

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, count: bool
    ) -> None:
        pending = b""
        # The client's first message (startup or SSL request) has no type byte.
        started = count
        try:
            while data := await reader.read(65536):
                writer.write(data)
                await writer.drain()
                if count:
                    pending = self._count(pending + data)
                elif started:
                    pending = self._statements(pending + data)
                else:
                    started = True
                    pending = self._statements(data[int.from_bytes(data[:4], "big") :])
        except ConnectionError:
            pass  # either side hung up: the other is closed below
        finally:
            writer.close()

    def _statements(self, buffer: bytes) -> bytes:
        # Client messages: Parse names a statement and gives its SQL, Bind
        # runs a named one, Query runs SQL at once.
        while len(buffer) >= 5:
            length = int.from_bytes(buffer[1:5], "big")
            if len(buffer) < 1 + length:
                break
            kind, body = buffer[0:1], buffer[5 : 1 + length]
            if kind == b"P":
                name, sql = body.split(b"\0")[:2]
                self._prepared[name] = sql.decode()
            elif kind == b"B":
                name = body.split(b"\0")[1]
                self.executed.append(self._prepared.get(name, ""))
            elif kind == b"Q":
                self.executed.append(body.rstrip(b"\0").decode())
            buffer = buffer[1 + length :]
        return buffer

    def _count(self, buffer: bytes) -> bytes:
        # Server messages: one type byte, then a length that counts itself.
        while len(buffer) >= 5:
            length = int.from_bytes(buffer[1:5], "big")
            if len(buffer) < 1 + length:
                break
            if buffer[0:1] == b"Z":
                self.ready += 1
            buffer = buffer[1 + length :]
        return buffer


@pytest.fixture
async def counted(database: Database) -> AsyncIterator[tuple[WireCounter, str]]:
    """The proxy, and the test database's URL through it (no TLS, so it can be read)."""
    url = make_url(database.url)
    proxy = WireCounter(url.host or "127.0.0.1", url.port or 5432)
    await proxy.start()
    async with database.sessions.begin() as session:
        provider = Provider(tenant="default", code="TEST", kind=ProviderKind.TEST)
        model = Model(tenant="default", code="TESTM", provider=provider, model_name="test")
        configuration = Configuration(tenant="default", code="DFLT", max_tokens=64)
        session.add(
            Action(
                tenant="default",
                code="SAY",
                model=model,
                configuration=configuration,
                prompt="Say it.",
            )
        )
    through = url.set(host="127.0.0.1", port=proxy.port, query={"ssl": "disable"})
    yield proxy, through.render_as_string(hide_password=False)
    await proxy.stop()


async def test_a_governed_turn_costs_at_most_a_few_round_trips(
    counted: tuple[WireCounter, str],
) -> None:
    proxy, url = counted
    model = ScriptedModel(["one", "two", "three", "five"])
    with override(model=model):
        async with Pilothouse(Settings(database_url=url)) as ph:
            await _turns(ph, proxy)


async def _turns(ph: Pilothouse, proxy: WireCounter) -> None:
    # The first turns prepare the statements and read the catalog.
    warm = await ph.command.start_and_send("hello", action="SAY")
    await ph.command.send_message(warm.conversation_uuid, "hello again")
    before = proxy.ready
    result = await ph.command.start_and_send("one more", action="SAY")
    assert result.error is None
    assert proxy.ready - before <= TURN_ROUND_TRIPS
    before = proxy.ready
    later = await ph.command.send_message(result.conversation_uuid, "and again")
    assert later.error is None
    assert proxy.ready - before <= NEXT_TURN_ROUND_TRIPS
    transcript = await ph.query.get_conversation_messages(result.conversation_uuid)
    assert [m.content for m in transcript][-4:] == ["one more", "three", "and again", "five"]


@pytest.mark.parametrize("budgets", [1, 3])
async def test_a_budgeted_turn_costs_the_round_trips_of_one_without(
    counted: tuple[WireCounter, str], budgets: int
) -> None:
    """The hold rides in the start's statement, the settle in the ending's, for every budget."""
    proxy, url = counted
    model = ScriptedModel(["one", "two"])
    builder = CatalogBuilder().add("budgets", code="TURNS", turns=1000)
    if budgets == 3:
        builder.add("budgets", code="DAY", period="day", turns=1000, money="5")
        builder.add("budgets", code="SAYS", scope="action", match="SAY", turns=1000)
    with override(model=model):
        async with Pilothouse(Settings(database_url=url)) as ph:
            await builder.import_into(ph)
            # The period's first call makes the ledger row, on its own.
            await ph.command.start_and_send("warm up", action="SAY")
            before, executed = proxy.ready, len(proxy.executed)
            result = await ph.command.start_and_send("hello", action="SAY")
            assert result.text == "two"
            assert proxy.ready - before == TURN_ROUND_TRIPS
            start, end = proxy.executed[executed:]
            assert "INSERT INTO conversation" in start and "UPDATE budget_usage" in start
            assert "UPDATE conversation" in end and "UPDATE budget_usage" in end
            statuses = await ph.query.budget_status()
    spent = sorted((status.budget, status.spent["turns"]) for status in statuses)
    codes = ["DAY", "SAYS", "TURNS"] if budgets == 3 else ["TURNS"]
    assert spent == [(code, "2") for code in codes], statuses


async def test_a_new_conversation_without_a_key_reads_no_key_for_its_budgets(
    counted: tuple[WireCounter, str],
) -> None:
    """A budget per API key does not send a new conversation's turn to read its key."""
    proxy, url = counted
    model = ScriptedModel(["one", "two"])
    builder = CatalogBuilder().add("budgets", code="TURNS", turns=1000)
    builder.add("budgets", code="PERKEY", scope="api_key", turns=1000)
    with override(model=model):
        async with Pilothouse(Settings(database_url=url)) as ph:
            await builder.import_into(ph)
            await ph.command.start_and_send("warm up", action="SAY")
            before = proxy.ready
            result = await ph.command.start_and_send("hello", action="SAY")
            assert result.text == "two"
            # The start (carrying the hold) and the ending: no read of the
            # conversation's key, which a keyless new conversation has not.
            assert proxy.ready - before == TURN_ROUND_TRIPS
            statuses = await ph.query.budget_status()
    spent = {status.budget: status.spent["turns"] for status in statuses}
    assert spent == {"TURNS": "2", "PERKEY": "0"}, statuses


@pytest.mark.parametrize("size", [MAX_ROWS, MAX_ROWS + 1])
async def test_a_step_too_large_for_one_statement_is_written_statement_by_statement(
    database: Database, size: int
) -> None:
    store = SqlTurnStore(database)
    conversation = await store.create("default", action_code="A", agent_code=None)
    handle = await store.begin_turn("default", conversation.uuid)
    messages = [NewMessage(MessageRole.USER, f"m{i}") for i in range(size)]
    events = [NewEvent(TimelineKind.REQUEST, {"i": i}) for i in range(size)]
    assert await store.write(handle, TurnBatch(messages=messages, events=events)) == list(
        range(1, size + 1)
    )
    async with database.sessions() as session:
        stored = (
            await session.scalars(
                select(Message.content)
                .where(Message.conversation_id == handle.conversation_id)
                .order_by(Message.sequence)
            )
        ).all()
        kinds = (
            await session.scalars(
                select(TimelineEvent.data)
                .where(TimelineEvent.conversation_id == handle.conversation_id)
                .order_by(TimelineEvent.sequence)
            )
        ).all()
    assert stored == [f"m{i}" for i in range(size)]
    # The turn's start event, then the step's.
    assert kinds[1:] == [{"i": i} for i in range(size)]


async def test_a_turn_nobody_watches_commits_its_start_without_waiting_for_the_disk(
    counted: tuple[WireCounter, str],
) -> None:
    """With the operator's lazy start, the start's commit does not wait for the log's flush.

    The ending's commit, which flushes both, does.

    A streamed turn's start waits: its text reaches the caller before the ending is written.
    """
    proxy, url = counted
    model = ScriptedModel(["one", "two", "three", "four"])
    relaxed = "set_config"
    with override(model=model):
        async with Pilothouse(Settings(database_url=url, database_lazy_start=True)) as ph:
            await ph.command.start_and_send("warm up", action="SAY")
            before = len(proxy.executed)
            plain = await ph.command.start_and_send("hello", action="SAY")
            assert plain.text == "two"
            start, end = proxy.executed[before:]
            assert relaxed in start and "INSERT INTO conversation" in start
            assert relaxed not in end and "UPDATE conversation" in end
            before = len(proxy.executed)
            later = await ph.command.send_message(plain.conversation_uuid, "again")
            assert later.text == "three"
            *_, take, end = proxy.executed[before:]
            assert relaxed in take and relaxed not in end
            before = len(proxy.executed)
            events = [e async for e in ph.command.start_and_stream("streamed", action="SAY")]
            assert events
            assert not [sql for sql in proxy.executed[before:] if relaxed in sql]
            transcript = await ph.query.get_conversation_messages(plain.conversation_uuid)
            assert [m.content for m in transcript][-4:] == ["hello", "two", "again", "three"]


def lookup(city: str) -> str:
    """Say the weather of ``city``."""
    return f"sunny in {city}"


async def test_a_turn_that_may_run_a_tool_waits_for_the_disk_at_its_start(
    counted: tuple[WireCounter, str],
) -> None:
    """A tool may act on the world before the turn's next write: its start must be durable first."""
    proxy, url = counted
    registry = ToolRegistry(SecretResolver({}))
    registry.register(lookup)
    model = ScriptedModel([Reply("warm"), ToolCall("lookup", {"city": "Oslo"}), Reply("Sunny.")])
    settings = Settings(database_url=url, database_lazy_start=True)
    async with Pilothouse(settings, model=model, tools=registry) as ph:
        await (
            CatalogBuilder()
            .tool("LOOKUP", name="lookup", kind="python", implementation="lookup")
            .action("WEATHER", prompt="Answer about weather.", tools=["LOOKUP"], ask_user=False)
            .import_into(ph)
        )
        await ph.command.start_and_send("warm up", action="WEATHER")
        before = len(proxy.executed)
        result = await ph.command.start_and_send("Weather in Oslo?", action="WEATHER")
        assert result.text == "Sunny."
        executed = proxy.executed[before:]
        assert "INSERT INTO conversation" in executed[0]
        assert not [sql for sql in executed if "set_config" in sql]


async def test_by_default_every_write_of_a_turn_waits_for_the_disk(
    counted: tuple[WireCounter, str],
) -> None:
    """Without ``database_lazy_start`` a turn nobody watches commits its start durably too."""
    proxy, url = counted
    with override(model=ScriptedModel(["one", "two"])):
        async with Pilothouse(Settings(database_url=url)) as ph:
            await ph.command.start_and_send("warm up", action="SAY")
            before = len(proxy.executed)
            answered = await ph.command.start_and_send("hello", action="SAY")
            assert answered.text == "two"
            start, end = proxy.executed[before:]
            assert "INSERT INTO conversation" in start and "UPDATE conversation" in end
            assert not [sql for sql in (start, end) if "set_config" in sql]
