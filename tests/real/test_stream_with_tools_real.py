"""A turn that offers tools streams its answer on the packaged local model.

pilothouse's llama.cpp chat handler streams text while tools are offered
(a call is sampled under its grammar once the model opens one), so the run
loop asks for a stream then too: ``pilothouse chat`` shows the answer as it
is written instead of a spinner until the whole answer is there.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pilothouse.api import Pilothouse
from pilothouse.providers._local import LocalModelServers
from pilothouse.runtime import TextDelta, TurnEvent, TurnFinished
from pilothouse.settings import Settings
from pilothouse.types import ProcessStatus

pytestmark = [pytest.mark.real, pytest.mark.anyio]

CATALOG = Path(__file__).resolve().parents[2] / "examples" / "catalog"

EXTRA = """\
actions:
  - code: GREET
    name: Greet, with a question tool offered
    model: QWEN05
    configuration: DFLT
    prompt: Greet the user warmly in two sentences.
    ask_user: true
"""


@pytest.fixture
async def ph(tmp_path: Path, local_model_servers: LocalModelServers) -> AsyncIterator[Pilothouse]:
    extra = tmp_path / "extra.yaml"
    extra.write_text(EXTRA, encoding="utf-8")
    settings = Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'stream.db'}")
    async with Pilothouse(settings, local_servers=local_model_servers) as facade:
        await facade.catalog.import_files([CATALOG, extra])
        yield facade


async def test_the_answer_streams_while_tools_are_offered(ph: Pilothouse) -> None:
    conversation = await ph.command.start_conversation(action="GREET")
    events: list[TurnEvent] = [
        event
        async for event in ph.command.stream_message(
            conversation.uuid,
            "Hello! I am Ada.",
            runtime_config={"max_tokens": 32, "temperature": 0},
        )
    ]
    finished = events[-1]
    assert isinstance(finished, TurnFinished)
    assert finished.result.status is ProcessStatus.COMPLETED, finished.result.error
    deltas = [event.text for event in events if isinstance(event, TextDelta)]
    print(f"{len(deltas)} deltas: {deltas[:6]}")
    assert len(deltas) > 1
    assert "".join(deltas) == finished.result.output
    transcript = await ph.query.get_transcript(conversation.uuid)
    request = next(
        e.data for e in transcript.timeline if e.kind.value == "request"
    )  # offered: AskUserQuestion
    assert request["stream"] is True
