"""The model call of a new message.

A new message's turn checks the catalog has not moved since the action was
compiled, retrieves the action's knowledge, chooses the history its memory
keeps, recalls scoped memories, and builds the request the model gets.
"""

from __future__ import annotations

__all__ = ["Prepare", "prompted_call"]

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic_ai.messages import ModelRequest, ToolReturnPart

from pilothouse.catalog._enums import MessageRole
from pilothouse.errors import PilothouseError
from pilothouse.memory import MemoryMessage, select_history
from pilothouse.runtime._compile import CompiledAction
from pilothouse.runtime._config import RuntimeConfig
from pilothouse.runtime._convert import build_messages
from pilothouse.runtime._retrieval import retrieve_context
from pilothouse.runtime._shared import SKILL_OFFER_ABOVE
from pilothouse.runtime._toolstep import results_as_text
from pilothouse.runtime._turn import (
    CallModel,
    Failed,
    Prompt,
    Turn,
    activated_skills,
    memory_messages,
)
from pilothouse.store import NewAttachment

if TYPE_CHECKING:
    from pilothouse.runtime._shared import Runtime

Prepare = Callable[
    [
        str,
        str | None,
        str,
        Mapping[str, Any] | None,
        Mapping[str, Any] | None,
        Sequence[NewAttachment],
    ],
    Awaitable[tuple[CompiledAction, RuntimeConfig, str]],
]
"""Compiles an action again and checks a turn's input with it (``Runner.prepare``)."""


async def prompted_call(
    runtime: Runtime, tenant: str, turn: Turn, step: Prompt, prepare: Prepare
) -> CallModel | Failed:
    """The model call for a new message: recompile if the catalog moved, then assemble it.

    Args:
        runtime: the runtime the turn runs in.
        tenant: the turn's tenant.
        turn: the turn.
        step: the new message.
        prepare: compiles the action again and checks the input with it.

    Returns:
        The model call, or a failure that ends the turn.
    """
    new, prompt = step.new, step.new.system_prompt
    if new.caller is not None:
        turn.key_prefix = new.caller.key_prefix
    if not step.checked and turn.handle.catalog_revision != turn.compiled.revision:
        # The catalog changed since the cached compilation: compile
        # again. Rare, and the input is checked again with it.
        try:
            turn.compiled, _, prompt = await prepare(
                new.action_code,
                new.agent_code,
                new.text,
                new.input_data,
                new.runtime_config,
                new.attachments,
            )
        except PilothouseError as exc:
            # Deleted, deactivated, or the input no longer fits.
            return Failed(f"the catalog changed: {exc}")
    if turn.compiled.retrieval:
        try:
            retrieved = await retrieve_context(
                runtime.knowledge(),
                tenant,
                turn.compiled.retrieval,
                new.text,
                turn.config.retrieval,
            )
        except PilothouseError as exc:
            # Never answer without the context the action is meant to have.
            return Failed(str(exc))
        turn.pending.append(retrieved.event)
        turn.sources = retrieved.sources
        if retrieved.prompt:
            # Before the history is chosen, so its token budget counts the context.
            prompt = f"{prompt}\n\n{retrieved.prompt}"
    if len(turn.compiled.skills) > SKILL_OFFER_ABOVE:
        turn.skill_offer = await runtime.skill_offer(turn.compiled.skills, new.text)
    # The memory as it was before this turn's user message, read when the
    # turn began.
    history = memory_messages(turn.handle.memory)
    user = MemoryMessage(role=MessageRole.USER, content=new.text)
    kept = select_history(
        [*history, user], turn.compiled.memory, system_prompt=prompt, counter=new.counter
    )
    turn.active_skills = activated_skills(history)
    if turn.compiled.memory.scoped is not None:
        from pilothouse.runtime._memory import recall

        # Only SCOPED actions get here: the others pay one attribute check.
        turn.memory_text = new.text
        try:
            prompt = await recall(runtime, turn, new.text, prompt, new.counter)
        except PilothouseError as exc:
            # An organization collection that cannot be searched: never
            # answer without the memory the action is meant to have.
            return Failed(str(exc))
    messages = build_messages(prompt, kept[:-1], new.text, new.attachments)
    last = messages[-1]
    if (
        turn.compiled.model.profile.tool_results_as_text
        and isinstance(last, ModelRequest)
        and any(isinstance(part, ToolReturnPart) for part in last.parts)
    ):
        # A continuation from tool results the caller ran (no new user
        # text): as after the loop's own tool round, a small model gets
        # them as text and answers without tools.
        return CallModel([*messages[:-1], results_as_text(last)], True)
    return CallModel(messages)
