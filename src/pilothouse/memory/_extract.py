"""Extraction off the hot path: a turn's facts become ADD, UPDATE, DELETE or NOOP.

After a turn of a ``SCOPED`` action the run loop writes a ``memory_job`` row
(:meth:`MemoryExtractor.enqueue`); a worker (``pilothouse serve``, or
``pilothouse memory run-jobs``) runs it later. A job:

1. asks a model for the facts of the turn, as JSON (``{"facts": [...]}``);
2. compares each candidate with the most similar records of its scope: the
   same text is a NOOP without asking; no similar record is an ADD without
   asking; otherwise the model decides ADD, UPDATE, DELETE or NOOP against
   the similar records, which it sees under small integers rather than their
   uuids (mem0's way of keeping a model from inventing ids);
3. applies every decision and marks the job ``done`` in ONE transaction,
   fenced by the attempt that claimed it: a worker killed half-way leaves
   nothing applied, and the job is taken again, so it completes exactly once.
   A claimed job names the process that runs it (``outcome.owner``); a job
   whose process is gone (killed, out of memory) is put back to ``pending``
   at once when a service starts, and by every lease renewal of a running
   one (:meth:`MemoryExtractor.recover_orphans`), instead of waiting for its
   lease to end.

A model answer that is not the JSON asked for is sent back once with the
parse error, then the attempt fails: the job stays ``pending`` with the error
and is retried up to ``max_attempts``, then ``failed``. Every such answer is
logged; nothing is dropped in silence (mem0's most reported complaint is
``add()`` returning an empty result: mem0ai/mem0#2344).
"""

from __future__ import annotations

__all__ = ["Complete", "ExtractionError", "MemoryExtractor"]

import json
import logging
import re
import uuid as uuid_module
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import and_, delete, or_, select, update

from pilothouse.errors import PilothouseError
from pilothouse.memory._orphans import recover_orphaned_jobs
from pilothouse.memory._store import ScopedMemory, content_hash, scope_filter
from pilothouse.memory._tables import MemoryJob, MemoryRecord
from pilothouse.memory._types import (
    MEMORY_TYPES,
    EveryTenant,
    ExtractionOutcome,
    MemoryHit,
    MemoryScope,
)
from pilothouse.memory._versions import drop_versions, keep_version
from pilothouse.store._base import utcnow

if TYPE_CHECKING:
    from pilothouse.store._leases import Leases

logger = logging.getLogger(__name__)

Complete = Callable[[MemoryJob, str, str, Mapping[str, Any]], Awaitable[str]]
"""Ask the job's model: ``(job, system prompt, user prompt, answer schema) -> answer text``.

The schema is the JSON the answer must be; a model that can be held to it
(llama.cpp turns it into a grammar) is.
"""

FACTS_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "facts": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "text": {"type": "string"},
                    "scope": {"type": "string", "enum": ["user", "agent"]},
                    "type": {"type": "string"},
                    "importance": {"type": "number"},
                },
                "required": ["text", "scope"],
            },
        }
    },
    "required": ["facts"],
}
DECISION_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "event": {"type": "string", "enum": ["ADD", "UPDATE", "DELETE", "NOOP"]},
        "id": {"type": ["integer", "null"]},
        "text": {"type": ["string", "null"]},
    },
    "required": ["event"],
}

SAME_TEXT = 0.97
"""Cosine similarity above which a candidate is the record it resembles: NOOP."""
RELATED = 0.55
"""Cosine similarity from which an existing record is shown to the model for a decision."""
NEAR_DUPLICATE = 0.75
"""Cosine similarity from which a fact the model would ADD updates the record it resembles.

With the packaged MiniLM, a changed value of the same fact scores about
0.75-0.90 ("The user has two children." / "... three children." 0.90,
"... window seats." / "... aisle seats." 0.76), while two different facts
of one subject stay below 0.65 ("... allergic to peanuts." / "... is
vegetarian." 0.53): a small model answers ADD for the first kind too, and
the stale value would stay.
"""

