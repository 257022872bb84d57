"""The memory advisor of a ``SCOPED`` action: retrieve before the call, remember after.

Before the model call (:func:`recall`): the user's message is matched against
the session, user, agent and organization scopes of the turn (at most
``session_limit`` / ``user_limit`` / ``agent_limit`` / ``organization_limit``
memories each, 10 / 5 / 3 / 5 by default as in light-genai-4j's design),
ranked together by similarity, importance and recency, cut to the
strategy's ``memory_token_budget``, and put after the system prompt under
``Relevant memories:``. A ``memory`` timeline event names every memory used
(id, scope, similarity, score), so the audit shows what the model was told.

After an answered turn (:func:`remember`): the exchange is stored in session
memory (it expires after ``session_ttl_minutes``), and, with ``extract``, a
durable extraction job is written; the worker runs it off the hot path.

An action whose strategy is not ``SCOPED`` never reaches this module: the
turn checks one attribute and goes on.
"""

from __future__ import annotations

__all__ = ["MemoryTurn", "ModelCompletion", "recall", "remember"]

import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError

from pilothouse.catalog._enums import ProcessStatus, ProviderKind, TimelineKind
from pilothouse.errors import NotFoundError, PilothouseError
from pilothouse.memory._orgknowledge import merge_organization, organization_chunks
from pilothouse.memory._store import ScopedMemory, SessionLimits, cap_long_term
from pilothouse.memory._types import MemoryHit, MemoryScope
from pilothouse.store import NewEvent
from pilothouse.store._base import utcnow

if TYPE_CHECKING:
    from pilothouse.catalog._memsettings import ScopedMemorySettings
    from pilothouse.memory import TokenCounter
    from pilothouse.memory._extract import MemoryExtractor
    from pilothouse.memory._tables import MemoryJob
    from pilothouse.runtime._events import TurnResult
    from pilothouse.runtime._shared import Runtime
    from pilothouse.runtime._turn import Turn

logger = logging.getLogger(__name__)

_JSON_MODE = (
    ProviderKind.OPENAI,
    ProviderKind.OPENAI_COMPATIBLE,
    ProviderKind.AZURE,
    ProviderKind.OLLAMA,
)
"""Providers whose chat API takes ``response_format: json_object``."""

HEADER = "Relevant memories (from earlier conversations; may be outdated):"


@dataclass(frozen=True)
class MemoryTurn:
    """Whose memory one turn reads and writes."""

    settings: ScopedMemorySettings
    tenant: str
    user_id: str | None
    agent: str
    session_id: str

    def scopes(self) -> dict[MemoryScope, int]:
        """Each scope of the turn with its limit (scopes without a key are left out)."""
        s = self.settings
        out = {
            MemoryScope(
                "session", session_id=self.session_id, user_id=self.user_id
            ): s.session_limit,
            MemoryScope("agent", agent=self.agent): s.agent_limit,
            MemoryScope("organization"): s.organization_limit,
        }
        if self.user_id is not None:
            out[MemoryScope("user", user_id=self.user_id, agent=self.agent)] = s.user_limit
        return out


def memory_turn(turn: Turn) -> MemoryTurn | None:
    """The turn's memory keys, or None when its action does not use scoped memory."""
    settings = turn.compiled.memory.scoped
    if settings is None:
        return None
    handle = turn.handle
    return MemoryTurn(
        settings=settings,
        tenant=handle.tenant,
        user_id=turn.config.user_id,
        agent=handle.agent_code or handle.action_code,
        session_id=handle.uuid,
    )


def scoped_memory(runtime: Runtime, settings: ScopedMemorySettings) -> ScopedMemory:
    """The process's scoped memory with this strategy's session limits."""
    base = runtime.scoped_memory
    limits = SessionLimits(settings.session_ttl_minutes, settings.session_max)
    if base.session_limits == limits:
        return base
    # Same database, embedder and index; only the session limits differ.
    return base.with_session_limits(limits)


