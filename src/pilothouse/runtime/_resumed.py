"""Going on after replies: answers to questions, results from callers.

A resumed turn has no new user message: its model call is made from the
stored history, which the take has just extended with the replies.
"""

from __future__ import annotations

__all__ = ["resumed_call"]

from typing import TYPE_CHECKING

from pilothouse.catalog._enums import InstructionMode, MessageRole
from pilothouse.errors import PilothouseError
from pilothouse.memory import counter_for, select_history
from pilothouse.runtime._convert import history_messages
from pilothouse.runtime._toolstep import after_replies
from pilothouse.runtime._turn import (
    CallModel,
    Failed,
    Resume,
    Returned,
    Turn,
    TurnBatch,
    activated_skills,
    memory_messages,
)

if TYPE_CHECKING:
    from pilothouse.runtime._shared import Runtime


async def resumed_call(
    runtime: Runtime, tenant: str, turn: Turn, step: Resume
) -> CallModel | Returned | Failed:
    """The model call that goes on from replies to pending calls.

    The take wrote the replies; with calls still pending the turn ends
    returning them. Otherwise the history is read back from the store, the
    system prompt made again for the last user message (and its memories
    recalled, as a fresh turn's are).
    """
    runtime.recorder.taken(turn, [step.event])
    if step.still_pending:
        return Returned(None, TurnBatch(), step.still_pending, waiting=step.waiting)
    compiled = turn.compiled
    history = memory_messages(await runtime.store.memory(tenant, turn.handle.memory_id))
    last = next((m for m in reversed(history) if m.role is MessageRole.USER), None)
    stored = dict((last.data or {}).get("input_data") or {}) if last else {}
    data = {"input": last.content if last else "", **stored}
    system_prompt = compiled.system_prompt(None, InstructionMode.APPEND, data)
    counter = counter_for(compiled.model.provider.kind, compiled.model.model_name)
    if compiled.memory.scoped is not None and last is not None:
        from pilothouse.runtime._memory import recall, resumed_user

        # A resumed turn is told its memories as a fresh one is, for the
        # user's last message, and they are recorded in its timeline.
        turn.resumed = True
        turn.memory_text = last.content
        await resumed_user(runtime, turn)
        try:
            system_prompt = await recall(runtime, turn, last.content, system_prompt, counter)
        except PilothouseError as exc:
            return Failed(str(exc))
    kept = select_history(history, compiled.memory, system_prompt=system_prompt, counter=counter)
    turn.active_skills = activated_skills(history)
    messages = history_messages(system_prompt, kept)
    return after_replies(
        messages, step.replies, as_text=compiled.model.profile.tool_results_as_text
    )
