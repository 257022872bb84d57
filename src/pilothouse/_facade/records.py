"""The store writes the facade makes itself, outside a turn.

Starting a conversation, and appending messages to one before its first
turn: the OpenAI-compatible endpoint replays a request's earlier messages
into a fresh conversation so the turn sees them as chat memory, and an
ad-hoc run records its configuration as a system message before each turn.
Appending goes through the store's writer like a turn does: the
conversation is taken (``NS``/``CO`` -> ``RU``), the messages are written in
one transaction, and it is handed back in the status it had, with both
changes on the audit timeline, so nothing bypasses the rule that one writer
holds a conversation.
"""

from __future__ import annotations

__all__ = ["append_messages", "create_conversation"]

from collections.abc import Sequence

from pilothouse.catalog._enums import ProcessStatus, TimelineKind
from pilothouse.store import Conversation, Database
from pilothouse.store._writer import STARTABLE, ConversationWriter, NewEvent, NewMessage, TurnBatch


async def create_conversation(
    database: Database,
    tenant: str,
    *,
    action_code: str,
    agent_code: str | None,
    memory_id: str | None,
    audit: bool | None,
    default_audit: bool,
    check_catalog: bool,
) -> Conversation:
    """Record a new conversation (``NS``); see :meth:`ConversationWriter.create`."""
    return await ConversationWriter(database, tenant).create(
        action_code=action_code,
        agent_code=agent_code,
        memory_id=memory_id,
        audit=audit,
        default_audit=default_audit,
        check_catalog=check_catalog,
    )


async def append_messages(
    database: Database,
    tenant: str,
    conversation_uuid: str,
    messages: Sequence[NewMessage],
    *,
    status: ProcessStatus,
) -> None:
    """Write ``messages`` to an idle conversation and leave it in ``status``.

    Args:
        database: the store.
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
    writer = ConversationWriter(database, tenant)
    handle = await writer.begin_turn(conversation_uuid, allowed=STARTABLE & {status})
    await writer.write(
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
            changes={"status": status},
        ),
    )
