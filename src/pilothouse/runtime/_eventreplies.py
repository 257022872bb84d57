"""Reply targets of ``run_action``: the final ``turn_finished`` of a conversation.

A ``run_action`` whose turn waits on an event tool is answered twice on
its ``replyTo``: at once with the waiting turn (``WA``), and again when the
conversation finishes. The second answer may come from any process and any
resume path (a worker's completion, a caller's ``submit_tool_result``, a
deadline, a cancel), so the target lives in ``event_reply``, written before
the first turn, and the answer is read back from the stored conversation.

Publishing is at least once: a process claims a row (``claimed_at``),
publishes, then notes it published; a process that dies in between leaves
a claim that another takes over once it is older than the lease.
"""

from __future__ import annotations

__all__ = ["EventReplies", "FinishedReply"]

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from typing import Any, Literal, cast

from sqlalchemy import or_, select, update
from sqlalchemy.exc import IntegrityError

from pilothouse.catalog._enums import MessageRole, ProcessStatus
from pilothouse.errors import PilothouseError
from pilothouse.runtime._actionrecovery import first_turn_only
from pilothouse.runtime._events import SETTLED, TurnResult, settled
from pilothouse.runtime._runner import Runner
from pilothouse.store import Conversation, ConversationQueries, Database, EventReply
from pilothouse.store._base import utcnow


@dataclass(frozen=True, slots=True)
class FinishedReply:
    """A finished conversation's answer, claimed for publishing.

    Attributes:
        correlation_id: the ``run_action``'s correlation id.
        reply_to: where the answer goes.
        result: the conversation's final state as a turn result: its last
            answer, status, finish reason, error, and the usage of the whole
            conversation (every turn of the run, the waiting one included).
    """

    correlation_id: str
    reply_to: str
    result: TurnResult


