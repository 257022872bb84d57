"""The store's tables as Core tables, and the metadata every pilothouse table is in.

A turn's statements (:mod:`pilothouse.store._sqlstore`, the leases) are Core
statements on these tables, so a first turn does not import SQLAlchemy's ORM
(about 0.2 s of a cold start with the mapped classes and their mapper
configuration). The mapped classes (:mod:`pilothouse.store._records`,
:mod:`pilothouse.store._outbox`) are declared on them for what uses the ORM.
"""

from __future__ import annotations

__all__ = [
    "MEMORY_ID_LENGTH",
    "NAMING",
    "attachment_table",
    "budget_usage_table",
    "conversation_table",
    "dataset_case_table",
    "dataset_table",
    "event_outbox_table",
    "event_processed_table",
    "event_reply_table",
    "memory_order",
    "message_table",
    "replay_result_table",
    "replay_run_table",
    "metadata",
    "timeline_event_table",
    "tool_call_table",
    "turn_cancel_table",
    "turn_owner_table",
]

from decimal import Decimal
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Numeric,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from pilothouse.catalog._enums import (
    FinishReason,
    MessageRole,
    ProcessStatus,
    TimelineKind,
    ToolCallStatus,
)
from pilothouse.store._base import utcnow
from pilothouse.store._types import UtcDateTime, coded_enum

# Deterministic constraint names let Alembic alter constraints on SQLite
# (batch mode) and PostgreSQL alike.
NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING)
"""The metadata of every pilothouse table (catalog, store, knowledge, memory)."""

MEMORY_ID_LENGTH = 64
"""The longest ``memory_id`` a conversation keeps (its column's length)."""

conversation_table = Table(
    "conversation",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("uuid", String(36), unique=True, nullable=False),
    Column("tenant", String(32), default="default", nullable=False),
    Column("agent_code", String(12)),
    Column("action_code", String(12), nullable=False),
    Column(
        "status",
        coded_enum(ProcessStatus, "process_status"),
        default=ProcessStatus.NOT_STARTED,
        nullable=False,
    ),
    Column("finish_reason", coded_enum(FinishReason, "finish_reason")),
    Column("response_model", String(256)),
    Column("input_tokens", Integer, default=0, nullable=False),
    Column("output_tokens", Integer, default=0, nullable=False),
    Column("cached_tokens", Integer, default=0, nullable=False),
    Column("reasoning_tokens", Integer, default=0, nullable=False),
    Column("estimated_cost", Numeric(18, 8), default=Decimal(0), nullable=False),
    Column("error_detail", Text),
    Column("memory_id", String(MEMORY_ID_LENGTH), nullable=False),
    Column("audit", Boolean, default=True, nullable=False),
    Column("created_at", UtcDateTime, default=utcnow, nullable=False),
    Column("started_at", UtcDateTime),
    Column("finished_at", UtcDateTime),
    Column("updated_at", UtcDateTime, default=utcnow, onupdate=utcnow, nullable=False),
    Column("version", Integer, nullable=False),
    Column("owner", String(36)),
    # Who started it (pilothouse/_caller.py): NULL on rows older than the columns.
    Column("face", String(16)),
    Column("caller_key_prefix", String(32)),
    Column("caller_key_name", String(128)),
    # When a caller last cancelled it while no turn of it ran, on the
    # database's clock: a turn whose request arrived before refuses to run
    # (it was still being prepared in another process, with nothing written).
    Column("cancelled_at", UtcDateTime),
    Index("ix_conversation_tenant_created", "tenant", "created_at"),
    Index("ix_conversation_tenant_memory", "tenant", "memory_id"),
    # The start-up sweep and the owners' cancel poll look for running
    # turns by owner; without it both would scan every conversation.
    Index("ix_conversation_status_owner", "status", "owner"),
)

message_table = Table(
    "message",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("conversation_id", Integer, ForeignKey("conversation.id"), nullable=False),
    Column("sequence", Integer, nullable=False),
    Column("role", coded_enum(MessageRole, "message_role"), nullable=False),
    Column("content", Text, default="", nullable=False),
    Column("token_count", Integer),
    Column("tool_call_id", String(128)),
    Column("data", JSON),
    Column("created_at", UtcDateTime, default=utcnow, nullable=False),
    UniqueConstraint("conversation_id", "sequence"),
)

