"""Persistence: database engine, migrations, the conversation store and its repository.

Turns write through one :class:`TurnStore` protocol: :class:`SqlTurnStore`
(the driver-level fast path deployments use) and :class:`OrmTurnStore` (the
reference it is tested against); :class:`ConversationQueries` reads.
"""

from typing import TYPE_CHECKING

from pilothouse._caller import Caller
from pilothouse._lazy import lazy_exports
from pilothouse.store._engine import Database, current_revision, head_revision
from pilothouse.store._turnstore import (
    STARTABLE,
    NewAttachment,
    NewEvent,
    NewMessage,
    NewOutboxMessage,
    NewProcessed,
    NewToolCall,
    StoredMessage,
    ToolCallOutcome,
    TurnBatch,
    TurnHandle,
    TurnStore,
    Usage,
)

__all__ = [
    "STARTABLE",
    "AppendOnlyViolation",
    "Attachment",
    "AttachmentView",
    "Base",
    "Caller",
    "Conversation",
    "ConversationInfo",
    "ConversationLink",
    "ConversationQueries",
    "ConversationView",
    "Database",
    "EventOutbox",
    "EventProcessed",
    "GatewayCall",
    "NewGatewayCall",
    "EventReply",
    "Message",
    "MessageView",
    "Page",
    "TimelineEvent",
    "TimelineEventView",
    "ToolCall",
    "ToolCallView",
    "NewAttachment",
    "NewEvent",
    "NewMessage",
    "NewOutboxMessage",
    "NewProcessed",
    "NewToolCall",
    "OrmTurnStore",
    "SqlTurnStore",
    "StoredMessage",
    "ToolCallOutcome",
    "TurnBatch",
    "TurnHandle",
    "TurnStore",
    "Usage",
    "current_revision",
    "head_revision",
    "list_gateway_calls",
    "record_gateway_call",
]

if TYPE_CHECKING:
    from pilothouse.store._declarative import Base
    from pilothouse.store._gatewaycalls import (
        GatewayCall,
        NewGatewayCall,
        list_gateway_calls,
        record_gateway_call,
    )
    from pilothouse.store._lineage import ConversationLink
    from pilothouse.store._ormstore import OrmTurnStore
    from pilothouse.store._outbox import EventOutbox, EventProcessed, EventReply
    from pilothouse.store._queries import (
        AttachmentView,
        ConversationInfo,
        ConversationQueries,
        ConversationView,
        MessageView,
        Page,
        TimelineEventView,
        ToolCallView,
    )
    from pilothouse.store._records import (
        AppendOnlyViolation,
        Attachment,
        Conversation,
        Message,
        TimelineEvent,
        ToolCall,
    )
    from pilothouse.store._sqlstore import SqlTurnStore

# Loaded on first use: the mapped classes and their base (importing them
# loads SQLAlchemy's ORM, which a turn on the fast path does not use), the
# turn stores (they check actions and agents in the catalog's tables), and
# what a turn does not use (the read queries, lineage, the gateways' audit).
_LAZY: dict[str, tuple[str, ...]] = {
    "_declarative": ("Base",),
    "_gatewaycalls": ("GatewayCall", "NewGatewayCall", "list_gateway_calls", "record_gateway_call"),
    "_lineage": ("ConversationLink",),
    "_ormstore": ("OrmTurnStore",),
    "_outbox": ("EventOutbox", "EventProcessed", "EventReply"),
    "_queries": (
        "AttachmentView",
        "ConversationInfo",
        "ConversationQueries",
        "ConversationView",
        "MessageView",
        "Page",
        "TimelineEventView",
        "ToolCallView",
    ),
    "_records": (
        "AppendOnlyViolation",
        "Attachment",
        "Conversation",
        "Message",
        "TimelineEvent",
        "ToolCall",
    ),
    "_sqlstore": ("SqlTurnStore",),
}
_MODULE_OF, __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
