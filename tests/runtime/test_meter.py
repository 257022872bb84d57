"""The run loop's measurements reach ``Pilothouse(meter=...)`` with low-cardinality labels."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from pilothouse.api import Pilothouse
from pilothouse.errors import RateLimitError
from pilothouse.providers import SecretResolver
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, Fail, Reply, ScriptedModel, ToolCall
from pilothouse.tools import ToolRegistry
from pilothouse.types import Meter, ProcessStatus, TurnEvent

pytestmark = pytest.mark.anyio


def lookup(city: str) -> str:
    """Look a city's weather up."""
    return f"sunny in {city}"


@dataclass
class RecordingMeter:
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=lambda: [])

    def turn(self, **labels: Any) -> None:
        self.calls.append(("turn", labels))

    def model_call(self, **labels: Any) -> None:
        self.calls.append(("model_call", labels))

    def retry(self, **labels: Any) -> None:
        self.calls.append(("retry", labels))

    def tool_call(self, **labels: Any) -> None:
        self.calls.append(("tool_call", labels))

    def budget_alert(self, **labels: Any) -> None:
        self.calls.append(("budget_alert", labels))

    def budget_downgrade(self, **labels: Any) -> None:
        self.calls.append(("budget_downgrade", labels))

    def queue_wait(self, **labels: Any) -> None:
        self.calls.append(("queue_wait", labels))

    def of(self, kind: str) -> list[dict[str, Any]]:
        return [labels for name, labels in self.calls if name == kind]


async def test_a_turn_reports_model_calls_retries_tools_and_first_tokens(
    database_url: str,
) -> None:
    registry = ToolRegistry(SecretResolver({}))
    registry.register(lookup)
    model = ScriptedModel(
        [
            Fail(RateLimitError("throttled")),
            ToolCall("lookup", {"city": "Oslo"}),
            Reply("It is sunny.", output_tokens=4),
        ]
    )
    meter = RecordingMeter()
    checked: Meter = meter  # the recording meter satisfies the public protocol
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model, tools=registry, meter=checked) as ph:
        await (
            CatalogBuilder()
            .tool("LOOKUP", name="lookup", kind="python", implementation="lookup")
            .action("WEATHER", prompt="Answer about weather.", tools=["LOOKUP"], ask_user=False)
            .import_into(ph)
        )
        seen: list[TurnEvent] = []
        # A listener that wants deltas makes the calls stream: time to first token.
        ph.subscribe(seen.append, deltas=True)
        result = await ph.command.start_and_send("Weather in Oslo?", action="WEATHER")
    assert result.status is ProcessStatus.COMPLETED, result.error

    calls = meter.of("model_call")
    assert [c["status"] for c in calls] == ["RateLimitError", "ok", "ok"]
    assert {(c["provider"], c["model"], c["action"]) for c in calls} == {
        ("TEST", "scripted", "WEATHER")
    }
    assert all(c["seconds"] >= 0 for c in calls)
    streamed = [c for c in calls if c["first_token_seconds"] is not None]
    assert streamed, "a streamed answer reports its time to first token"
    assert all(0 <= c["first_token_seconds"] <= c["seconds"] for c in streamed)

    assert meter.of("retry") == [
        {"provider": "TEST", "model": "scripted", "action": "WEATHER", "error": "RateLimitError"}
    ]
    (tool,) = meter.of("tool_call")
    assert (tool["tool"], tool["action"], tool["status"]) == ("lookup", "WEATHER", "succeeded")

    (turn,) = meter.of("turn")
    assert turn["status"] == "CO"
    assert turn["action"] == "WEATHER"
    assert turn["output_tokens"] == result.output_tokens
    # No label anywhere names the conversation.
    for _, labels in meter.calls:
        assert result.conversation_uuid not in map(str, labels.values())