attachment_table = Table(
    "attachment",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("conversation_id", Integer, ForeignKey("conversation.id"), nullable=False),
    Column("message_sequence", Integer, nullable=False),
    Column("sequence", Integer, nullable=False),
    Column("media_type", String(128), nullable=False),
    Column("name", String(256)),
    Column("url", Text),
    Column("content", LargeBinary),
    Column("created_at", UtcDateTime, default=utcnow, nullable=False),
    UniqueConstraint("conversation_id", "message_sequence", "sequence"),
)

tool_call_table = Table(
    "tool_call",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("conversation_id", Integer, ForeignKey("conversation.id"), nullable=False),
    Column("message_sequence", Integer, nullable=False),
    Column("call_id", String(128), nullable=False),
    Column("name", String(128), nullable=False),
    Column("arguments", JSON, default=dict, nullable=False),
    Column("result", Text),
    Column(
        "status",
        coded_enum(ToolCallStatus, "tool_call_status"),
        default=ToolCallStatus.REQUESTED,
        nullable=False,
    ),
    Column("created_at", UtcDateTime, default=utcnow, nullable=False),
    Column("finished_at", UtcDateTime),
    UniqueConstraint("conversation_id", "call_id"),
)

timeline_event_table = Table(
    "timeline_event",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("conversation_id", Integer, ForeignKey("conversation.id"), nullable=False),
    Column("sequence", Integer, nullable=False),
    Column("kind", coded_enum(TimelineKind, "timeline_kind"), nullable=False),
    Column("data", JSON, default=dict, nullable=False),
    Column("created_at", UtcDateTime, default=utcnow, nullable=False),
    UniqueConstraint("conversation_id", "sequence"),
)

turn_owner_table = Table(
    "turn_owner",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("pid", Integer, nullable=False),
    Column("pid_start", Integer),
    Column("started_at", UtcDateTime, default=utcnow, nullable=False),
    Column("heartbeat_at", UtcDateTime),
)

