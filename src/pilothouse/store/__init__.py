"""Persistence: database engine, migrations, the conversation store and its repository."""

from pilothouse.store._base import Base
from pilothouse.store._engine import Database, current_revision, head_revision
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

__all__ = [
    "AppendOnlyViolation",
    "Attachment",
    "AttachmentView",
    "Base",
    "Conversation",
    "ConversationInfo",
    "ConversationQueries",
    "ConversationView",
    "Database",
    "Message",
    "MessageView",
    "Page",
    "TimelineEvent",
    "TimelineEventView",
    "ToolCall",
    "ToolCallView",
    "current_revision",
    "head_revision",
]