FACTS_PROMPT = """You extract durable memories from a conversation between a user and an assistant.
Return ONLY a JSON object: {"facts": [{"text": str, "scope": "user" | "agent", "type": str,
"importance": number between 0 and 1}]}.
- scope "user": facts and preferences about the user (type "fact" or "preference").
- scope "agent": lessons the assistant learned about doing its job (type "learning").
- Each text is one short, self-contained sentence in the third person ("The user ...").
- Leave out greetings, questions, small talk and anything only true for this moment.
- If there is nothing worth remembering, return {"facts": []}.
Example: "user: I'm Tom and I only fly economy." ->
{"facts": [{"text": "The user's name is Tom.", "scope": "user", "type": "fact",
"importance": 0.8}, {"text": "The user only flies economy.", "scope": "user",
"type": "preference", "importance": 0.7}]}"""

DECIDE_PROMPT = """You maintain a memory store. Compare a NEW fact with EXISTING memories.
Return ONLY a JSON object: {"event": "ADD" | "UPDATE" | "DELETE" | "NOOP", "id": int | null,
"text": str | null}.
- ADD: the new fact is new information (id null).
- UPDATE: the new fact refines or corrects memory <id>; text is the merged sentence.
- DELETE: the new fact contradicts memory <id> and makes it false (it is removed; the
  new fact is then added).
- NOOP: the new fact is already known."""


_PROMPT_EXAMPLES = {
    "the user's name is tom": "tom",
    "the user only flies economy": "economy",
}
"""The facts of the prompt's own example, with the word the user must have said for them."""
_ABOUT_USER = re.compile(r"\buser(?:'s|s)?\b", re.IGNORECASE)
_QUESTION = re.compile(
    r"\b(?:asked|asks|is asking|wants to know|wanted to know|inquired|enquired)\b",
    re.IGNORECASE,
)
_CHANGE = re.compile(
    r"\b(?:now|any ?more|no longer|moved|changed|switched|instead|actually|new|left|"
    r"used to)\b",
    re.IGNORECASE,
)
"""Words by which a user says a value changed ("I moved to Lisbon", "my manager is Priya now")."""
_WORD = re.compile(r"[\w']+")


def replaces(old: str, new: str) -> bool:
    """Tell whether ``new`` is ``old`` with one value changed.

    Both say the same words before and after a short span that differs
    ("The user lives in Berlin." / "... in Lisbon."): the same fact with
    another value. Embedding similarity cannot tell this from a second value
    of a many-valued fact ("... allergic to penicillin." / "... to peanuts."
    score alike), so it counts only when the user also said the value changed.
    """
    a = _WORD.findall(old.lower())
    b = _WORD.findall(new.lower())
    prefix = 0
    while prefix < min(len(a), len(b)) and a[prefix] == b[prefix]:
        prefix += 1
    suffix = 0
    while suffix < min(len(a), len(b)) - prefix and a[-1 - suffix] == b[-1 - suffix]:
        suffix += 1
    changed_a, changed_b = len(a) - prefix - suffix, len(b) - prefix - suffix
    return prefix + suffix >= 3 and 1 <= changed_a <= 3 and 1 <= changed_b <= 3


def rejected(text: str, scope: str, user_said: str) -> str | None:
    """Why an extracted fact is not stored, or None when it may be.

    A small model repeats its prompt's example, turns the assistant's
    acknowledgement into a memory, or keeps general knowledge as a fact
    about the user: none of these is a memory of the user.

    Args:
        text: the fact's text.
        scope: ``user`` or ``agent``.
        user_said: the user's own messages of the turn.
    """
    plain = " ".join(text.lower().split()).rstrip(".")
    word = _PROMPT_EXAMPLES.get(plain)
    if word is not None and word not in user_said.lower():
        return "the extraction prompt's own example, not something the user said"
    if len(plain.split()) < 3:
        return "too short to be a fact (an acknowledgement, not a memory)"
    if scope == "user" and not _ABOUT_USER.search(text):
        return "not about the user (a user fact says 'The user ...'; general knowledge is not)"
    if _QUESTION.search(text):
        return "what the user asked in this turn, not a durable fact about them"
    return None


class ExtractionError(PilothouseError):
    """A model's extraction answer could not be used (after its repair)."""


class _Fact(BaseModel):
    model_config = ConfigDict(extra="ignore")

    text: str = Field(min_length=1, max_length=2000)
    scope: Literal["user", "agent"] = "user"
    type: str = "fact"
    importance: float = Field(default=0.7, ge=0.0, le=1.0)


class _Facts(BaseModel):
    model_config = ConfigDict(extra="ignore")

    facts: list[_Fact]


class _Decision(BaseModel):
    model_config = ConfigDict(extra="ignore")

    event: Literal["ADD", "UPDATE", "DELETE", "NOOP"]
    id: int | None = None
    text: str | None = None


