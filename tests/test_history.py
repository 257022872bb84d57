"""``ph.history``: titles, forks, hiding, export and import, on SQLite and PostgreSQL.

The audit rows (messages, timeline) are never updated or deleted: a fork
copies, a hiding labels, and both are appended to the timeline.
"""

from __future__ import annotations

import pytest

from pilothouse.api import Pilothouse
from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.settings import Settings
from pilothouse.testing import Reply, ScriptedModel
from pilothouse.types import MessageRole

pytestmark = pytest.mark.anyio

CATALOG = {
    "providers": [{"code": "P", "kind": "openai", "base_url": "http://127.0.0.1:9/v1"}],
    "models": [
        {"code": "M", "provider": "P", "model_name": "m", "input_price": 1, "output_price": 2}
    ],
    "configurations": [{"code": "C", "max_tokens": 64}],
    # A chat remembers: without a memory strategy a turn sees only itself (seed 000).
    "memory_strategies": [{"code": "ALL", "kind": "FULL"}],
    "actions": [
        {
            "code": "CHAT",
            "model": "M",
            "configuration": "C",
            "memory_strategy": "ALL",
            "prompt": "Chat about {topic}.",
        },
        {
            "code": "QUIET",
            "model": "M",
            "configuration": "C",
            "prompt": "Say it.",
            "audit": False,
        },
    ],
}


async def _three_turns(ph: Pilothouse, model: ScriptedModel, action: str = "CHAT") -> str:
    inputs = {"topic": "shirts"} if action == "CHAT" else None
    conversation = await ph.command.start_conversation(action=action)
    for n in ("one", "two", "three"):
        model.script.steps.append(Reply(f"A-{n}"))
        await ph.command.send_message(conversation.uuid, n, input_data=inputs)
    return conversation.uuid


async def _texts(ph: Pilothouse, uuid: str) -> list[str]:
    """The chat's texts: every message but the recorded system prompt (``SY``)."""
    messages = await ph.query.get_conversation_messages(uuid)
    return [m.content for m in messages if m.role is not MessageRole.SYSTEM]


async def test_fork_copies_and_leaves_the_parent_as_recorded(settings: Settings) -> None:
    model = ScriptedModel([])
    async with Pilothouse(settings, model=model) as ph:
        await ph.catalog.import_documents([CATALOG])
        uuid = await _three_turns(ph, model)
        await ph.history.name_if_untitled(uuid, "one")
        before = await ph.query.get_transcript(uuid)
        two = next(m.sequence for m in before.messages if m.content == "two")

        saved = await ph.history.fork(uuid, replace={two: "TWO"}, reason="edit")
        assert await _texts(ph, saved.uuid) == ["one", "A-one", "TWO", "A-two", "three", "A-three"]
        assert (saved.parent_uuid, saved.title, saved.hidden) == (uuid, "one", False)
        dropped = await ph.history.fork(uuid, drop_prompt=two, reason="delete")
        assert await _texts(ph, dropped.uuid) == ["one", "A-one", "three", "A-three"]
        cut = await ph.history.fork(uuid, before=two, reason="delete following")
        assert await _texts(ph, cut.uuid) == ["one", "A-one"]

        after = await ph.query.get_transcript(uuid)
        assert after.messages == before.messages
        assert [e.sequence for e in after.timeline[: len(before.timeline)]] == [
            e.sequence for e in before.timeline
        ]
        forks = [e for e in after.timeline if e.kind.value == "fork"]
        assert [e.data["fork"] for e in forks] == [saved.uuid, dropped.uuid, cut.uuid]
        assert (await ph.history.get(uuid)).hidden
        listed = [c.uuid for c in await ph.history.list_conversations()]
        assert uuid not in listed and {saved.uuid, dropped.uuid, cut.uuid} <= set(listed)
        assert uuid in [c.uuid for c in await ph.history.list_conversations(include_hidden=True)]

        # A fork goes on with its own chat memory: the copies, not the parent's messages.
        model.script.steps.append(Reply("B"))
        await ph.command.send_message(cut.uuid, "deux", input_data={"topic": "shirts"})
        sent = str(model.requests[-1].messages)
        assert "A-one" in sent and "A-two" not in sent
        assert await _texts(ph, uuid) == [
            m.content for m in before.messages if m.role is not MessageRole.SYSTEM
        ]


async def test_fork_refuses_what_is_no_prompt(settings: Settings) -> None:
    model = ScriptedModel([])
    async with Pilothouse(settings, model=model) as ph:
        await ph.catalog.import_documents([CATALOG])
        uuid = await _three_turns(ph, model)
        with pytest.raises(InvalidFieldError, match="drop_prompt: message 3 is no user prompt"):
            # 1 is the recorded system prompt, 2 the first prompt, 3 its answer.
            await ph.history.fork(uuid, drop_prompt=3, reason="x")
        with pytest.raises(InvalidFieldError, match="replace: message 99 is no user prompt"):
            await ph.history.fork(uuid, replace={99: "x"}, reason="x")
        with pytest.raises(NotFoundError):
            await ph.history.fork("nope", before=1, reason="x")


