"""The history half of the facade: titles, forks, hiding, export and import of conversations.

Recorded messages and timeline events are the audit log: nothing here
updates or deletes them. An edit of a recorded prompt makes a **fork**, a
new conversation linked to its parent, holding copies of the parent's
messages up to the edit; the parent is hidden from lists, not erased. A
title change, a fork and a hiding are each appended to the timeline.
"""

from __future__ import annotations

__all__ = ["EXPORT_FORMAT", "HistoryApi"]

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import or_, select

from pilothouse._facade import records
from pilothouse._facade.facet import Facet
from pilothouse.catalog._enums import MessageRole, ProcessStatus, TimelineKind
from pilothouse.catalog._reserved import ADHOC_ACTION
from pilothouse.errors import InvalidFieldError, InvalidStateError, NotFoundError
from pilothouse.store import (
    Caller,
    Conversation,
    ConversationQueries,
    Database,
    Message,
    NewMessage,
)
from pilothouse.store._lineage import ConversationLink, append_event, link_of
from pilothouse.types import ConversationSummary

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncSession

    from pilothouse.runtime import Runner
    from pilothouse.store import MessageView

EXPORT_FORMAT = "pilothouse.conversation/1"
"""The ``format`` of an exported conversation document."""

_TITLE_LENGTH = 200
_ROLES = {role.value: role for role in MessageRole}


def _like_escaped(text: str) -> str:
    """``text`` as a literal inside a LIKE pattern: its percent, underscore and backslash."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _title_from(text: str) -> str:
    # The first prompt names a conversation: its first line, shortened.
    line = " ".join(text.strip().split())
    return line if len(line) <= 60 else line[:59].rstrip() + "…"


def _summary(conversation: Conversation, link: ConversationLink | None) -> ConversationSummary:
    return ConversationSummary(
        uuid=conversation.uuid,
        title=link.title if link is not None and link.title else None,
        action_code=conversation.action_code,
        agent_code=conversation.agent_code,
        status=conversation.status,
        created_at=conversation.created_at,
        input_tokens=conversation.input_tokens,
        output_tokens=conversation.output_tokens,
        estimated_cost=conversation.estimated_cost,
        parent_uuid=link.parent_uuid if link is not None else None,
        hidden=link.hidden if link is not None else False,
    )


def _kept(
    messages: Sequence[MessageView],
    before: int | None,
    drop_prompt: int | None,
    replace: Mapping[int, str],
) -> list[NewMessage]:
    """The copies a fork holds: messages before ``before``, minus a dropped prompt's exchange."""
    dropped: set[int] = set()
    if drop_prompt is not None:
        prompt = next((m for m in messages if m.sequence == drop_prompt), None)
        if prompt is None or prompt.role is not MessageRole.USER:
            raise InvalidFieldError("drop_prompt", f"message {drop_prompt} is no user prompt")
        # A prompt's exchange: the prompt and everything up to the next prompt.
        dropped.add(prompt.sequence)
        for message in messages:
            if message.sequence > prompt.sequence:
                if message.role is MessageRole.USER:
                    break
                dropped.add(message.sequence)
    for sequence in replace:
        target = next((m for m in messages if m.sequence == sequence), None)
        if target is None or target.role is not MessageRole.USER:
            raise InvalidFieldError("replace", f"message {sequence} is no user prompt")
    kept: list[NewMessage] = []
    for message in messages:
        if before is not None and message.sequence >= before:
            break
        if message.sequence in dropped:
            continue
        kept.append(
            NewMessage(
                message.role,
                replace.get(message.sequence, message.content),
                token_count=None if message.sequence in replace else message.token_count,
                tool_call_id=message.tool_call_id,
                data=message.data,
            )
        )
    if before is not None:
        # A system prompt just before the cut was recorded for the prompt the fork
        # replaces (it holds that prompt's input); the turn sent into the fork records
        # its own, so a copy would show the fork two system prompts for one turn.
        while (
            kept
            and kept[-1].role is MessageRole.SYSTEM
            and not (kept[-1].data or {}).get("memory_cleared")
        ):
            kept.pop()
    return kept