@dataclass
class _Op:
    event: str
    scope: MemoryScope
    text: str
    memory_type: str
    importance: float
    target: str | None = None
    vector: Any = None


def parse_json_object(text: str) -> Any:
    """The JSON object in a model's answer (code fences and prose around it tolerated)."""
    body = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", body, re.DOTALL)
    if fenced:
        body = fenced.group(1).strip()
    start, end = body.find("{"), body.rfind("}")
    if start < 0 or end <= start:
        raise ValueError("no JSON object in the answer")
    return json.loads(body[start : end + 1])


class MemoryExtractor:
    """Queues, claims and runs extraction jobs.

    Args:
        memory: the scoped memory the facts go to.
        complete: asks the job's model (the action's, or the configured
            extraction model).
        lease_seconds: how long a claimed job is a worker's; a worker that
            dies holding it leaves it to be taken again after this, or as
            soon as :meth:`recover_orphans` finds its process gone.
        retry_seconds: a failed attempt is retried after this many seconds
            times the attempts so far.
    """

    def __init__(
        self,
        memory: ScopedMemory,
        complete: Complete,
        *,
        lease_seconds: float = 300.0,
        retry_seconds: float = 30.0,
        leases: Leases | None = None,
    ) -> None:
        self.memory = memory
        self.complete = complete
        self.lease_seconds = lease_seconds
        self.retry_seconds = retry_seconds
        # The process's lease: a claimed job names its owner, so another
        # process can tell the job was orphaned when its owner is gone.
        self.leases = leases

    @property
    def database(self) -> Any:
        """The database of the memory store."""
        return self.memory.database

    # ---------------------------------------------------------------- queue

    async def enqueue(
        self,
        tenant: str,
        messages: Sequence[Mapping[str, str]],
        *,
        user_id: str | None,
        agent: str | None,
        session_id: str | None,
        conversation_uuid: str | None = None,
        action_code: str | None = None,
        extraction_model: str | None = None,
        max_attempts: int = 3,
    ) -> int:
        """Write a pending job for one turn's messages; return its id."""
        async with self.database.sessions() as session, session.begin():
            job = MemoryJob(
                tenant=tenant,
                conversation_uuid=conversation_uuid,
                user_id=user_id,
                agent=agent,
                session_id=session_id,
                action_code=action_code,
                extraction_model=extraction_model,
                messages=[{"role": m["role"], "content": m["content"]} for m in messages],
                status="pending",
                attempts=0,
                max_attempts=max_attempts,
                outcome={},
            )
            session.add(job)
            await session.flush()
            return job.id

    async def jobs(self, tenant: str, *, status: str | None = None) -> list[dict[str, Any]]:
        """The tenant's jobs (their text left out), oldest first."""
        query = select(MemoryJob).where(MemoryJob.tenant == tenant)
        if status is not None:
            query = query.where(MemoryJob.status == status)
        async with self.database.sessions() as session:
            rows = (await session.scalars(query.order_by(MemoryJob.id))).all()
        return [
            {
                "id": row.id,
                "status": row.status,
                "attempts": row.attempts,
                "conversation_uuid": row.conversation_uuid,
                "error": row.error,
                "outcome": dict(row.outcome),
            }
            for row in rows
        ]

    async def claim(
        self, *, tenant: str | EveryTenant, now: datetime | None = None
    ) -> tuple[MemoryJob, int] | None:
        """Take the oldest runnable job of ``tenant``: pending, or running with its lease ended.

        Args:
            tenant: whose job; :data:`~pilothouse.memory.EVERY_TENANT` for
                the operator's worker, which runs every tenant's.
            now: the time leases are compared with (tests move it).

        Returns:
            The job and the attempt number that fences its completion, or None.
        """
        stamp = now or utcnow()
        runnable = or_(
            and_(
                MemoryJob.status == "pending",
                or_(MemoryJob.lease_until.is_(None), MemoryJob.lease_until < stamp),
            ),
            and_(MemoryJob.status == "running", MemoryJob.lease_until < stamp),
        )
        if isinstance(tenant, str):
            # A tenant's call claims its own jobs only: running another
            # tenant's job reads its turns and spends its model budget.
            runnable = and_(MemoryJob.tenant == tenant, runnable)
        claimed_by: dict[str, Any] = {}
        if self.leases is not None:
            await self.leases.register()
            claimed_by = {"owner": self.leases.owner}
        async with self.database.sessions() as session, session.begin():
            for candidate in (
                await session.scalars(
                    select(MemoryJob).where(runnable).order_by(MemoryJob.id).limit(5)
                )
            ).all():
                attempt = candidate.attempts + 1
                # Conditional on what was read: of two workers racing for one
                # job, exactly one update matches.
                taken = await session.execute(
                    update(MemoryJob)
                    .where(
                        MemoryJob.id == candidate.id,
                        MemoryJob.attempts == candidate.attempts,
                        runnable,
                    )
                    .values(
                        status="running",
                        attempts=attempt,
                        lease_until=stamp + timedelta(seconds=self.lease_seconds),
                        updated_at=stamp,
                        outcome=claimed_by,
                    )
                    .execution_options(synchronize_session=False)
                )
                if taken.rowcount:
                    await session.refresh(candidate)
                    return candidate, attempt
        return None

    async def recover_orphans(self) -> list[int]:
        """Put back to ``pending`` the running jobs whose process is gone (see :mod:`._orphans`)."""
        if self.leases is None:
            return []
        return await recover_orphaned_jobs(self.database, self.leases)

    async def run_pending(
        self, limit: int = 100, *, tenant: str | EveryTenant
    ) -> list[ExtractionOutcome]:
        """Run up to ``limit`` jobs of ``tenant`` now, one after another.

        Args:
            limit: the most jobs to run.
            tenant: whose jobs; :data:`~pilothouse.memory.EVERY_TENANT` for
                the operator's worker (the service's, ``pilothouse memory
                run-jobs``).
        """
        outcomes: list[ExtractionOutcome] = []
        while len(outcomes) < limit:
            claimed = await self.claim(tenant=tenant)
            if claimed is None:
                break
            outcomes.append(await self.run(*claimed))
        return outcomes

    # ------------------------------------------------------------------ run

    async def run(self, job: MemoryJob, attempt: int) -> ExtractionOutcome:
        """Run one claimed job; a failure leaves it to be retried, or ``failed`` at the end."""
        try:
            ops = await self._decide(job)
        except (ExtractionError, PilothouseError) as exc:
            return await self._fail(job, attempt, str(exc))
        events = await self._apply(job, attempt, ops)
        if events is None:
            logger.warning("memory job %s: lost its lease before finishing; not applied", job.id)
            return ExtractionOutcome(job.id, "pending", error="lease lost")
        return ExtractionOutcome(job.id, "done", tuple(events))

    async def _fail(self, job: MemoryJob, attempt: int, error: str) -> ExtractionOutcome:
        final = attempt >= job.max_attempts
        status = "failed" if final else "pending"
        log = logger.error if final else logger.warning
        log("memory job %s attempt %s of %s failed: %s", job.id, attempt, job.max_attempts, error)
        async with self.database.sessions() as session, session.begin():
            await session.execute(
                update(MemoryJob)
                .where(MemoryJob.id == job.id, MemoryJob.attempts == attempt)
                .values(
                    status=status,
                    error=error[:4000],
                    # A retry waits a little longer after each failed attempt.
                    lease_until=None
                    if final
                    else utcnow() + timedelta(seconds=self.retry_seconds * attempt),
                    updated_at=utcnow(),
                    finished_at=utcnow() if final else None,
                    outcome={},
                )
            )
        return ExtractionOutcome(job.id, status, error=error)

    def _transcript(self, job: MemoryJob) -> str:
        lines = [
            f"{m.get('role', 'user')}: {str(m.get('content', '')).strip()}"
            for m in job.messages
            if str(m.get("content", "")).strip()
        ]
        return "\n".join(lines)

    async def _ask(
        self,
        job: MemoryJob,
        system: str,
        user: str,
        shape: type[BaseModel],
        schema: Mapping[str, Any],
    ) -> Any:
        """Ask, parse, and once send a malformed answer back with its error."""
        prompt = user
        for round_ in (1, 2):
            answer = await self.complete(job, system, prompt, schema)
            try:
                return shape.model_validate(parse_json_object(answer))
            except (ValueError, ValidationError) as exc:
                problem = str(exc).splitlines()[0][:300]
                logger.warning(
                    "memory job %s: malformed model answer (round %s): %s; answer: %.300r",
                    job.id,
                    round_,
                    problem,
                    answer,
                )
                if round_ == 2:
                    raise ExtractionError(
                        f"the model's answer is not the JSON asked for ({problem})"
                    ) from exc
                prompt = (
                    f"{user}\n\nYour previous answer could not be used: {problem}. "
                    "Answer again with ONLY the JSON object."
                )
        raise ExtractionError("unreachable")  # pragma: no cover - the loop returns or raises

    def _scope_of(self, job: MemoryJob, fact: _Fact) -> MemoryScope | None:
        if fact.scope == "agent":
            return MemoryScope("agent", agent=job.agent) if job.agent else None
        return MemoryScope("user", user_id=job.user_id) if job.user_id else None

    async def _decide(self, job: MemoryJob) -> list[_Op]:
        transcript = self._transcript(job)
        if not transcript:
            return []
        facts: _Facts = await self._ask(
            job, FACTS_PROMPT, f"Conversation:\n{transcript}", _Facts, FACTS_SCHEMA
        )
        ops: list[_Op] = []
        seen: set[tuple[str, str]] = set()
        changed: set[str | None] = set()
        user_said = " ".join(
            str(m.get("content", "")) for m in job.messages if m.get("role") == "user"
        )
        for fact in facts.facts:
            scope = self._scope_of(job, fact)
            text = fact.text.strip()
            if scope is None or not text:
                continue
            why = rejected(text, scope.scope, user_said)
            if why is not None:
                logger.info("memory job %s: fact %r not stored: %s", job.id, text[:200], why)
                continue
            key = (scope.scope, content_hash(text))
            if key in seen:
                continue
            seen.add(key)
            allowed = MEMORY_TYPES[scope.scope]
            kind = fact.type if fact.type in allowed else allowed[0]
            similar = [
                hit
                for hit in await self.memory.similar(job.tenant, scope, text, limit=5)
                if hit.similarity >= RELATED
            ]
            for decided in await self._decide_one(
                job,
                scope,
                text,
                kind,
                fact.importance,
                similar,
                changing=bool(_CHANGE.search(user_said)),
            ):
                if decided.event in ("UPDATE", "DELETE") and decided.target in changed:
                    # One turn changes a record once: the first fact about it
                    # wins, a later one (often its negation) would overwrite it.
                    logger.info(
                        "memory job %s: fact %r not applied: memory %s was changed by this turn",
                        job.id,
                        text[:200],
                        decided.target,
                    )
                    continue
                if decided.event in ("UPDATE", "DELETE"):
                    changed.add(decided.target)
                ops.append(decided)
        return ops

    async def _decide_one(
        self,
        job: MemoryJob,
        scope: MemoryScope,
        text: str,
        kind: str,
        importance: float,
        similar: list[MemoryHit],
        *,
        changing: bool = False,
    ) -> list[_Op]:
        def op(event: str, target: str | None = None, new_text: str | None = None) -> _Op:
            return _Op(event, scope, new_text or text, kind, importance, target)

        if not similar:
            return [op("ADD")]
        if similar[0].similarity >= SAME_TEXT or any(
            content_hash(hit.item.content) == content_hash(text) for hit in similar
        ):
            return [op("NOOP", similar[0].item.id)]
        listing = "\n".join(f"{n}: {hit.item.content}" for n, hit in enumerate(similar))
        decision: _Decision = await self._ask(
            job, DECIDE_PROMPT, f"EXISTING:\n{listing}\n\nNEW: {text}", _Decision, DECISION_SCHEMA
        )
        if decision.event == "ADD":
            if similar[0].similarity >= NEAR_DUPLICATE:
                # A near-duplicate is the same fact with a new value: the newer wins.
                return [op("UPDATE", similar[0].item.id)]
            if changing:
                # The user said a value changed, and a memory says the same
                # with another value: that memory is stale.
                for hit in similar:
                    if replaces(hit.item.content, text):
                        return [op("UPDATE", hit.item.id)]
            return [op("ADD")]
        if decision.id is None or not (0 <= decision.id < len(similar)):
            if decision.event == "NOOP":
                return [op("NOOP")]
            raise ExtractionError(
                f"the model answered {decision.event} for memory {decision.id}, which it was not "
                f"shown (0 to {len(similar) - 1})"
            )
        target = similar[decision.id].item.id
        if decision.event == "NOOP":
            return [op("NOOP", target)]
        if decision.event == "UPDATE":
            return [op("UPDATE", target, (decision.text or text).strip())]
        return [op("DELETE", target), op("ADD")]

    async def _apply(
        self, job: MemoryJob, attempt: int, ops: list[_Op]
    ) -> list[dict[str, Any]] | None:
        """Apply every decision and finish the job in one transaction (None: lease lost)."""
        texts = [o.text for o in ops if o.event in ("ADD", "UPDATE")]
        vectors = iter(await self.memory.embed(texts, "document")) if texts else iter(())
        for o in ops:
            if o.event in ("ADD", "UPDATE"):
                o.vector = next(vectors)
        now = utcnow()
        model = self.memory.embedder.info.name
        events: list[dict[str, Any]] = []
        counts = {"ADD": 0, "UPDATE": 0, "DELETE": 0, "NOOP": 0}
        async with self.database.sessions() as session, session.begin():
            fence = await session.execute(
                update(MemoryJob)
                .where(
                    MemoryJob.id == job.id,
                    MemoryJob.attempts == attempt,
                    MemoryJob.status == "running",
                )
                .values(
                    status="done", updated_at=now, finished_at=now, error=None, lease_until=None
                )
            )
            if not fence.rowcount:
                # Another worker took the job after this one's lease ended:
                # the update matched nothing, so committing changes nothing.
                return None
            for o in ops:
                target = o.target
                if o.event == "ADD":
                    target = await self._add(session, job, o, model, now)
                elif o.event == "UPDATE" and target is not None:
                    await self._update(session, job, o, target, model, now)
                elif o.event == "DELETE" and target is not None:
                    doomed = and_(
                        scope_filter(job.tenant, o.scope, reading=False),
                        MemoryRecord.uuid == target,
                    )
                    await drop_versions(session, doomed)
                    await session.execute(delete(MemoryRecord).where(doomed))
                counts[o.event] += 1
                events.append(
                    {"event": o.event, "memory_id": target, "scope": o.scope.scope, "text": o.text}
                )
            await session.execute(
                update(MemoryJob).where(MemoryJob.id == job.id).values(outcome=counts)
            )
        logger.info("memory job %s done: %s", job.id, counts)
        return events

    async def _update(
        self, session: Any, job: MemoryJob, o: _Op, target: str, model: str, now: datetime
    ) -> None:
        """Replace a record's value, keeping the old one as a version.

        The new value is derived from this job's conversation and user: the
        record's provenance becomes theirs (the version keeps the old one).
        """
        row: MemoryRecord | None = await session.scalar(
            select(MemoryRecord).where(
                scope_filter(job.tenant, o.scope, reading=False), MemoryRecord.uuid == target
            )
        )
        if row is None:
            # Shown to the model from this scope moments ago; gone only if
            # deleted since (another job, a caller): nothing left to update.
            logger.warning("memory job %s: memory %s to update is gone", job.id, target)
            return
        await keep_version(session, row, "extraction", now)
        row.content = o.text
        row.content_hash = content_hash(o.text)
        row.embedding = np.asarray(o.vector, dtype="<f4").tobytes()
        row.model = model
        row.importance = o.importance
        row.updated_at = now
        row.source_conversation = job.conversation_uuid or job.session_id
        row.source_user = job.user_id

    async def _add(self, session: Any, job: MemoryJob, o: _Op, model: str, now: datetime) -> str:
        digest = content_hash(o.text)
        found = await session.scalar(
            select(MemoryRecord.uuid).where(
                scope_filter(job.tenant, o.scope, reading=False),
                MemoryRecord.agent.is_(None)
                if o.scope.agent is None
                else MemoryRecord.agent == o.scope.agent,
                MemoryRecord.content_hash == digest,
            )
        )
        if found is not None:
            return str(found)
        uuid = str(uuid_module.uuid4())
        session.add(
            MemoryRecord(
                uuid=uuid,
                tenant=job.tenant,
                scope=o.scope.scope,
                user_id=o.scope.user_id,
                agent=o.scope.agent,
                session_id=None,
                content=o.text,
                content_hash=digest,
                memory_type=o.memory_type,
                importance=o.importance,
                meta={"source": "extraction", "conversation": job.conversation_uuid, "job": job.id},
                embedding=np.asarray(o.vector, dtype="<f4").tobytes(),
                model=model,
                access_count=0,
                created_at=now,
                updated_at=now,
                source_conversation=job.conversation_uuid or job.session_id,
                source_user=job.user_id,
            )
        )
        return uuid
