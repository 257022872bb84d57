"""The facade as the one door: tenant views, ad-hoc runs, error categories, content filters.

Turns run on :class:`~pilothouse.testing.ScriptedModel` over a catalog of
two tenants; the faces' own tests (``tests/server``, ``tests/cli``) check
the same operations over HTTP and the command line.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from pilothouse.api import Pilothouse
from pilothouse.errors import (
    ContentFilterError,
    ErrorCategory,
    ForbiddenError,
    InvalidFieldError,
    InvalidStateError,
    NotFoundError,
    PilothouseError,
    ProviderAuthError,
    RateLimitError,
    StaleVersionError,
    TooManyRequestsError,
    UnauthorizedError,
)
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import Fail, Json, Reply, ScriptedModel, ToolCall
from pilothouse.types import (
    AdHocRun,
    ChatMemory,
    FinishReason,
    MessageRole,
    ModelEndpoint,
    ProcessStatus,
    StatusChanged,
    TextDelta,
    TurnEvent,
    TurnFinished,
)
from test_api import seed_catalog

pytestmark = pytest.mark.anyio


@pytest.fixture
def model() -> ScriptedModel:
    return ScriptedModel([])


@pytest.fixture
async def ph(database: Database, model: ScriptedModel) -> AsyncIterator[Pilothouse]:
    await seed_catalog(database)
    await seed_catalog(database, tenant="acme")
    # Ad-hoc runs here name endpoints on loopback, which the operator allows.
    settings = Settings(database_url=database.url, egress_allow=["127.0.0.1"])
    async with Pilothouse(settings, database=database, model=model) as facade:
        yield facade


# --- tenants are views ---------------------------------------------------------


async def test_a_tenant_view_shares_the_run_loop_and_sees_only_its_tenant(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    acme = ph.for_tenant("acme")
    assert (ph.tenant, acme.tenant) == ("default", "acme")
    model.script.steps.extend([Reply("for default"), Reply("for acme")])
    mine = await ph.command.start_and_send("hi", action="SUMMARIZE")
    theirs = await acme.command.start_and_send("hi", action="SUMMARIZE")
    assert (mine.output, theirs.output) == ("for default", "for acme")
    assert await ph.query.find_conversation(theirs.conversation_uuid) is None
    assert await acme.query.find_conversation(mine.conversation_uuid) is None
    assert (await acme.query.get_conversation(theirs.conversation_uuid)).tenant == "acme"
    # Both tenants' runners are views of one runtime: one model factory,
    # compiler, tool source and registry of running turns.
    shared = ph._shared
    assert acme._shared is shared
    default_runner, acme_runner = shared.runner("default"), shared.runner("acme")
    assert (default_runner.tenant, acme_runner.tenant) == ("default", "acme")
    assert default_runner.runtime is acme_runner.runtime is shared.runtime()


async def test_closing_a_view_closes_nothing(ph: Pilothouse, model: ScriptedModel) -> None:
    async with ph.for_tenant("acme") as acme:
        assert [a.code for a in await acme.query.get_all_actions()] == ["QUIET", "SUMMARIZE"]
    await acme.aclose()
    model.script.steps.append(Reply("still open"))
    result = await ph.command.start_and_send("hi", action="SUMMARIZE")
    assert result.output == "still open"


async def test_subscribers_hear_their_own_tenant_only(ph: Pilothouse, model: ScriptedModel) -> None:
    heard: dict[str, list[str]] = {"default": [], "acme": []}

    def listener(tenant: str) -> Callable[[TurnEvent], None]:
        def hear(event: TurnEvent) -> None:
            heard[tenant].append(event.conversation_uuid)

        return hear

    acme = ph.for_tenant("acme")
    ph.subscribe(listener("default"), deltas=False)
    acme.subscribe(listener("acme"), deltas=False)
    model.script.steps.extend([Reply("a"), Reply("b")])
    mine = await ph.command.start_and_send("hi", action="SUMMARIZE")
    theirs = await acme.command.start_and_send("hi", action="SUMMARIZE")
    assert set(heard["default"]) == {mine.conversation_uuid}
    assert set(heard["acme"]) == {theirs.conversation_uuid}


async def test_a_subscriber_to_a_conversation_hears_it_only_from_its_own_tenant(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    acme = ph.for_tenant("acme")
    model.script.steps.extend([Reply("first"), Reply("second")])
    mine = await ph.command.start_and_send("hi", action="SUMMARIZE")
    heard: dict[str, list[TurnEvent]] = {"default": [], "acme": []}
    # Another tenant's view given this tenant's uuid hears nothing of it.
    acme.subscribe(heard["acme"].append, conversation_uuid=mine.conversation_uuid)
    ph.subscribe(heard["default"].append, conversation_uuid=mine.conversation_uuid)
    await ph.command.send_message(mine.conversation_uuid, "again")
    assert heard["default"] and heard["acme"] == []
    assert not ph._shared.hub.wants_deltas(mine.conversation_uuid, "other")
    acme.unsubscribe(heard["acme"].append, conversation_uuid=mine.conversation_uuid)
    ph.unsubscribe(heard["default"].append, conversation_uuid=mine.conversation_uuid)
    assert not ph._shared.hub.active


async def test_the_facade_opens_nothing_until_used(tmp_path: Path) -> None:
    folder = tmp_path / "not-yet"
    ph = Pilothouse(Settings(database_url=f"sqlite+aiosqlite:///{folder / 'ph.db'}"))
    check = await ph.catalog.validate([Path(__file__).parents[1] / "examples" / "catalog"])
    assert check.entities > 0
    await ph.aclose()
    # Validating files needs no database: none was created.
    assert not folder.exists()


def test_the_package_exports_the_facade_lazily() -> None:
    code = (
        "import sys, pilothouse\n"
        "assert 'pilothouse.api' not in sys.modules, 'imported eagerly'\n"
        "from pilothouse import Pilothouse, SyncPilothouse\n"
        "import pilothouse.api as api\n"
        "assert Pilothouse is api.Pilothouse and SyncPilothouse is api.SyncPilothouse\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_public_type_resolves_and_importing_them_loads_no_run_loop() -> None:
    code = (
        "import sys, pilothouse.types as t\n"
        "assert 'pydantic_ai' not in sys.modules and 'pilothouse.runtime' not in sys.modules\n"
        "missing = [n for n in t.__all__ if getattr(t, n, None) is None]\n"
        "assert not missing, missing\n"
        "assert set(t.__all__) <= set(dir(t))\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


# --- ad-hoc runs ---------------------------------------------------------------


async def test_an_adhoc_run_with_an_output_schema_answers_parsed_json(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    }
    model.script.steps.append(Json({"city": "Paris"}))
    run = AdHocRun(
        name="Geographer",
        message="Capital of France?",
        model="TESTM",
        output_schema=schema,
        record={"caller": "test"},
    )
    done = await ph.command.run_adhoc(run)
    assert done.result.status is ProcessStatus.COMPLETED, done.result.error
    assert done.result.output == {"city": "Paris"}
    messages = await ph.query.get_conversation_messages(done.conversation_uuid)
    system = messages[0]
    assert system.role is MessageRole.SYSTEM
    assert "You are Geographer." in system.content
    assert '"city"' in system.content  # the schema block of the prompt
    assert system.data == {"invoke": {"caller": "test"}}


async def test_an_adhoc_run_with_chat_memory_continues_its_conversation(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.extend([Reply("one"), Reply("two")])
    memory = ChatMemory(memory_id="m-7")
    first = await ph.command.run_adhoc(
        AdHocRun(name="A", message="first", model="TESTM", memory=memory)
    )
    second = await ph.command.run_adhoc(
        AdHocRun(name="A", message="second", model="TESTM", memory=memory)
    )
    assert first.conversation_uuid == second.conversation_uuid
    assert (first.memory_id, second.memory_id) == ("m-7", "m-7")
    assert "first" in repr(model.requests[1].messages)


async def test_a_streamed_adhoc_run_yields_deltas_and_records_as_a_plain_one(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.extend([Reply("one two three"), Reply("four five")])
    memory = ChatMemory(memory_id="m-s")
    events = [
        event
        async for event in ph.command.stream_adhoc(
            AdHocRun(name="A", message="first", model="TESTM", memory=memory, record={"k": 1})
        )
    ]
    deltas = [e for e in events if isinstance(e, TextDelta)]
    finished = events[-1]
    assert isinstance(finished, TurnFinished)
    # The answer came in the model's pieces, in order, and they make the result.
    assert [d.text for d in deltas] == ["one ", "two ", "three"]
    assert finished.result.text == "one two three"
    assert finished.result.status is ProcessStatus.COMPLETED
    assert finished.result.output_tokens > 0
    uuid = finished.conversation_uuid
    assert {e.conversation_uuid for e in events} == {uuid}
    statuses = [(e.old, e.new) for e in events if isinstance(e, StatusChanged)]
    assert statuses == [
        (ProcessStatus.NOT_STARTED, ProcessStatus.RUNNING),
        (ProcessStatus.RUNNING, ProcessStatus.COMPLETED),
    ]
    # Recorded as run_adhoc records: the run's system message, the prompt, the answer.
    messages = await ph.query.get_conversation_messages(uuid)
    assert [m.role for m in messages] == [
        MessageRole.SYSTEM,
        MessageRole.USER,
        MessageRole.ASSISTANT,
    ]
    assert messages[0].data == {"invoke": {"k": 1}}
    assert messages[2].content == "one two three"
    conversation = await ph.query.get_conversation(uuid)
    assert conversation.memory_id == "m-s"
    assert conversation.output_tokens == finished.result.output_tokens
    # The same memory id continues the conversation, streamed or not.
    again = await ph.command.run_adhoc(
        AdHocRun(name="A", message="second", model="TESTM", memory=memory)
    )
    assert again.conversation_uuid == uuid
    assert "first" in repr(model.requests[1].messages)


async def test_an_adhoc_run_offers_ask_user_question_unless_told_not_to(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.extend([Reply("asked"), Reply("bare")])
    await ph.command.run_adhoc(AdHocRun(name="A", message="x", model="TESTM", memory=None))
    await ph.command.run_adhoc(
        AdHocRun(name="A", message="y", model="TESTM", memory=None, ask_user=False)
    )
    offered = [[t.name for t in r.info.function_tools] for r in model.requests]
    assert offered == [["AskUserQuestion"], []]


async def test_a_streamed_adhoc_run_refuses_before_any_event_and_writes_nothing(
    ph: Pilothouse,
) -> None:
    events: list[TurnEvent] = []
    with pytest.raises(InvalidFieldError) as refused:
        async for event in ph.command.stream_adhoc(
            AdHocRun(name="A", message="x", model="TESTM", collection="NONE")
        ):
            events.append(event)
    assert refused.value.field == "collection"
    assert events == []
    assert (await ph.query.list_conversations()).total == 0


@pytest.mark.parametrize(
    ("run", "field"),
    [
        (AdHocRun(name="A", message="x", model="NOSUCH"), "model"),
        (AdHocRun(name="A", message="x", model="TESTM", tools=("WEATHER", "NOPE")), "tools[1]"),
        (AdHocRun(name="A", message="x", model="TESTM", collection="NONE"), "collection"),
        (
            AdHocRun(name="A", message="x", model="TESTM", output_schema={"type": "nothing"}),
            "output_schema",
        ),
    ],
)
async def test_an_adhoc_run_refuses_what_it_cannot_honour_and_writes_nothing(
    ph: Pilothouse, run: AdHocRun, field: str
) -> None:
    with pytest.raises(InvalidFieldError) as refused:
        await ph.command.run_adhoc(run)
    assert refused.value.field == field
    assert refused.value.category is ErrorCategory.INVALID_INPUT
    assert (await ph.query.list_conversations()).total == 0


async def test_an_adhoc_run_on_an_endpoint_that_fails_is_a_failed_result(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.append(Fail(ProviderAuthError("refused")))
    endpoint = ModelEndpoint("http://127.0.0.1:9/v1", "m", api_key="sk-secret-value")
    done = await ph.command.run_adhoc(AdHocRun(name="A", message="x", model=endpoint))
    assert done.result.status is ProcessStatus.FAILED
    transcript = await ph.query.get_transcript(done.conversation_uuid)
    assert "sk-secret-value" not in transcript.model_dump_json()


# --- errors -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("error", "category"),
    [
        (PilothouseError("bad"), ErrorCategory.INVALID_INPUT),
        (InvalidFieldError("tools[0]", "unknown"), ErrorCategory.INVALID_INPUT),
        (NotFoundError("gone"), ErrorCategory.NOT_FOUND),
        (InvalidStateError("running"), ErrorCategory.INVALID_STATE),
        (StaleVersionError("stale"), ErrorCategory.CONFLICT),
        (UnauthorizedError("no key"), ErrorCategory.UNAUTHORIZED),
        (ForbiddenError("not admin"), ErrorCategory.FORBIDDEN),
        (TooManyRequestsError("slow down", 2.0), ErrorCategory.RATE_LIMITED),
        (RateLimitError("provider throttled"), ErrorCategory.UPSTREAM),
    ],
)
def test_every_error_has_its_category(error: PilothouseError, category: ErrorCategory) -> None:
    assert error.category is category


def test_a_provider_error_keeps_its_message_inside() -> None:
    error = ProviderAuthError("Incorrect API key provided: sk-abc")
    assert error.public_message == "the model provider failed (ProviderAuthError)"
    assert NotFoundError("action 'X' not found").public_message == "action 'X' not found"


@pytest.mark.parametrize(
    "step",
    [
        Fail(ContentFilterError("content filter: the prompt was refused")),
        Reply("partial", finish_reason="content_filter"),
    ],
    ids=["provider-error", "finish-reason"],
)
async def test_a_provider_content_filter_ends_the_turn_cf(
    ph: Pilothouse, model: ScriptedModel, step: Fail | Reply
) -> None:
    model.script.steps.append(step)
    result = await ph.command.start_and_send("hi", action="SUMMARIZE")
    assert (result.status, result.finish_reason) == (
        ProcessStatus.COMPLETED,
        FinishReason.CONTENT_FILTER,
    )
    # Refused at once: a content filter is not retried.
    assert model.remaining == 0 and len(model.requests) == 1
    stored = await ph.query.get_conversation(result.conversation_uuid)
    assert stored.finish_reason is FinishReason.CONTENT_FILTER


# --- catalog writes (POST of actions and skills was a 500) ----


async def test_creating_and_updating_an_action_or_skill_returns_the_entry(
    ph: Pilothouse,
) -> None:
    created = await ph.catalog.create(
        "actions",
        {"code": "NEWACT", "model": "TESTM", "configuration": "DFLT", "prompt": "Hi."},
    )
    assert (created.key, created.version, created.document["prompt"]) == ("NEWACT", 1, "Hi.")
    skill = await ph.catalog.create("skills", {"code": "NEWSKL", "prompt": "Be kind."})
    assert skill.document["prompt"] == "Be kind."
    updated = await ph.catalog.update(
        "actions",
        "NEWACT",
        {**created.document, "prompt": "Hello.", "skills": ["NEWSKL"]},
        expected_version=1,
    )
    assert (updated.version, updated.document["prompt"]) == (2, "Hello.")
    assert updated.document["skills"] == ["NEWSKL"]


async def test_an_adhoc_run_that_asks_is_answered_and_goes_on_in_the_process_that_ran_it(
    ph: Pilothouse, model: ScriptedModel, database: Database
) -> None:
    ask = ToolCall(
        "AskUserQuestion",
        {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]},
        call_id="q1",
    )
    model.script.steps.extend([ask, Reply("Ordered size M.")])
    paused = await ph.command.run_adhoc(
        AdHocRun(name="Shop", message="Order a shirt", model="TESTM", memory=None)
    )
    assert paused.result.status is ProcessStatus.WAITING
    done = await ph.command.submit_answers(paused.conversation_uuid, {"size": "M"})
    assert (done.status, done.output) == (ProcessStatus.COMPLETED, "Ordered size M.")
    # The resumed request went to the run's own model with the answer.
    assert "M" in str(model.requests[-1].messages[-1])

    # Another process has no definition of the run (its key is never stored):
    # a clear refusal, and the conversation still waits for the right one.
    model.script.steps.append(ask)
    again = await ph.command.run_adhoc(
        AdHocRun(name="Shop", message="Another shirt", model="TESTM", memory=None)
    )
    settings = Settings(database_url=database.url, egress_allow=["127.0.0.1"])
    async with Pilothouse(settings, database=database, model=model) as other:
        with pytest.raises(InvalidStateError, match="is an ad-hoc run this process does not hold"):
            await other.command.submit_answers(again.conversation_uuid, {"size": "S"})
    still = await ph.query.get_conversation(again.conversation_uuid)
    assert still.status is ProcessStatus.WAITING