class HistoryApi(Facet):
    """Lists, names, forks, hides, exports and imports the conversations of one tenant.

    Args:
        database: the store.
        tenant: whose conversations.
        runner: the tenant's run loop (its store creates conversations).
        default_audit: the deployment's audit setting, for imported conversations.
    """

    def __init__(
        self,
        database: Callable[[], Database],
        tenant: str,
        *,
        runner: Callable[[], Runner],
        default_audit: bool,
        caller: Caller | None = None,
    ) -> None:
        super().__init__(database, tenant)
        self._runner_of = runner
        self._default_audit = default_audit
        # Forks and imports are new conversations: they record who made them.
        self._caller = caller

    async def _conversation(self, session: AsyncSession, uuid: str) -> Conversation:
        found = await session.scalars(
            select(Conversation).where(
                Conversation.tenant == self.tenant, Conversation.uuid == uuid
            )
        )
        conversation = found.one_or_none()
        if conversation is None:
            raise NotFoundError(f"no conversation {uuid!r}")
        return conversation

    async def _label(
        self,
        session: AsyncSession,
        conversation: Conversation,
        **changes: Any,
    ) -> ConversationLink:
        link = await link_of(session, self.tenant, conversation.uuid)
        if link is None:
            link = ConversationLink(
                tenant=self.tenant, conversation_uuid=conversation.uuid, hidden=False
            )
            session.add(link)
        for name, value in changes.items():
            setattr(link, name, value)
        return link

    async def list_conversations(
        self,
        *,
        limit: int = 50,
        offset: int = 0,
        include_hidden: bool = False,
        search: str | None = None,
    ) -> list[ConversationSummary]:
        """Return conversations newest first, with their titles; hidden ones left out.

        Args:
            limit: page size (at least 1).
            offset: conversations to skip.
            include_hidden: also return hidden conversations.
            search: only conversations whose title or a message's text holds
                this text (case-insensitive; up to 200 characters).
        """
        if limit < 1:
            raise InvalidFieldError("limit", "must be at least 1")
        if search is not None and len(search) > _TITLE_LENGTH:
            raise InvalidFieldError("search", f"must have at most {_TITLE_LENGTH} characters")
        db = await self._ready()
        statement = (
            select(Conversation, ConversationLink)
            .outerjoin(ConversationLink, ConversationLink.conversation_uuid == Conversation.uuid)
            .where(Conversation.tenant == self.tenant)
            .order_by(Conversation.created_at.desc(), Conversation.id.desc())
            .limit(limit)
            .offset(offset)
        )
        if not include_hidden:
            statement = statement.where(
                or_(ConversationLink.id.is_(None), ConversationLink.hidden.is_(False))
            )
        if search and search.strip():
            pattern = "%" + _like_escaped(search.strip()) + "%"
            in_text = (
                select(Message.id)
                .where(Message.conversation_id == Conversation.id)
                .where(Message.content.ilike(pattern, escape="\\"))
                .exists()
            )
            statement = statement.where(
                or_(ConversationLink.title.ilike(pattern, escape="\\"), in_text)
            )
        async with db.sessions() as session:
            rows = (await session.execute(statement)).all()
            return [_summary(conversation, link) for conversation, link in rows]

    async def get(self, uuid: str) -> ConversationSummary:
        """Return one conversation's summary (hidden ones too).

        Raises:
            NotFoundError: no such conversation for this tenant.
        """
        db = await self._ready()
        async with db.sessions() as session:
            conversation = await self._conversation(session, uuid)
            return _summary(conversation, await link_of(session, self.tenant, uuid))

    async def rename(self, uuid: str, title: str) -> ConversationSummary:
        """Give a conversation a title; the change is appended to its timeline.

        Raises:
            InvalidFieldError: an empty or too long title.
            NotFoundError: no such conversation.
        """
        title = title.strip()
        if not title or len(title) > _TITLE_LENGTH:
            raise InvalidFieldError("title", f"must have 1 to {_TITLE_LENGTH} characters")
        db = await self._ready()
        async with db.sessions() as session, session.begin():
            conversation = await self._conversation(session, uuid)
            link = await self._label(session, conversation, title=title)
            if conversation.audit:
                await append_event(session, conversation, TimelineKind.RENAME, {"title": title})
            return _summary(conversation, link)

    async def name_if_untitled(self, uuid: str, first_prompt: str) -> ConversationSummary:
        """Title a conversation after its first prompt, unless it has a title already."""
        current = await self.get(uuid)
        if current.title is not None or not first_prompt.strip():
            return current
        return await self.rename(uuid, _title_from(first_prompt))

    async def hide(self, uuid: str, *, reason: str = "deleted from the list") -> None:
        """Leave a conversation out of :meth:`list`; its records stay, the hiding is audited.

        Raises:
            NotFoundError: no such conversation.
            InvalidStateError: a turn is running in it.
        """
        db = await self._ready()
        async with db.sessions() as session, session.begin():
            conversation = await self._conversation(session, uuid)
            if conversation.status is ProcessStatus.RUNNING:
                raise InvalidStateError("the conversation is running a turn; cancel it first")
            await self._label(session, conversation, hidden=True)
            if conversation.audit:
                await append_event(session, conversation, TimelineKind.HIDE, {"reason": reason})

    async def fork(
        self,
        uuid: str,
        *,
        before: int | None = None,
        drop_prompt: int | None = None,
        replace: Mapping[int, str] | None = None,
        reason: str,
        hide_parent: bool = True,
    ) -> ConversationSummary:
        """Make a new conversation holding copies of some of ``uuid``'s messages.

        This is how a recorded prompt is edited or deleted without touching
        the audit rows: the fork is linked to its parent, both timelines
        record the fork, and the parent is hidden (by default).

        Args:
            uuid: the parent conversation (not running).
            before: copy only messages with a smaller sequence (an edit that
                resubmits, "delete with all following").
            drop_prompt: leave out this user prompt and the answers up to the
                next prompt ("delete prompt").
            replace: new texts of user prompts by sequence ("edit, save only").
            reason: why, written to both timelines (e.g. ``edit``).
            hide_parent: hide the parent from lists.

        Returns:
            The fork (status ``NS``), titled as its parent.

        Raises:
            NotFoundError: no such conversation.
            InvalidStateError: a turn is running in it.
            InvalidFieldError: a sequence names no user prompt.
        """
        db = await self._ready()
        parent = await self.get(uuid)
        if parent.status is ProcessStatus.RUNNING:
            raise InvalidStateError("the conversation is running a turn; wait for it or cancel it")
        messages = (await ConversationQueries(db, self.tenant).transcript(uuid)).messages
        copies = _kept(messages, before, drop_prompt, dict(replace or {}))
        runner = self._runner_of()
        async with db.sessions() as session:
            audit = (await self._conversation(session, uuid)).audit
        child = await runner.store.create(
            self.tenant,
            action_code=parent.action_code,
            agent_code=parent.agent_code,
            audit=audit,
            default_audit=self._default_audit,
            caller=self._caller,
        )
        await records.append_messages(
            runner.store, self.tenant, child.uuid, copies, status=ProcessStatus.NOT_STARTED
        )
        detail: dict[str, Any] = {"reason": reason, "before": before, "drop_prompt": drop_prompt}
        if replace:
            detail["replaced"] = sorted(replace)
        async with db.sessions() as session, session.begin():
            stored_parent = await self._conversation(session, uuid)
            stored_child = await self._conversation(session, child.uuid)
            link = await self._label(
                session,
                stored_child,
                parent_uuid=uuid,
                fork_sequence=before,
                title=parent.title,
            )
            if stored_child.audit:
                await append_event(
                    session,
                    stored_child,
                    TimelineKind.FORK,
                    {**detail, "parent": uuid, "copied": len(copies)},
                )
            if hide_parent:
                await self._label(session, stored_parent, hidden=True)
            if stored_parent.audit:
                await append_event(
                    session,
                    stored_parent,
                    TimelineKind.FORK,
                    {**detail, "fork": child.uuid, "hidden": hide_parent},
                )
            return _summary(stored_child, link)

    async def export(self, uuid: str) -> dict[str, Any]:
        """Return a conversation as a JSON-ready document :meth:`import_conversation` reads.

        Raises:
            NotFoundError: no such conversation.
        """
        summary = await self.get(uuid)
        view = await ConversationQueries(await self._ready(), self.tenant).transcript(uuid)
        return {
            "format": EXPORT_FORMAT,
            "title": summary.title,
            "parent_uuid": summary.parent_uuid,
            "conversation": view.model_dump(mode="json"),
        }

    async def import_conversation(self, document: Mapping[str, Any]) -> ConversationSummary:
        """Record an exported conversation as a new one of this tenant (status ``NS``).

        Its messages become the new conversation's history; the timeline
        records the import and the uuid it came from.

        Raises:
            InvalidFieldError: not an export document (the field is named).
            NotFoundError: its action or agent is not in this tenant's catalog.
        """
        if document.get("format") != EXPORT_FORMAT:
            raise InvalidFieldError(
                "format", f"must be {EXPORT_FORMAT!r} (an exported conversation)"
            )
        raw_body: Any = document.get("conversation")
        if not isinstance(raw_body, Mapping):
            raise InvalidFieldError("conversation", "must be an object")
        body = cast("Mapping[str, Any]", raw_body)
        action = body.get("action_code")
        agent = body.get("agent_code")
        raw_messages = body.get("messages")
        if not isinstance(action, str) or not action:
            raise InvalidFieldError("conversation.action_code", "must be an action's code")
        if agent is not None and not isinstance(agent, str):
            raise InvalidFieldError("conversation.agent_code", "must be an agent's code or null")
        # An ad-hoc run's conversation (a bare model's) names the reserved action, which
        # no catalog holds: it is imported as such, as its runs recorded it.
        adhoc = action == ADHOC_ACTION
        if adhoc and agent is not None:
            raise InvalidFieldError(
                "conversation.agent_code",
                f"must be null for an ad-hoc run's conversation ({action})",
            )
        if not isinstance(raw_messages, list):
            raise InvalidFieldError("conversation.messages", "must be a list")
        history: list[NewMessage] = []
        items = cast("list[Any]", raw_messages)
        for index, raw_item in enumerate(items):
            where = f"conversation.messages[{index}]"
            if not isinstance(raw_item, Mapping):
                raise InvalidFieldError(where, "must be an object")
            item = cast("Mapping[str, Any]", raw_item)
            role = _ROLES.get(str(item.get("role")))
            content = item.get("content", "")
            if role is None:
                raise InvalidFieldError(f"{where}.role", f"must be one of {sorted(_ROLES)}")
            if not isinstance(content, str):
                raise InvalidFieldError(f"{where}.content", "must be text")
            data = item.get("data")
            call_id = item.get("tool_call_id")
            history.append(
                NewMessage(
                    role,
                    content,
                    tool_call_id=call_id if isinstance(call_id, str) else None,
                    data=dict(cast("Mapping[str, Any]", data))
                    if isinstance(data, Mapping)
                    else None,
                )
            )
        runner = self._runner_of()
        await self._ready()
        conversation = await runner.store.create(
            self.tenant,
            action_code=action,
            agent_code=agent,
            default_audit=self._default_audit,
            check_catalog=not adhoc,
            caller=self._caller,
        )
        await records.append_messages(
            runner.store, self.tenant, conversation.uuid, history, status=ProcessStatus.NOT_STARTED
        )
        title = document.get("title")
        source = body.get("uuid")
        async with self._database.sessions() as session, session.begin():
            stored = await self._conversation(session, conversation.uuid)
            link = await self._label(
                session,
                stored,
                title=(str(title)[:_TITLE_LENGTH] if title else None),
            )
            if stored.audit:
                await append_event(
                    session,
                    stored,
                    TimelineKind.IMPORT,
                    {
                        "source_uuid": source if isinstance(source, str) else None,
                        "messages": len(history),
                    },
                )
            return _summary(stored, link)

    async def system_prompt(
        self,
        *,
        action: str,
        agent: str | None = None,
        input_data: Mapping[str, Any] | None = None,
        runtime_config: Mapping[str, Any] | None = None,
    ) -> str:
        """Return the system prompt a turn of ``action`` would send, without running it.

        Placeholders without a value in ``input_data`` are refused as a turn
        refuses them.

        Raises:
            NotFoundError: unknown action or agent.
            TemplateError: the input data does not fill the prompt.
            RuntimeConfigError: an invalid runtime config.
        """
        await self._ready()
        _, _, prompt = await self._runner_of().prepare(
            action, agent, "", input_data, runtime_config
        )
        return prompt