async def test_rename_hide_and_tenants(settings: Settings) -> None:
    model = ScriptedModel([])
    async with Pilothouse(settings, model=model) as ph:
        await ph.catalog.import_documents([CATALOG])
        uuid = await _three_turns(ph, model)
        assert (await ph.history.name_if_untitled(uuid, "  a long\nfirst line " + "x" * 80)).title
        named = await ph.history.get(uuid)
        assert named.title is not None and len(named.title) <= 60 and named.title.endswith("…")
        assert (await ph.history.name_if_untitled(uuid, "other")).title == named.title
        renamed = await ph.history.rename(uuid, "Shirts")
        assert renamed.title == "Shirts"
        with pytest.raises(InvalidFieldError, match="title"):
            await ph.history.rename(uuid, " ")
        other = ph.for_tenant("other")
        with pytest.raises(NotFoundError):
            await other.history.rename(uuid, "mine now")
        with pytest.raises(NotFoundError):
            await other.history.hide(uuid)
        assert await other.history.list_conversations() == []
        await ph.history.hide(uuid)
        view = await ph.query.get_transcript(uuid)
        assert [e.kind.value for e in view.timeline][-2:] == ["rename", "hide"]
        with pytest.raises(InvalidFieldError, match="limit"):
            await ph.history.list_conversations(limit=0)


async def test_an_unaudited_conversation_gets_no_timeline_rows(settings: Settings) -> None:
    model = ScriptedModel([])
    async with Pilothouse(settings, model=model) as ph:
        await ph.catalog.import_documents([CATALOG])
        uuid = await _three_turns(ph, model, action="QUIET")
        await ph.history.rename(uuid, "quiet")
        fork = await ph.history.fork(uuid, before=3, reason="edit")
        assert (await ph.query.get_transcript(uuid)).timeline == []
        assert (await ph.query.get_transcript(fork.uuid)).timeline == []
        assert (await ph.history.get(fork.uuid)).title == "quiet"


async def test_export_and_import_round_trip(settings: Settings) -> None:
    model = ScriptedModel([])
    async with Pilothouse(settings, model=model) as ph:
        await ph.catalog.import_documents([CATALOG])
        uuid = await _three_turns(ph, model)
        await ph.history.rename(uuid, "Round trip")
        document = await ph.history.export(uuid)
        imported = await ph.history.import_conversation(document)
        assert imported.uuid != uuid and imported.title == "Round trip"
        assert await _texts(ph, imported.uuid) == await _texts(ph, uuid)
        timeline = (await ph.query.get_transcript(imported.uuid)).timeline
        # The recorded system prompt (SY) and three prompts with their answers.
        assert timeline[-1].data == {"source_uuid": uuid, "messages": 7}
        # Into another tenant without the action: refused, nothing written.
        other = ph.for_tenant("other")
        with pytest.raises(NotFoundError):
            await other.history.import_conversation(document)
        assert await other.history.list_conversations() == []


@pytest.mark.parametrize(
    ("document", "field"),
    [
        ({"format": "nope"}, "format"),
        ({"format": "pilothouse.conversation/1"}, "conversation"),
        ({"format": "pilothouse.conversation/1", "conversation": {}}, "conversation.action_code"),
        (
            {"format": "pilothouse.conversation/1", "conversation": {"action_code": "CHAT"}},
            "conversation.messages",
        ),
        (
            {
                "format": "pilothouse.conversation/1",
                "conversation": {"action_code": "CHAT", "agent_code": 3, "messages": []},
            },
            "conversation.agent_code",
        ),
        (
            {
                "format": "pilothouse.conversation/1",
                "conversation": {"action_code": "CHAT", "messages": [{"role": "XX"}]},
            },
            "conversation.messages[0].role",
        ),
        (
            {
                "format": "pilothouse.conversation/1",
                "conversation": {"action_code": "CHAT", "messages": ["hi"]},
            },
            "conversation.messages[0]",
        ),
        (
            {
                "format": "pilothouse.conversation/1",
                "conversation": {"action_code": "CHAT", "messages": [{"role": "US", "content": 1}]},
            },
            "conversation.messages[0].content",
        ),
    ],
)
async def test_import_names_the_field_it_refuses(
    settings: Settings, document: dict[str, object], field: str
) -> None:
    async with Pilothouse(settings, model=ScriptedModel([])) as ph:
        await ph.catalog.import_documents([CATALOG])
        with pytest.raises(InvalidFieldError) as caught:
            await ph.history.import_conversation(document)
        assert caught.value.field == field
        assert await ph.history.list_conversations() == []


async def test_system_prompt_preview(settings: Settings) -> None:
    model = ScriptedModel([])
    async with Pilothouse(settings, model=model) as ph:
        await ph.catalog.import_documents([CATALOG])
        prompt = await ph.history.system_prompt(
            action="CHAT", input_data={"topic": "hats"}, runtime_config={"instruction": "Be brief."}
        )
        assert "Chat about hats." in prompt and "Be brief." in prompt


async def test_search_finds_titles_and_texts_of_this_tenant_only(settings: Settings) -> None:
    model = ScriptedModel([])
    async with Pilothouse(settings, model=model) as ph:
        await ph.catalog.import_documents([CATALOG])
        uuid = await _three_turns(ph, model)
        await ph.history.rename(uuid, "Linen shirts 100%")
        other = await ph.command.start_conversation(action="CHAT")

        async def found(text: str, tenant: Pilothouse = ph) -> list[str]:
            return [c.uuid for c in await tenant.history.list_conversations(search=text)]

        assert await found("linen SHIRTS") == [uuid]  # the title, case-insensitive
        assert await found("a-TWO") == [uuid]  # a message's text
        assert await found("100%") == [uuid]
        assert await found("1_0") == []  # LIKE's wildcards are taken as written
        assert await found("%") == [uuid]
        assert set(await found("")) == {uuid, other.uuid}
        assert await found("a-two", ph.for_tenant("other")) == []
        with pytest.raises(InvalidFieldError, match="search"):
            await ph.history.list_conversations(search="x" * 201)
