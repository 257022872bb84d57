"""Appending messages to a conversation outside a turn.

The OpenAI-compatible endpoint replays a request's earlier messages into a
fresh conversation so the turn sees them as chat memory
(``start_conversation(history=...)``), and an ad-hoc run records its
configuration as a system message before each turn. Both go through the
turn store like a turn does: the conversation is taken (``NS``/``CO`` ->
``RU``), the messages are written in one transaction, and it is handed back
in the status it had, with both changes on the audit timeline, so nothing
bypasses the rule that one writer holds a conversation.
"""

from __future__ import annotations

__all__ = ["MEMORY_CLEARED", "append_messages", "clear_memory"]

from collections.abc import Sequence

from sqlalchemy import select

from pilothouse.catalog._enums import MessageRole, ProcessStatus, TimelineKind
from pilothouse.errors import InvalidStateError
from pilothouse.store import STARTABLE, Database, NewEvent, NewMessage, TurnBatch, TurnStore
from pilothouse.store._tables import conversation_table

_CONVERSATION = conversation_table.c

MEMORY_CLEARED = "memory_cleared"
"""The data key of the system message that marks where a chat memory was cleared."""


async def append_messages(
    store: TurnStore,
    tenant: str,
    conversation_uuid: str,
    messages: Sequence[NewMessage],
    *,
    status: ProcessStatus,
) -> None:
    """Write ``messages`` to an idle conversation and leave it in ``status``.

    Args:
        store: where turns are written.
        tenant: the conversation's tenant.
        conversation_uuid: the conversation (``NS`` or ``CO``).
        messages: appended in order, after the conversation's own.
        status: the status the conversation has now and keeps afterwards.

    Raises:
        InvalidStateError: the conversation is running or finished.
        NotFoundError: no such conversation for this tenant.
    """
    if not messages:
        return
    handle = await store.begin_turn(tenant, conversation_uuid, allowed=STARTABLE & {status})
    await store.write(
        handle,
        TurnBatch(
            messages=list(messages),
            events=[
                NewEvent(
                    TimelineKind.STATUS_CHANGE,
                    {
                        "from": ProcessStatus.RUNNING.value,
                        "to": status.value,
                        "messages_appended": len(messages),
                    },
                )
            ],
            status=status,
        ),
    )


async def clear_memory(store: TurnStore, database: Database, tenant: str, memory_id: str) -> bool:
    """Clear a chat memory: later turns see none of the messages written before now.

    Nothing is deleted (messages are the audit record): a system message
    ``Chat memory cleared.`` carrying ``{"memory_cleared": true}`` is
    appended to the newest idle conversation of the memory, and the memory a
    turn reads starts after the last such marker (memory is ordered by
    time across its conversations).

    Returns:
        True when the memory was cleared; False when no conversation has it.

    Raises:
        InvalidStateError: no conversation of the memory is idle (all are
            running a turn or waiting for answers): clear it after they end.
    """
    async with database.sessions() as session:
        rows = (
            await session.execute(
                select(_CONVERSATION.uuid, _CONVERSATION.status)
                .where(_CONVERSATION.tenant == tenant, _CONVERSATION.memory_id == memory_id)
                .order_by(_CONVERSATION.created_at.desc(), _CONVERSATION.id.desc())
            )
        ).all()
    if not rows:
        return False
    busy = [status for _, status in rows if status not in STARTABLE]
    if any(status in (ProcessStatus.RUNNING, ProcessStatus.WAITING) for status in busy):
        raise InvalidStateError(
            f"memory '{memory_id}': a conversation of it is running or waiting; "
            "clear it after that turn ends"
        )
    idle = next(((uuid, status) for uuid, status in rows if status in STARTABLE), None)
    if idle is None:
        raise InvalidStateError(
            f"memory '{memory_id}': none of its conversations can take a message "
            f"(statuses {', '.join(sorted({s.value for s in busy}))})"
        )
    marker = NewMessage(MessageRole.SYSTEM, "Chat memory cleared.", data={MEMORY_CLEARED: True})
    await append_messages(store, tenant, idle[0], [marker], status=idle[1])
    return True
