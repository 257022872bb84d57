"""genai-4j's skill and tool ``version`` (seed 002): a semantic version, recorded with each use."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from pilothouse.api import Pilothouse
from pilothouse.catalog import TimelineKind
from pilothouse.errors import CatalogValidationError
from pilothouse.providers import SecretResolver
from pilothouse.settings import Settings
from pilothouse.testing import CatalogBuilder, ScriptedModel, ToolCall
from pilothouse.tools import ToolRegistry

pytestmark = pytest.mark.anyio


def lookup(q: str) -> str:
    """Look a brand up."""
    return f"{q}: founded 1907"


@pytest.fixture
async def model() -> ScriptedModel:
    return ScriptedModel([])


@pytest.fixture
async def ph(database_url: str, model: ScriptedModel) -> AsyncIterator[Pilothouse]:
    registry = ToolRegistry(SecretResolver({}))
    registry.register(lookup)
    settings = Settings(database_url=database_url, secrets_file=None)
    async with Pilothouse(settings, model=model, tools=registry) as facade:
        await (
            CatalogBuilder()
            .tool("LOOKUP", name="lookup", kind="python", implementation="lookup", release="2.4.1")
            .skill("MARKET", prompt="Know the market.", tools=["LOOKUP"], release="1.3.0-beta.2")
            .skill("VOICE", prompt="Keep the tone.", depends_on=["MARKET"])
            .action(
                "PROGRESS",
                prompt="Write a tagline.",
                skills=["VOICE"],
                progressive_disclosure=True,
                ask_user=False,
            )
            .import_into(facade)
        )
        yield facade


async def _tool_events(ph: Pilothouse, uuid: str) -> list[dict[str, Any]]:
    timeline = (await ph.query.get_transcript(uuid)).timeline
    return [e.data for e in timeline if e.kind is TimelineKind.TOOL_EXECUTION]


async def test_releases_are_stored_with_the_seeds_default(ph: Pilothouse) -> None:
    tool = await ph.catalog.get("tools", "LOOKUP")
    voice = await ph.catalog.get("skills", "VOICE")
    market = await ph.catalog.get("skills", "MARKET")
    assert tool.document["release"] == "2.4.1"
    assert market.document["release"] == "1.3.0-beta.2"
    # genai-4j's DEFAULT '1.0.0': left out of the document like every default.
    assert "release" not in voice.document
    assert isinstance(voice.version, int)  # the row's optimistic-lock counter, apart


async def test_the_audit_names_the_release_of_each_skill_and_tool_used(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    model.script.steps.extend(
        [ToolCall("use_skill", {"skill": "VOICE"}), ToolCall("lookup", {"q": "Acme"}), "Done."]
    )
    result = await ph.command.start_and_send("Acme", action="PROGRESS")
    assert result.output == "Done."
    activation, call = await _tool_events(ph, result.conversation_uuid)
    assert activation["activated"] == ["VOICE", "MARKET"]
    assert activation["releases"] == {"VOICE": "1.0.0", "MARKET": "1.3.0-beta.2"}
    assert (call["tool"], call["status"], call["release"]) == ("lookup", "succeeded", "2.4.1")


async def test_an_edited_release_is_what_the_next_turn_records(
    ph: Pilothouse, model: ScriptedModel
) -> None:
    entry = await ph.catalog.get("tools", "LOOKUP")
    await ph.catalog.update(
        "tools", "LOOKUP", {**entry.document, "release": "3.0.0"}, expected_version=entry.version
    )
    model.script.steps.extend(
        [ToolCall("use_skill", {"skill": "MARKET"}), ToolCall("lookup", {"q": "Acme"}), "Done."]
    )
    result = await ph.command.start_and_send("Acme", action="PROGRESS")
    _, call = await _tool_events(ph, result.conversation_uuid)
    assert call["release"] == "3.0.0"


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"release": "1.0"}, "release"),
        ({"release": "v1.0.0"}, "release"),
        ({"release": "1.0.0-" + "x" * 20}, "release"),
        ({"version": "1.0.0"}, "write its semantic version as release"),
    ],
)
async def test_a_release_that_is_no_semantic_version_is_refused(
    tmp_path: Path, fields: dict[str, Any], message: str
) -> None:
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'r.db'}", secrets_file=None)
    async with Pilothouse(settings) as ph:
        with pytest.raises(CatalogValidationError) as caught:
            await ph.catalog.create("skills", {"code": "SK", "prompt": "p", **fields})
    assert message in str(caught.value)
