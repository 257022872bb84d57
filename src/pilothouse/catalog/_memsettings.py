"""The settings of a ``SCOPED`` memory strategy, checked when the catalog is written.

The strategy's ``settings`` mapping is free-form in the database but read
through this model everywhere (validation, compile, the advisor), so what
validation accepted is exactly what a turn honours, and a misspelt key
(``user_limt``) is refused rather than silently leaving the default.
Defaults follow light-genai-4j's memory design: per-turn limits 10 / 5 / 3 / 5
(session, user, agent, organization) and session memory of 60 minutes, at
most 100 records (``short-term: ttl-minutes: 60, max-memories: 100``), and
long-term memory of importance 0.5 or more, at most 10 per turn
(``long-term: min-importance: 0.5, max-results: 10``).
"""

from __future__ import annotations

__all__ = ["ScopedMemorySettings"]

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from pilothouse.catalog._lengths import SHORT_CODE

_CODE = r"^[A-Za-z0-9_.-]+$"
"""A catalog code (``_spec.CODE_PATTERN``, not imported: a turn must not load the YAML tooling)."""


class ScopedMemorySettings(BaseModel):
    """What a turn of a ``SCOPED`` strategy retrieves and remembers.

    Attributes:
        session_limit: memories retrieved from the session per turn (seed: 10).
        user_limit: from the user's memory (seed: 5).
        agent_limit: from the agent's memory (seed: 3).
        organization_limit: from the organization's memory (seed: 5).
        memory_token_budget: the most tokens the retrieved memories may add to
            the system prompt; the lowest ranked are left out first.
        threshold: the least cosine similarity a memory needs to be used
            (0.1, chosen from the memory benchmark's long-term recall: a
            question in other words than a stored fact is often only about
            0.1 to 0.2 similar to it on the packaged MiniLM).
        min_importance: the least importance a user, agent or organization
            memory needs to be retrieved (seed: ``long-term: min-importance:
            0.5``); session memory is not filtered by it.
        max_results: the most long-term memories (user, agent and
            organization together, after ranking) one turn gets (seed:
            ``long-term: max-results: 10``); the per-scope limits (5 + 3 + 5)
            add up to more. Session memory is not counted: it has
            ``session_limit``.
        organization_collections: document collections (catalog codes) whose
            chunks are organization memory (seed 002: "organizational memory
            (shared knowledge, chunked documents)"): each turn searches them
            with the user's message, and their chunks compete with the
            organization's records for ``organization_limit``. Resolved in
            the turn's tenant only.
        session_ttl_minutes: how long a session memory lives (seed: 60).
        session_max: the most records one session keeps (seed: 100).
        store_responses: store each answered turn in session memory.
        extract: after each answered turn, queue a durable job that extracts
            facts into user and agent memory.
        extraction_model: a catalog model's code for extraction; the action's
            own model when None.
    """

    # defer_build: the validator is built on first use, not at import (a
    # process that never reads a scoped strategy never pays for it).
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)

    session_limit: Annotated[int, Field(ge=0, le=100)] = 10
    user_limit: Annotated[int, Field(ge=0, le=100)] = 5
    agent_limit: Annotated[int, Field(ge=0, le=100)] = 3
    organization_limit: Annotated[int, Field(ge=0, le=100)] = 5
    memory_token_budget: Annotated[int, Field(ge=1)] = 1000
    threshold: Annotated[float, Field(ge=-1.0, le=1.0)] = 0.1
    min_importance: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    max_results: Annotated[int, Field(ge=0, le=300)] = 10
    organization_collections: tuple[
        Annotated[str, Field(min_length=1, max_length=SHORT_CODE, pattern=_CODE)], ...
    ] = ()
    session_ttl_minutes: Annotated[int, Field(ge=1, le=60 * 24 * 30)] = 60
    session_max: Annotated[int, Field(ge=1, le=10_000)] = 100
    store_responses: bool = True
    extract: bool = True
    extraction_model: Annotated[str, Field(min_length=1, max_length=12)] | None = None
