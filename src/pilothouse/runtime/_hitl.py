"""Answers from people and results from callers: resuming a paused conversation.

A turn that asked the user (``AskUserQuestion``) ended ``WA`` without
holding a thread; one that called a custom-schema tool ended ``CO`` with
finish reason ``TC``. Everything needed to go on lives in the store, so
these work after a restart: validate the answer against what is pending,
record it, and let the run loop continue. Questions unanswered past the
action's wait limit end the conversation ``TE``.
"""

from __future__ import annotations

__all__ = ["AnswerError", "Resumption"]

import json
from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from pilothouse._caller import Caller
from pilothouse.catalog._enums import ProcessStatus, TimelineKind, ToolCallStatus
from pilothouse.errors import InvalidStateError, NotFoundError, PilothouseError
from pilothouse.runtime._eventcalls import EventCalls
from pilothouse.runtime._events import Listener, ReturnedCall, TurnResult
from pilothouse.runtime._runner import Runner
from pilothouse.runtime._toolset import ASK_USER
from pilothouse.runtime._toolstep import answers_reply, answers_words
from pilothouse.runtime._turn import ToolReply
from pilothouse.store import Conversation, ConversationQueries, Database, Message, NewEvent
from pilothouse.store._base import utcnow


class AnswerError(PilothouseError):
    """Answers that do not fit the pending questions."""