async def recall(
    runtime: Runtime, turn: Turn, text: str, system_prompt: str, counter: TokenCounter
) -> str:
    """Return the system prompt with the memories relevant to ``text``; record them.

    A fresh turn and a turn resumed after a human answer or a tool result
    both come here (the resumed one with its user's last message), so each
    model call of a SCOPED action is told its memories and the timeline
    says which.

    Raises:
        NotFoundError: an ``organization_collections`` code that is not an
            active collection of the tenant (the turn fails with it).
        KnowledgeError: such a collection cannot be searched.
    """
    keys = memory_turn(turn)
    if keys is None or not text.strip():
        return system_prompt
    settings = keys.settings
    memory = runtime.scoped_memory
    # Linked on the first turn, not only after an answer: a turn that pauses
    # for a human answer resumes with this session's user, and erasure finds it.
    await memory.link_session(keys.tenant, keys.session_id, keys.user_id, keys.agent)
    hits = await memory.search(
        keys.tenant,
        text,
        keys.scopes(),
        threshold=settings.threshold,
        min_importance=settings.min_importance,
    )
    if settings.organization_collections and settings.organization_limit > 0:
        chunks = await organization_chunks(
            runtime.knowledge(),
            keys.tenant,
            settings.organization_collections,
            text,
            limit=settings.organization_limit,
            threshold=settings.threshold,
            weights=memory.weights,
            now=utcnow(),
        )
        hits = merge_organization(hits, chunks, settings.organization_limit)
    candidates = len(hits)
    hits = cap_long_term(hits, settings.max_results)
    used = budgeted(hits, settings.memory_token_budget, counter)
    index = await memory.vector_index()
    turn.pending.append(
        NewEvent(
            TimelineKind.MEMORY,
            {
                "user_id": keys.user_id is not None,
                "candidates": candidates,
                "max_results": settings.max_results,
                "index": index.kind,
                "resumed": turn.resumed,
                "used": [
                    {
                        "id": hit.item.id,
                        "scope": hit.item.scope.scope,
                        **(
                            {"collection": hit.item.metadata.get("collection")}
                            if hit.item.memory_type == "document_chunk"
                            else {}
                        ),
                        "similarity": round(hit.similarity, 4),
                        "score": round(hit.score, 4),
                    }
                    for hit in used
                ],
                "budget": settings.memory_token_budget,
            },
        )
    )
    if not used:
        return system_prompt
    lines = "\n".join(f"- [{hit.item.scope.scope}] {hit.item.content}" for hit in used)
    return f"{system_prompt}\n\n{HEADER}\n{lines}" if system_prompt else f"{HEADER}\n{lines}"


async def resumed_user(runtime: Runtime, turn: Turn) -> None:
    """Give a resumed turn the user its session served (a resume has no runtime config)."""
    keys = memory_turn(turn)
    if keys is None or turn.config.user_id is not None:
        return
    linked, user_id = await runtime.scoped_memory.session_user(keys.tenant, keys.session_id)
    if linked and user_id is not None:
        turn.config = replace(turn.config, user_id=user_id)


def budgeted(hits: list[MemoryHit], budget: int, counter: TokenCounter) -> list[MemoryHit]:
    """The best-ranked hits whose lines fit in ``budget`` tokens (a line too long is skipped)."""
    used: list[MemoryHit] = []
    spent = counter.count(HEADER)
    for hit in hits:
        cost = counter.count(hit.item.content) + 4
        if spent + cost > budget:
            continue
        used.append(hit)
        spent += cost
    return used


