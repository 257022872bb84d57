"""A cancel that arrives while a turn is still being prepared stops that turn.

Between a message's arrival and the statement that takes the conversation,
the turn checks its input and compiles its action. A cancel in that window
found no running turn, terminated the idle conversation, and the turn then
took it (a terminated conversation takes new messages) and ran to the end:
the cancel was lost. The turn is cancellable from its arrival on.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_cancel_across_processes import cancel_while_prepared
from test_tool_loop import FakeSource, events, start, stored

from pilothouse.catalog._enums import ProcessStatus, TimelineKind
from pilothouse.runtime import Runner, TurnResult
from pilothouse.store import Database
from pilothouse.testing import Reply, ScriptedModel

pytestmark = pytest.mark.anyio

RunnerFactory = Callable[..., Runner]


async def test_a_cancel_while_the_turn_is_prepared_stops_it_before_the_model(
    catalog: Database, make_runner: RunnerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = ScriptedModel([Reply("too late")])
    uuid = await start(catalog, "TOOLS")
    runner = make_runner(model, tool_source=FakeSource({}))
    result, cancelled = await cancel_while_prepared(
        runner,
        monkeypatch,
        lambda: runner.send_message(uuid, "Hi"),
        lambda: runner.cancel(uuid, wait=0),
    )
    assert cancelled
    await assert_ended_before_the_model(catalog, uuid, result, model)


async def test_a_cancel_while_a_named_conversation_is_prepared_stops_its_first_turn(
    catalog: Database, make_runner: RunnerFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A caller that names the new conversation's uuid (the service's stream
    # ids) can cancel it before its row exists.
    model = ScriptedModel([Reply("too late")])
    runner = make_runner(model, tool_source=FakeSource({}))
    uuid = "6f1c2a9e-0d4b-4c1e-9a53-2b7d8e0f4a11"
    result, cancelled = await cancel_while_prepared(
        runner,
        monkeypatch,
        lambda: runner.start_and_send("TOOLS", None, "Hi", conversation_uuid=uuid),
        lambda: runner.cancel(uuid, wait=0),
    )
    assert cancelled
    await assert_ended_before_the_model(catalog, uuid, result, model)


async def assert_ended_before_the_model(
    catalog: Database, uuid: str, result: TurnResult, model: ScriptedModel
) -> None:
    """The turn ended ``TE`` with no model call, and its record shows none."""
    assert result.status is ProcessStatus.TERMINATED
    assert model.requests == []
    conversation, _, _ = await stored(catalog, uuid)
    assert conversation.status is ProcessStatus.TERMINATED
    # Nor does the record show a request, or usage, for a call never made.
    assert TimelineKind.REQUEST not in [event.kind for event in await events(catalog, uuid)]
    assert conversation.input_tokens == 0