class Resumption:
    """Submits answers and tool results for one tenant's conversations.

    Args:
        database: the store.
        tenant: the tenant.
        runner: runs the continued turn, and gives the action's wait limit.
        caller: who submits (face and API key), named on the answers' and
            results' timeline events; the turn they resume is charged to
            its API key's budgets.
    """

    def __init__(
        self, database: Database, tenant: str, runner: Runner, caller: Caller | None = None
    ) -> None:
        self._tenant = tenant
        self._database = database
        self._queries = ConversationQueries(database, tenant)
        self._runner = runner
        self._caller = caller

    def _who(self) -> dict[str, Any]:
        """Who gave the answers or the result, for their event (nothing when not known)."""
        # They may come through another face or key than the conversation's
        # start: the record names the one that did.
        return {"caller": self._caller.as_data()} if self._caller is not None else {}

    async def _deadline_passed(self, conversation: Conversation, questions: list[Message]) -> bool:
        compiled = await self._runner.compiled_of(conversation.uuid)
        asked = max(q.created_at for q in questions)
        return utcnow() > asked + timedelta(seconds=compiled.question_timeout)

    async def submit_answers(
        self, uuid: str, answers: Mapping[str, str], on_event: Listener | None = None
    ) -> TurnResult:
        """Answer every pending question and continue the conversation.

        Raises:
            NotFoundError: unknown conversation.
            InvalidStateError: not waiting, or the questions expired (the
                conversation is then ended ``TE``).
            AnswerError: unknown or missing question ids, or an answer that is
                not one of the question's choices.
        """
        conversation = await self._queries.get(uuid)
        if conversation.status is not ProcessStatus.WAITING:
            raise InvalidStateError(
                f"conversation '{uuid}' is not waiting for answers "
                f"(status {conversation.status.name} {conversation.status.value})"
            )
        questions = await self._queries.pending_questions(uuid)
        if not questions:
            raise InvalidStateError(f"conversation '{uuid}' has no pending questions")
        if await self._deadline_passed(conversation, questions):
            await self._runner.terminate(uuid, "questions expired")
            raise InvalidStateError(
                f"conversation '{uuid}': the questions expired unanswered; "
                "the conversation was terminated"
            )
        by_id = {str((q.data or {}).get("question_id")): q for q in questions}
        _check(by_id, answers)
        replies: list[ToolReply] = []
        for call_id in dict.fromkeys(q.tool_call_id or "" for q in questions):
            asked = [
                (qid, q.content) for qid, q in by_id.items() if (q.tool_call_id or "") == call_id
            ]
            given = {k: str(v) for k, v in answers.items()}
            content = answers_reply(asked, given)
            words = answers_words(asked, given)
            replies.append(ToolReply(call_id, ASK_USER, content, words=words))
        event = NewEvent(TimelineKind.HUMAN_ANSWER, {"answers": dict(answers), **self._who()})
        return await self._runner.resume(
            uuid,
            replies,
            allowed=frozenset({ProcessStatus.WAITING}),
            event=event,
            on_event=on_event,
            caller=self._caller,
        )

    async def submit_tool_result(
        self,
        uuid: str,
        tool_call_id: str,
        result: Any,
        on_event: Listener | None = None,
    ) -> TurnResult:
        """Give the result of a call that was returned to the caller.

        When every returned call of the turn has its result, the model
        continues; until then the result is recorded and the conversation
        stays ``CO`` with finish reason ``TC``. A call of an event tool
        (waiting ``WA`` on the bus) takes the result as its completion,
        at most once: the worker's completion that comes later is counted
        and ignored, and a result for a call the bus answered is refused.

        Raises:
            NotFoundError: unknown conversation or tool call.
            InvalidStateError: the call already has a result, or the
                conversation is not at rest.
        """
        conversation = await self._queries.get(uuid)
        calls = await self._queries.tool_calls(uuid)
        call = next((c for c in calls if c.call_id == tool_call_id), None)
        if call is None:
            raise NotFoundError(f"tool call '{tool_call_id}' not found in conversation '{uuid}'")
        # An event tool's call waits on the bus (WA); the caller may answer it
        # instead of a worker, at most once whichever comes first.
        runner = self._runner
        events = EventCalls(self._database, lambda _tenant: runner)
        submitted = await events.submit(self._tenant, uuid, tool_call_id, result, self._caller)
        if submitted is not None:
            return submitted
        if call.status is not ToolCallStatus.RETURNED:
            raise InvalidStateError(
                f"tool call '{tool_call_id}' is not waiting for a result (it is {call.status})"
            )
        if conversation.status is not ProcessStatus.COMPLETED:
            raise InvalidStateError(
                f"conversation '{uuid}' cannot take tool results in status "
                f"{conversation.status.name} ({conversation.status.value})"
            )
        content = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        pending = [
            ReturnedCall(c.call_id, c.name, c.arguments)
            for c in calls
            if c.status is ToolCallStatus.RETURNED and c.call_id != tool_call_id
        ]
        event = NewEvent(
            TimelineKind.TOOL_EXECUTION,
            {
                "call_id": tool_call_id,
                "tool": call.name,
                "status": "result from caller",
                **self._who(),
            },
        )
        return await self._runner.resume(
            uuid,
            [ToolReply(tool_call_id, call.name, content)],
            allowed=frozenset({ProcessStatus.COMPLETED}),
            event=event,
            on_event=on_event,
            still_pending=pending,
            caller=self._caller,
        )

    async def expire_waiting(self) -> int:
        """End every conversation whose questions waited past the limit.

        Returns:
            How many conversations were terminated.
        """
        # Collect first: terminating changes the status, which would shift pages.
        waiting: list[Conversation] = []
        while True:
            page = await self._queries.list(
                status=ProcessStatus.WAITING, limit=100, offset=len(waiting)
            )
            waiting.extend(page.items)
            if len(page.items) < 100:
                break
        expired = 0
        for conversation in waiting:
            questions = await self._queries.pending_questions(conversation.uuid)
            if questions and await self._deadline_passed(conversation, questions):
                await self._runner.terminate(conversation.uuid, "questions expired")
                expired += 1
        return expired


def _check(by_id: Mapping[str, Message], answers: Mapping[str, Any]) -> None:
    unknown = sorted(set(answers) - set(by_id))
    if unknown:
        raise AnswerError(
            f"no pending question with id {', '.join(repr(u) for u in unknown)} "
            f"(pending: {', '.join(sorted(by_id))})"
        )
    missing = sorted(set(by_id) - set(answers))
    if missing:
        raise AnswerError(f"answers missing for {', '.join(repr(m) for m in missing)}")
    for qid, message in by_id.items():
        listed: list[Any] = (message.data or {}).get("choices") or []
        choices = [str(c) for c in listed]
        if choices and str(answers[qid]) not in choices:
            raise AnswerError(
                f"answer to '{qid}' must be one of {', '.join(repr(c) for c in choices)}"
            )