turn_cancel_table = Table(
    "turn_cancel",
    metadata,
    Column(
        "conversation_id",
        Integer,
        ForeignKey("conversation.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("owner", String(36), nullable=False),
    Column("reason", String(64), default="cancelled", nullable=False),
    Column("requested_at", UtcDateTime, default=utcnow, nullable=False),
)

event_outbox_table = Table(
    "event_outbox",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("correlation_id", String(64), unique=True, nullable=False),
    Column("tenant", String(32), nullable=False),
    Column("conversation_uuid", String(36), index=True, nullable=False),
    Column("call_id", String(128), nullable=False),
    Column("skill_name", String(128), nullable=False),
    Column("topic", String(249), nullable=False),
    Column("reply_to", String(249), nullable=False),
    Column("payload", JSON, nullable=False),
    Column("created_at", UtcDateTime, default=utcnow, nullable=False),
    Column("deadline", UtcDateTime, index=True, nullable=False),
    Column("published_at", UtcDateTime, index=True),
    Column("attempts", Integer, default=0, nullable=False),
)

event_processed_table = Table(
    "event_processed",
    metadata,
    Column("correlation_id", String(64), primary_key=True),
    Column("tenant", String(32)),
    Column("conversation_uuid", String(36)),
    Column("outcome", String(16), nullable=False),
    Column("processed_at", UtcDateTime, default=utcnow, nullable=False),
    Column("duplicates", Integer, default=0, nullable=False),
    Column("last_duplicate_at", UtcDateTime),
    Column("detail", Text),
)

event_reply_table = Table(
    "event_reply",
    metadata,
    Column("correlation_id", String(64), primary_key=True),
    Column("tenant", String(32), nullable=False),
    Column("conversation_uuid", String(36), unique=True, nullable=False),
    Column("reply_to", String(249), nullable=False),
    Column("created_at", UtcDateTime, default=utcnow, nullable=False),
    Column("claimed_at", UtcDateTime),
    Column("published_at", UtcDateTime, index=True),
)


def memory_order() -> tuple[Any, ...]:
    """The columns that order a chat memory's messages in writing order.

    Messages of one step share a timestamp; the conversation and the
    sequence break the tie. The turn's memory read and the query API's
    window both sort by them.
    """
    columns = message_table.c
    return (columns.created_at, columns.conversation_id, columns.sequence)


# What each budget's scope has spent and holds in the current period. A
# model call holds its worst case (``held_*``) before it is sent and settles
# to what it used (``spent_*``); the hold is one conditional UPDATE, so two
# processes can never both take the last of a limit. ``alerted`` is the
# highest threshold already announced this period, so each alert fires once.
budget_usage_table = Table(
    "budget_usage",
    metadata,
    Column("tenant", String(32), primary_key=True),
    Column("budget", String(12), primary_key=True),
    Column("subject", String(MEMORY_ID_LENGTH), primary_key=True),
    Column("period", String(24), primary_key=True),
    Column("spent_money", Numeric(24, 12), default=Decimal(0), nullable=False),
    Column("held_money", Numeric(24, 12), default=Decimal(0), nullable=False),
    Column("spent_input", BigInteger, default=0, nullable=False),
    Column("held_input", BigInteger, default=0, nullable=False),
    Column("spent_output", BigInteger, default=0, nullable=False),
    Column("held_output", BigInteger, default=0, nullable=False),
    Column("turns", BigInteger, default=0, nullable=False),
    Column("alerted", BigInteger, default=0, nullable=False),
    Column("updated_at", UtcDateTime, default=utcnow, onupdate=utcnow, nullable=False),
)


# Evaluation datasets: named sets of cases, each a recorded (or hand-written)
# input with the output and tool results it got. ``source_conversation`` is
# kept so erasing a user removes the cases taken from their conversations.
dataset_table = Table(
    "dataset",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tenant", String(32), nullable=False),
    Column("name", String(128), nullable=False),
    Column("description", Text, default="", nullable=False),
    Column("created_at", UtcDateTime, default=utcnow, nullable=False),
    UniqueConstraint("tenant", "name"),
)

dataset_case_table = Table(
    "dataset_case",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("dataset_id", Integer, ForeignKey("dataset.id"), nullable=False, index=True),
    Column("sequence", Integer, nullable=False),
    Column("source_conversation", String(36), index=True),
    Column("action_code", String(12), nullable=False),
    Column("agent_code", String(12)),
    Column("input_text", Text, default="", nullable=False),
    Column("input_data", JSON),
    Column("expected_output", Text),
    Column("tool_calls", JSON, default=list, nullable=False),
    Column("tags", JSON, default=list, nullable=False),
    Column("recorded", JSON, default=dict, nullable=False),
    Column("created_at", UtcDateTime, default=utcnow, nullable=False),
    UniqueConstraint("dataset_id", "sequence"),
)

# A replay run: a dataset run again against a changed target. Each finished
# case is one row of ``replay_result`` (so an interrupted run resumes with
# the cases it lacks); the conversation it ran is recorded with face
# ``replay``.
replay_run_table = Table(
    "replay_run",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tenant", String(32), nullable=False),
    Column("name", String(128), nullable=False),
    Column("dataset", String(128), nullable=False),
    Column("target", JSON, default=dict, nullable=False),
    Column("created_at", UtcDateTime, default=utcnow, nullable=False),
    Column("finished_at", UtcDateTime),
    UniqueConstraint("tenant", "name"),
)

replay_result_table = Table(
    "replay_result",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("run_id", Integer, ForeignKey("replay_run.id"), nullable=False, index=True),
    Column("case_sequence", Integer, nullable=False),
    Column("conversation_uuid", String(36)),
    Column("status", String(16), nullable=False),
    Column("output", Text),
    Column("tool_calls", JSON, default=list, nullable=False),
    Column("divergences", JSON, default=list, nullable=False),
    Column("answered", Integer, default=0, nullable=False),
    Column("input_tokens", Integer, default=0, nullable=False),
    Column("output_tokens", Integer, default=0, nullable=False),
    Column("cost", Numeric(18, 8), default=Decimal(0), nullable=False),
    Column("latency_ms", Integer),
    Column("error", Text),
    Column("created_at", UtcDateTime, default=utcnow, nullable=False),
    UniqueConstraint("run_id", "case_sequence"),
)