class EventReplies:
    """The reply targets of ``run_action``, for every tenant of a process.

    Args:
        database: the store.
        runner: the runner of a tenant (its compiler tells whether an
            action's answer is JSON).
    """

    def __init__(self, database: Database, runner: Callable[[str], Runner]) -> None:
        self._db = database
        self._runner = runner

    async def register(
        self, tenant: str, correlation_id: str, conversation_uuid: str, reply_to: str
    ) -> Literal["new", "duplicate"]:
        """Note where the action's answer goes, before its first turn runs.

        Returns:
            ``new`` when the action is to be run (also after a crash between
            this note and the conversation's start); ``duplicate`` when its
            conversation exists: the command was run already.
        """
        now = utcnow()
        try:
            async with self._db.sessions.begin() as session:
                session.add(
                    EventReply(
                        correlation_id=correlation_id,
                        tenant=tenant,
                        conversation_uuid=conversation_uuid,
                        reply_to=reply_to,
                        created_at=now,
                        claimed_at=now,
                    )
                )
            return "new"
        except IntegrityError:
            # Noted before: a redelivery, or a process that died before the start.
            pass
        async with self._db.sessions.begin() as session:
            exists = await session.scalar(
                select(Conversation.id).where(
                    Conversation.tenant == tenant, Conversation.uuid == conversation_uuid
                )
            )
            if exists is not None:
                return "duplicate"
            await session.execute(
                update(EventReply)
                .where(EventReply.correlation_id == correlation_id)
                .values(claimed_at=now)
            )
        return "new"

    async def release(self, correlation_id: str) -> None:
        """Give up the claim: the conversation waits, any process answers when it finishes."""
        async with self._db.sessions.begin() as session:
            await session.execute(
                update(EventReply)
                .where(EventReply.correlation_id == correlation_id)
                .values(claimed_at=None)
            )

    async def sent(self, correlation_ids: list[str]) -> None:
        """Note final answers as published."""
        if not correlation_ids:
            return
        async with self._db.sessions.begin() as session:
            await session.execute(
                update(EventReply)
                .where(EventReply.correlation_id.in_(correlation_ids))
                .values(published_at=utcnow())
            )

    async def finished(
        self, lease: float, limit: int = 100, tenants: Collection[str] | None = None
    ) -> list[FinishedReply]:
        """Claim the unpublished answers of finished conversations and return them.

        Args:
            lease: seconds after which another process's claim is taken over
                (it died between claiming and noting the answer published).
            limit: at most this many.
            tenants: only answers of these tenants (None: every tenant).
        """
        now = utcnow()
        cutoff = now - timedelta(seconds=lease)
        open_claim = or_(EventReply.claimed_at.is_(None), EventReply.claimed_at < cutoff)
        statement = (
            select(EventReply.correlation_id, EventReply.reply_to, Conversation)
            .join(
                Conversation,
                (Conversation.uuid == EventReply.conversation_uuid)
                & (Conversation.tenant == EventReply.tenant),
            )
            .where(
                EventReply.published_at.is_(None),
                open_claim,
                Conversation.status.in_(list(SETTLED)),
                # Stuck in its first turn (its process died): run again by
                # the recovery, which answers; not answered ST meanwhile.
                ~((Conversation.status == ProcessStatus.STUCK) & first_turn_only()),
            )
        )
        if tenants is not None:
            statement = statement.where(EventReply.tenant.in_(list(tenants)))
        async with self._db.sessions() as session:
            rows = (
                await session.execute(statement.order_by(EventReply.created_at).limit(limit))
            ).all()
        replies: list[FinishedReply] = []
        for correlation_id, reply_to, conversation in rows:
            if not settled(conversation.status, conversation.finish_reason):
                continue
            async with self._db.sessions.begin() as session:
                claimed: Any = await session.execute(
                    update(EventReply)
                    .where(
                        EventReply.correlation_id == correlation_id,
                        EventReply.published_at.is_(None),
                        open_claim,
                    )
                    .values(claimed_at=now)
                )
            if claimed.rowcount != 1:
                continue  # another process took it meanwhile
            result = await self._result(conversation)
            replies.append(FinishedReply(correlation_id, reply_to, result))
        return replies

    async def _result(self, conversation: Conversation) -> TurnResult:
        tenant, uuid = conversation.tenant, conversation.uuid
        messages = await ConversationQueries(self._db, tenant).messages(uuid)
        last = next((m for m in reversed(messages) if m.role is MessageRole.ASSISTANT), None)
        data: dict[str, Any] = dict(last.data or {}) if last is not None else {}
        answered = last is not None and (
            conversation.status is ProcessStatus.COMPLETED
            or (conversation.status is ProcessStatus.TERMINATED and bool(data.get("interrupted")))
        )
        output: Any = None
        text = ""
        if answered and last is not None:
            text = last.content
            output = text
            if conversation.status is ProcessStatus.COMPLETED and await self._json_answer(
                conversation
            ):
                try:
                    output = json.loads(text)
                except ValueError:
                    # Escaped on the way into the store (a NUL, a lone
                    # surrogate): the text is what the record holds.
                    output = text
        marker: Any = data.get("ai") if answered else None
        return TurnResult(
            conversation_uuid=uuid,
            status=conversation.status,
            finish_reason=conversation.finish_reason,
            output=output,
            text=text,
            input_tokens=conversation.input_tokens,
            output_tokens=conversation.output_tokens,
            cost=Decimal(conversation.estimated_cost),
            ai_meta=cast("dict[str, Any]", marker) if isinstance(marker, dict) else None,
            error=conversation.error_detail,
        )

    async def _json_answer(self, conversation: Conversation) -> bool:
        """Whether the action answers JSON (an output schema): its stored text is then parsed."""
        runner = self._runner(conversation.tenant)
        try:
            compiled = await runner.compiler.compile(
                conversation.tenant, conversation.action_code, conversation.agent_code
            )
        except PilothouseError:
            # The action was removed or deactivated since the conversation
            # ran: its stored answer is sent as the text it is.
            return False
        return compiled.output_schema is not None
