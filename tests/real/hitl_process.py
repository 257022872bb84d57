"""One side of the restart test: run as its own process.

``ask DB`` starts a conversation whose (scripted) model asks a question, prints
the conversation uuid and exits; ``answer DB UUID`` is a new process that
answers it and prints the result as JSON.
"""

from __future__ import annotations

import json
import sys

import anyio

from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.testing import ScriptedModel, ToolCall


async def main(command: str, url: str, uuid: str | None) -> None:
    settings = Settings(database_url=url)
    if command == "ask":
        ask = ToolCall(
            "AskUserQuestion",
            {"questions": [{"id": "size", "question": "Which size?", "choices": ["S", "M"]}]},
            call_id="q1",
        )
        async with Pilothouse(settings, model=ScriptedModel([ask])) as ph:
            conversation = await ph.command.start_conversation(action="ASK")
            result = await ph.command.send_message(conversation.uuid, "Order a shirt")
            print(json.dumps({"uuid": conversation.uuid, "status": result.status.value}))
    else:
        assert uuid is not None
        async with Pilothouse(settings, model=ScriptedModel(["Ordered size M."])) as ph:
            pending = await ph.query.get_pending_questions(uuid)
            result = await ph.command.submit_answers(uuid, {"size": "M"})
            print(json.dumps({"pending": len(pending), **result.as_json()}))


if __name__ == "__main__":
    anyio.run(main, sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else None)
