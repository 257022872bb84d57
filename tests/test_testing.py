"""pilothouse.testing as a user's test sees it: public imports only."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from database_templates import SqliteTemplates
from pilothouse.api import Pilothouse
from pilothouse.catalog import FinishReason, ProcessStatus, import_catalog
from pilothouse.errors import CatalogValidationError
from pilothouse.providers import ProviderConfigError
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import (
    Calls,
    CatalogBuilder,
    ModelRequestsBlockedError,
    ScriptedModel,
    ToolCall,
    allow_model_requests,
    block_model_requests,
    override,
)

pytestmark = pytest.mark.anyio


def brand_catalog() -> CatalogBuilder:
    return (
        CatalogBuilder()
        .persona("EDITOR", prompt="You are a concise editor.")
        .action("SUMMARIZE", prompt="Summarize the text.", persona="EDITOR")
        .tool(
            "LOOKUP",
            name="lookup",
            kind="schema",
            description="Look a brand up; the caller answers.",
            input_schema={"type": "object", "properties": {"q": {"type": "string"}}},
        )
        .action("RESEARCH", prompt="Look brands up.", tools=["LOOKUP"])
        .application("BRANDS", system_prompt="You work for Brand intelligence.")
        .agent("ANALYST", application="BRANDS", goal_action="SUMMARIZE")
    )


@pytest.fixture
def settings(tmp_path: Path, sqlite_templates: SqliteTemplates) -> Settings:
    # A migrated copy of the session's template: a fresh file would do as well, slower.
    return Settings(database_url=sqlite_templates.fresh(tmp_path / "app.db"), secrets_file=None)


@pytest.fixture
async def ph(settings: Settings) -> AsyncIterator[Pilothouse]:
    async with Pilothouse(settings) as facade:
        await brand_catalog().import_into(facade)
        yield facade


# -- CatalogBuilder ------------------------------------------------------------


async def test_a_built_catalog_is_imported_and_read_back(ph: Pilothouse) -> None:
    actions = {a.code: a for a in await ph.query.get_all_actions()}
    assert set(actions) == {"SUMMARIZE", "RESEARCH"}
    summarize = actions["SUMMARIZE"]
    assert (summarize.model.code, summarize.configuration.code) == ("SCRIPTED", "DFLT")
    assert summarize.persona is not None and summarize.persona.code == "EDITOR"
    agent = await ph.query.find_agent_by_code("ANALYST")
    assert agent is not None and agent.goal_action is not None
    assert agent.goal_action.code == "SUMMARIZE"
    tool = await ph.query.find_tool_by_code("LOOKUP")
    assert tool is not None and tool.name == "lookup"


async def test_import_into_settings_or_a_database_uses_their_tenant(settings: Settings) -> None:
    catalog = CatalogBuilder().action("ONLY", prompt="Answer.")
    acme = settings.model_copy(update={"tenant": "acme"})
    summary = await catalog.import_into(acme)
    assert summary.counts["actions"].created == 1
    database = settings.open_database()
    try:
        assert (await catalog.import_into(database, tenant="acme")).changed is False
        await catalog.import_into(database)
    finally:
        await database.dispose()
    for tenant in ("acme", "default"):
        async with Pilothouse(settings, tenant=tenant) as ph:
            assert [a.code for a in await ph.query.get_all_actions()] == ["ONLY"]


def test_a_bad_field_is_refused_at_the_call_that_adds_it() -> None:
    catalog = CatalogBuilder()
    with pytest.raises(CatalogValidationError) as caught:
        catalog.configuration("HOT", max_tokens=64, temprature=0.5)
    assert "configuration 'HOT': temprature" in str(caught.value)
    with pytest.raises(CatalogValidationError, match="unknown kind"):
        catalog.add("actoins", code="X", prompt="p")
    assert "HOT" not in catalog.yaml()


async def test_an_unknown_reference_is_refused_at_import_and_nothing_is_written(
    ph: Pilothouse,
) -> None:
    catalog = CatalogBuilder().action("ORPHAN", prompt="Answer.", model="NOPE")
    with pytest.raises(CatalogValidationError) as caught:
        await catalog.import_into(ph)
    assert str(caught.value) == "action 'ORPHAN': model: unknown model 'NOPE'"
    assert await ph.query.find_action_by_code("ORPHAN") is None


async def test_the_yaml_form_imports_to_the_same_catalog(ph: Pilothouse, tmp_path: Path) -> None:
    path = tmp_path / "catalog.yaml"
    path.write_text(brand_catalog().yaml(), encoding="utf-8")
    database = Database(ph.settings.database_url)
    try:
        summary = await import_catalog(database, ph.tenant, [path])
    finally:
        await database.dispose()
    # The files describe exactly what the builder imported: nothing changes.
    assert summary.changed is False
    assert summary.counts["actions"].unchanged == 2


def test_a_later_entity_replaces_the_default_of_the_same_code() -> None:
    catalog = CatalogBuilder().configuration("DFLT", max_tokens=64)
    assert catalog.document()["configurations"] == [{"code": "DFLT", "max_tokens": 64}]
    assert CatalogBuilder(scripted=False).document() == {}


# -- override ------------------------------------------------------------------


async def test_override_answers_every_catalog_model_in_the_block(ph: Pilothouse) -> None:
    conversation = await ph.command.start_conversation(action="SUMMARIZE", agent="ANALYST")
    with override(model=ScriptedModel(["A short summary."])) as model:
        result = await ph.command.send_message(conversation.uuid, "Summarize: Acme sells anvils.")
    assert (result.status, result.output) == (ProcessStatus.COMPLETED, "A short summary.")
    assert model.remaining == 0
    assert "You are a concise editor." in str(model.requests[0].messages)
    # Outside the block the catalog's model is back: a test provider is never built.
    with pytest.raises(ProviderConfigError, match=r"override\(model=ScriptedModel"):
        await ph.command.send_message(conversation.uuid, "Again.")


async def test_the_innermost_override_wins_and_reaches_tasks_started_in_it(
    ph: Pilothouse,
) -> None:
    outer, inner = ScriptedModel(["outer", "outer"]), ScriptedModel(["inner", "inner"])
    first = await ph.command.start_conversation(action="SUMMARIZE")
    second = await ph.command.start_conversation(action="SUMMARIZE")
    outputs: dict[str, object] = {}

    async def send(uuid: str) -> None:
        outputs[uuid] = (await ph.command.send_message(uuid, "hi")).output

    with override(model=outer):
        with override(model=inner):
            async with anyio.create_task_group() as group:
                group.start_soon(send, first.uuid)
                group.start_soon(send, second.uuid)
        assert outputs == {first.uuid: "inner", second.uuid: "inner"}
        await send(first.uuid)
    assert outputs[first.uuid] == "outer"
    assert (inner.remaining, outer.remaining) == (0, 1)


async def test_a_pilothouse_built_with_a_model_keeps_it(settings: Settings) -> None:
    await brand_catalog().import_into(settings)
    own = ScriptedModel(["own"])
    async with Pilothouse(settings, model=own) as ph:
        conversation = await ph.command.start_conversation(action="SUMMARIZE")
        with override(model=ScriptedModel(["overridden"])):
            result = await ph.command.send_message(conversation.uuid, "hi")
    assert result.output == "own"


# -- scripted tool call ids ----------------------------------------------------


async def test_scripted_tool_calls_get_unique_ids_unless_given(ph: Pilothouse) -> None:
    calls = Calls((ToolCall("lookup", {"q": "acme"}), ToolCall("lookup", {"q": "globex"})))
    conversation = await ph.command.start_conversation(action="RESEARCH")
    with override(model=ScriptedModel([calls, calls, ToolCall("lookup", {}, call_id="mine")])):
        first = await ph.command.send_message(conversation.uuid, "Look them up.")
        ids = [call.id for call in first.tool_calls]
        assert (first.status, first.finish_reason) == (
            ProcessStatus.COMPLETED,
            FinishReason.TOOL_CALLS,
        )
        assert len(set(ids)) == 2
        assert all(re.fullmatch(r"call_[0-9a-f]{24}", i) for i in ids)
        resumed = first
        for call_id in ids:
            resumed = await ph.command.submit_tool_result(conversation.uuid, call_id, "found")
        # The same script step played again gets new ids: no id repeats in
        # the conversation.
        again = [call.id for call in resumed.tool_calls]
        assert not set(again) & set(ids) and len(set(again)) == 2
        for call_id in again:
            resumed = await ph.command.submit_tool_result(conversation.uuid, call_id, "found")
    assert [call.id for call in resumed.tool_calls] == ["mine"]


# -- the guard on real model calls --------------------------------------------


@pytest.fixture
async def real_model(settings: Settings) -> AsyncIterator[Pilothouse]:
    """A catalog whose action calls a real (unreachable) OpenAI-compatible server."""
    catalog = (
        CatalogBuilder()
        .provider("VNDR", kind="openai-compatible", base_url="http://127.0.0.1:9/v1")
        .model("GPT", provider="VNDR", model_name="gpt-test")
        .configuration("ONCE", max_tokens=16, retry_count=0)
        .action("ASK", prompt="Answer.", model="GPT", configuration="ONCE")
    )
    async with Pilothouse(settings) as ph:
        await catalog.import_into(ph)
        yield ph


async def test_blocked_model_requests_name_the_model_and_the_way_out(
    real_model: Pilothouse,
) -> None:
    conversation = await real_model.command.start_conversation(action="ASK")
    with block_model_requests():
        with pytest.raises(ModelRequestsBlockedError) as caught:
            await real_model.command.send_message(conversation.uuid, "hi")
    message = str(caught.value)
    assert "model 'GPT' (openai-compatible model 'gpt-test' of provider 'VNDR')" in message
    assert "override(model=ScriptedModel" in message and "allow_model_requests()" in message
    stored = await real_model.query.get_conversation(conversation.uuid)
    assert stored.status is ProcessStatus.FAILED


async def test_allowed_or_overridden_calls_pass_the_guard(real_model: Pilothouse) -> None:
    with block_model_requests():
        first = await real_model.command.start_conversation(action="ASK")
        with override(model=ScriptedModel(["scripted"])):
            assert (await real_model.command.send_message(first.uuid, "hi")).output == "scripted"
        second = await real_model.command.start_conversation(action="ASK")
        with allow_model_requests():
            result = await real_model.command.send_message(second.uuid, "hi")
    # The request went out, to a port where nothing listens.
    assert result.status is ProcessStatus.FAILED
    assert result.error is not None and "connect" in result.error.lower()


# -- the documentation ---------------------------------------------------------


def test_the_first_example_of_docs_testing_runs(tmp_path: Path) -> None:
    text = (Path(__file__).resolve().parents[1] / "docs" / "testing.md").read_text()
    section = text.split("## A first test", 1)[1]
    code = section.split("```python\n", 1)[1].split("```", 1)[0]
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/testing.md", "exec"), namespace)
    anyio.run(namespace["test_summary"], tmp_path)