async def remember(
    runtime: Runtime, turn: Turn, text: str, result: TurnResult, extractor: MemoryExtractor
) -> None:
    """Store an answered turn in session memory and queue its extraction.

    A failure here is logged and the turn's result stands: the answer was
    recorded already, and memory is a help to later turns, not part of this one.
    """
    keys = memory_turn(turn)
    if keys is None or result.status is not ProcessStatus.COMPLETED or not result.text.strip():
        return
    settings = keys.settings
    try:
        memory = scoped_memory(runtime, settings)
        # Linked whatever else is kept: erasing the user finds the conversation here.
        await memory.link_session(keys.tenant, keys.session_id, keys.user_id, keys.agent)
        if settings.store_responses:
            exchange = f"User: {text.strip()}\nAssistant: {result.text.strip()}"
            await memory.add(
                keys.tenant,
                MemoryScope("session", session_id=keys.session_id, user_id=keys.user_id),
                exchange[:8000],
                memory_type="turn",
                importance=0.5,
                metadata={"conversation": keys.session_id},
                source_conversation=keys.session_id,
                source_user=keys.user_id,
            )
        if settings.extract and (keys.user_id is not None or keys.agent):
            await extractor.enqueue(
                keys.tenant,
                [{"role": "user", "content": text}, {"role": "assistant", "content": result.text}],
                user_id=keys.user_id,
                agent=keys.agent,
                session_id=keys.session_id,
                conversation_uuid=keys.session_id,
                action_code=turn.handle.action_code,
                extraction_model=settings.extraction_model,
            )
    except (PilothouseError, SQLAlchemyError, OSError) as exc:
        logger.error("conversation %s: the turn's memory was not stored: %s", keys.session_id, exc)


class ModelCompletion:
    """Asks a job's model for extraction: the configured extraction model, or the action's.

    Args:
        runtime: the run loop's shared parts (model factory, compiler, override).
    """

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    async def __call__(
        self, job: MemoryJob, system: str, user: str, schema: Mapping[str, Any]
    ) -> str:
        """Send one system and user prompt; return the answer's text."""
        from pydantic_ai.direct import model_request
        from pydantic_ai.messages import ModelRequest, SystemPromptPart, TextPart, UserPromptPart

        from pilothouse.catalog._models import Model
        from pilothouse.providers._options import to_model_settings

        runtime = self.runtime
        if job.extraction_model is not None:
            async with runtime.database.sessions() as session:
                row = await session.scalar(
                    select(Model).where(
                        Model.tenant == job.tenant, Model.code == job.extraction_model
                    )
                )
            if row is None:
                raise NotFoundError(
                    f"extraction model '{job.extraction_model}' is not in the catalog: correct "
                    "the memory strategy's settings.extraction_model"
                )
            spec = runtime.compiler.model_spec(row)
            from pilothouse.providers import ModelOptions

            options = ModelOptions(max_tokens=1024, temperature=0.0)
        else:
            if job.action_code is None:
                raise NotFoundError("the job names no action and no extraction model")
            agent = job.agent if job.agent != job.action_code else None
            compiled = await runtime.compiler.compile(job.tenant, job.action_code, agent)
            spec = compiled.model
            options = compiled.options
        model: Any = runtime.loop.model_override or await runtime.models.model(spec, options)
        settings: dict[str, Any] = dict(to_model_settings(spec, options))
        kind = spec.provider.kind
        if kind is ProviderKind.LOCAL:
            # llama.cpp turns a json_object format with a schema into a
            # grammar: even a 0.5B model can then only answer the JSON asked for.
            extra = dict(settings.get("extra_body") or {})
            extra["response_format"] = {"type": "json_object", "schema": dict(schema)}
            settings["extra_body"] = extra
        elif kind in _JSON_MODE:
            extra = dict(settings.get("extra_body") or {})
            extra["response_format"] = {"type": "json_object"}
            settings["extra_body"] = extra
        response = await model_request(
            model,
            [ModelRequest(parts=[SystemPromptPart(system), UserPromptPart(user)])],
            model_settings=cast("Any", settings),
        )
        return "".join(part.content for part in response.parts if isinstance(part, TextPart))
