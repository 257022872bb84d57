"""Answers to the model's question reach the packaged Qwen model as the tool result it expects.

The question is scripted (a 0.5B model does not reliably choose to ask); the
turn after the answers is the real model's, on the llama.cpp server the rest
of ``tests/real`` shares. Sent as a JSON object, the answers came back as the
model's reply verbatim; sent as the question's tool result in words, the
model should go on with the order. Offered the question tool again in that
call, the packaged 0.5B model asked the same question once more; the call
after the answers therefore does not offer it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from pilothouse.api import Pilothouse
from pilothouse.providers._local import LocalModelServers
from pilothouse.settings import Settings
from pilothouse.testing import ScriptedModel, ToolCall, override
from pilothouse.types import ProcessStatus

pytestmark = [pytest.mark.real, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]
SHIRTS = """\
actions:
  - code: SHIRTS
    name: Take a shirt order
    type: SUMM
    model: QWEN05
    configuration: PREC
    prompt: >-
      You take shirt orders. When you know the size, confirm the order in one
      sentence naming the size.
"""


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
async def ph(
    tmp_path_factory: pytest.TempPathFactory, local_model_servers: LocalModelServers
) -> AsyncIterator[Pilothouse]:
    folder = tmp_path_factory.mktemp("answers")
    (folder / "shirts.yaml").write_text(SHIRTS, encoding="utf-8")
    settings = Settings(database_url=f"sqlite+aiosqlite:///{folder / 'answers.db'}")
    async with Pilothouse(settings, local_servers=local_model_servers) as facade:
        await facade.catalog.import_files([ROOT / "examples" / "catalog", folder / "shirts.yaml"])
        yield facade


async def test_the_real_model_goes_on_from_the_answers(ph: Pilothouse) -> None:
    ask = ToolCall(
        "AskUserQuestion",
        {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M", "L"]}]},
        call_id="q1",
    )
    with override(model=ScriptedModel([ask])):
        paused = await ph.command.start_and_send("I want a shirt.", action="SHIRTS")
    assert paused.status is ProcessStatus.WAITING, paused.error

    done = await ph.command.submit_answers(paused.conversation_uuid, {"size": "M"})
    print(f"after the answers: {done.output!r}")
    assert done.status is ProcessStatus.COMPLETED, done.error
    reply = str(done.output)
    assert reply.strip()
    # Not the answers echoed back as JSON, and the answer is taken in.
    assert not reply.lstrip().startswith(("{", "[")), reply
    assert '"size"' not in reply, reply
    assert "M" in reply.replace("Medium", "M").replace("medium", "M"), reply
