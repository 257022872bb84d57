"""Append messages to a conversation before its first turn.

The OpenAI-compatible endpoint replays a request's earlier messages into a
fresh conversation so the turn sees them as chat memory, and the one-call
connector records the ad-hoc configuration of each call as a system message.
Both go through the store's writer like a turn does: the conversation is
taken (``NS``/``CO`` -> ``RU``), the messages are written in one transaction,
and it is handed back in the status it had, with both changes on the audit
timeline, so nothing bypasses the rule that one writer holds a conversation.
"""

from __future__ import annotations

__all__ = ["append_messages"]

from collections.abc import Sequence

from pilothouse.catalog._enums import ProcessStatus, TimelineKind
from pilothouse.store import STARTABLE, NewEvent, NewMessage, TurnBatch, TurnStore


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