# PostgreSQL only: SQLite transactions run on their own runner, without the slot queue.
@pytest.mark.postgres
async def test_a_transaction_that_waits_for_a_slot_reports_its_queue_wait(
    postgres_database_url: str,
) -> None:
    import anyio

    from pilothouse.store import Database

    database_url = postgres_database_url
    waits: list[float] = []
    # Two connections: one transaction slot (a tenth stays free for sessions).
    database = Database(database_url, pool_size=1, max_overflow=1)
    database.on_wait = waits.append
    try:
        release = anyio.Event()
        entered = anyio.Event()

        def hold(_connection: Any) -> None:
            return None

        async def first() -> None:
            async with database._slots:
                entered.set()
                await release.wait()

        async with anyio.create_task_group() as group:
            group.start_soon(first)
            await entered.wait()
            group.start_soon(database.transaction, hold)
            await anyio.sleep(0.05)
            release.set()
        assert len(waits) == 1 and waits[0] > 0
    finally:
        await database.dispose()


class _HeldTool:
    """A tool that answers once ``release`` is set; the first call enters at once."""

    def __init__(self) -> None:
        import anyio

        self.release = anyio.Event()
        self.entered = anyio.Event()

    @property
    def definition(self) -> Any:
        raise AssertionError("not offered to a model here")

    @property
    def kind(self) -> Any:
        from pilothouse.types import ToolKind

        return ToolKind.PYTHON

    @property
    def policy(self) -> Any:
        from pilothouse.types import ExecutionPolicy

        return ExecutionPolicy.ALLOW

    async def execute(self, arguments: Any, context: Any) -> Any:
        from pilothouse.tools import ToolResult

        self.entered.set()
        await self.release.wait()
        return ToolResult(f"done {arguments['n']}")


async def test_a_tool_call_that_waits_for_a_concurrency_slot_reports_its_queue_wait() -> None:
    import anyio

    from pilothouse.runtime._repair import RepairedCall
    from pilothouse.runtime._telemetry import Telemetry
    from pilothouse.runtime._toolexec import ToolExecutor

    meter = RecordingMeter()
    executor = ToolExecutor(concurrency=1, telemetry=Telemetry(meter=meter), action="HELD")
    tool = _HeldTool()
    calls = [(RepairedCall(f"c{n}", "held", {"n": n}), tool) for n in range(2)]
    results: list[Any] = []

    async def run() -> None:
        results.extend(await executor.run(calls, tenant="default", conversation_uuid="conv"))

    async with anyio.create_task_group() as group:
        group.start_soon(run)
        await tool.entered.wait()
        # The second call is queued behind the first (one slot).
        await anyio.sleep(0.05)
        tool.release.set()
    assert [r.content for r in results] == ["done 0", "done 1"]
    (wait,) = meter.of("queue_wait")
    assert wait["queue"] == "tool_slot" and wait["seconds"] > 0
    assert [t["status"] for t in meter.of("tool_call")] == ["succeeded", "succeeded"]
    assert {t["action"] for t in meter.of("tool_call")} == {"HELD"}


async def test_budget_alerts_and_downgrades_reach_the_meter(database_url: str) -> None:
    model = ScriptedModel([Reply("ok", input_tokens=10, output_tokens=10)] * 3)
    meter = RecordingMeter()
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model, meter=meter) as ph:
        await (
            CatalogBuilder()
            .model("PRICED", provider="TEST", model_name="p", input_price=100, output_price=100)
            .model("CHEAP", provider="TEST", model_name="c", input_price=1, output_price=1)
            .configuration("SMAL", max_tokens=10, retry_delay=0)
            .action("ASK", prompt="Hi.", model="PRICED", configuration="SMAL", ask_user=False)
            .add("budgets", code="WATCH", turns=4, on_limit="alert", thresholds=[50])
            .add(
                "budgets",
                code="CAP",
                turns=2,
                scope="action",
                on_limit="downgrade",
                downgrade_to="CHEAP",
            )
            .import_into(ph)
        )
        for _ in range(3):
            result = await ph.command.start_and_send("Hi", action="ASK")
            assert result.status is ProcessStatus.COMPLETED, result.error
    # The second turn takes WATCH to 50 %; the third runs on CHEAP.
    assert meter.of("budget_alert") == [{"budget": "WATCH", "scope": "tenant", "threshold": 50}]
    assert meter.of("budget_downgrade") == [{"budget": "CAP", "model": "CHEAP"}]
