"""``run_action``s run concurrently, one at a time per ``memoryId``, in delivery order.

Memory bus, SQLite and PostgreSQL; through tansu and NATS in
``tests/real/test_events_actions_real.py``.
"""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from collections.abc import AsyncIterator

import anyio
import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from pilothouse.api import Pilothouse
from pilothouse.events import EventService, MemoryBus, RunAction, encode
from pilothouse.settings import Settings
from pilothouse.store import Database

pytestmark = pytest.mark.anyio

CATALOG = """
providers:
  - code: TEST
    kind: test
models:
  - code: TESTM
    provider: TEST
    model_name: test
configurations:
  - code: DFLT
    max_tokens: 64
actions:
  - code: ECHO
    model: TESTM
    configuration: DFLT
    prompt: Echo the user.
    ask_user: false
"""


class Tally:
    """The model: counts its calls in flight, in all and per memory (``memory#index``)."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most = 0
        self.per_memory: Counter[str] = Counter()
        self.most_per_memory = 0
        self.order: defaultdict[str, list[int]] = defaultdict(list)

    def model(self) -> FunctionModel:
        async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
            del info
            text = ""
            for message in messages:
                if isinstance(message, ModelRequest):
                    for part in message.parts:
                        if isinstance(part, UserPromptPart) and isinstance(part.content, str):
                            text = part.content  # the newest user prompt
            memory, _, index = text.partition("#")
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            self.per_memory[memory] += 1
            self.most_per_memory = max(self.most_per_memory, self.per_memory[memory])
            self.order[memory].append(int(index))
            try:
                # Company for the first call (bounded; one at a time only takes longer).
                with anyio.move_on_after(5):
                    while self.most < 2:
                        await anyio.sleep(0.01)
                await anyio.sleep(0.01)
            finally:
                self.in_flight -= 1
                self.per_memory[memory] -= 1
            return ModelResponse(parts=[TextPart(f"done {text}")])

        return FunctionModel(answer, model_name="tally")


@pytest.fixture
def tally() -> Tally:
    return Tally()


@pytest.fixture
async def ph(database: Database, tally: Tally) -> AsyncIterator[Pilothouse]:
    settings = Settings(database_url=database.url)
    async with Pilothouse(settings, database=database, model=tally.model()) as facade:
        await facade.catalog.import_text(CATALOG)
        yield facade


async def test_actions_run_concurrently_and_in_delivery_order_per_memory(
    ph: Pilothouse, tally: Tally
) -> None:
    bus = MemoryBus()
    service = EventService(ph, bus, action_topic="actions", concurrency=3)
    for index in range(3):
        for memory in range(3):
            command = RunAction(
                action="ECHO",
                input=f"m{memory}#{index}",
                memory_id=f"m{memory}",
                correlation_id=f"c-{memory}-{index}",
                reply_to="replies",
            )
            await bus.publish("actions", encode(command))
    async with anyio.create_task_group() as group:
        await group.start(service.run)
        with anyio.fail_after(60):
            while len(bus.messages("replies")) < 9:
                await anyio.sleep(0.02)
        group.cancel_scope.cancel()
    answers = [json.loads(m) for m in bus.messages("replies")]
    assert sorted(a["output"] for a in answers) == sorted(
        f"done m{m}#{i}" for m in range(3) for i in range(3)
    )
    assert tally.most > 1
    assert tally.most_per_memory == 1
    assert dict(tally.order) == {f"m{m}": [0, 1, 2] for m in range(3)}
    assert len((await ph.query.list_conversations(limit=20)).items) == 9
