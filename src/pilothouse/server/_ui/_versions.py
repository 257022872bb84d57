"""The versions of a conversation: the conversation an edit forked and every fork after it.

An edit, a deletion or a regenerated answer never changes a recorded
conversation: it makes a fork, linked to its parent, which takes the
parent's place in the list. The chat's header lets the user step between
all of them (``‹ 2/3 ›``), oldest first, instead of listing each.
"""

from __future__ import annotations

__all__ = ["versions_of"]

from pilothouse.api import Pilothouse
from pilothouse.types import ConversationSummary

# How far the UI looks: the lineage of a conversation is walked up at most this
# many parents, and its forks are found among the tenant's newest conversations.
_MAX_DEPTH = 50
_SCAN = 500


async def versions_of(ph: Pilothouse, current: ConversationSummary) -> list[ConversationSummary]:
    """Every version of ``current``'s conversation, oldest first (``[current]`` when unforked)."""
    root = current
    for _ in range(_MAX_DEPTH):
        if root.parent_uuid is None:
            break
        root = await ph.history.get(root.parent_uuid)
    recent = await ph.history.list_conversations(limit=_SCAN, include_hidden=True)
    children: dict[str, list[ConversationSummary]] = {}
    for summary in recent:
        if summary.parent_uuid is not None:
            children.setdefault(summary.parent_uuid, []).append(summary)
    found = {root.uuid: root}
    waiting = [root.uuid]
    while waiting:
        for child in children.get(waiting.pop(), []):
            if child.uuid not in found:
                found[child.uuid] = child
                waiting.append(child.uuid)
    found.setdefault(current.uuid, current)
    return sorted(found.values(), key=lambda s: s.created_at)
