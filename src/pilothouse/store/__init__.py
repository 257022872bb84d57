"""Persistence: database engine, migrations, the conversation store and its repository."""

from pilothouse.store._base import Base
from pilothouse.store._engine import Database, head_revision
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
    "Base",
    "Conversation",
    "Database",
    "Message",
    "TimelineEvent",
    "ToolCall",
    "head_revision",
]
