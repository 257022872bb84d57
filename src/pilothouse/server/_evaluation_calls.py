"""The evaluation operations behind both REST's ``/v1/evaluation`` and its JSON-RPC methods.

The two faces parse their own wire format (REST's snake_case bodies,
JSON-RPC's strict camelCase params) into models of their own; both models
have the attributes below, and the call into :mod:`pilothouse.api` is made
here once, so the faces cannot drift apart.
"""

from __future__ import annotations

__all__ = ["create_dataset", "evaluate", "replay"]

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Protocol

from pilothouse.errors import InvalidFieldError
from pilothouse.types import DatasetInfo, ProcessStatus, ReplayRun

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse


class DatasetRequest(Protocol):
    """A dataset to create: empty, from recorded conversations (filters), or from cases."""

    @property
    def name(self) -> str: ...
    @property
    def description(self) -> str: ...
    @property
    def from_conversations(self) -> bool: ...
    @property
    def action(self) -> str | None: ...
    @property
    def agent(self) -> str | None: ...
    @property
    def status(self) -> ProcessStatus | None: ...
    @property
    def since(self) -> datetime | None: ...
    @property
    def until(self) -> datetime | None: ...
    @property
    def uuids(self) -> list[str] | None: ...
    @property
    def tag(self) -> str | None: ...
    @property
    def sample(self) -> int | None: ...
    @property
    def seed(self) -> int | None: ...
    @property
    def cases(self) -> list[dict[str, Any]] | None: ...


class ReplayRequest(Protocol):
    """A replay of a dataset against a changed target."""

    @property
    def dataset(self) -> str: ...
    @property
    def run(self) -> str | None: ...
    @property
    def model(self) -> str | None: ...
    @property
    def configuration(self) -> str | None: ...
    @property
    def settings(self) -> dict[str, Any] | None: ...
    @property
    def live_tools(self) -> list[str]: ...
    @property
    def concurrency(self) -> int: ...
    @property
    def count_budgets(self) -> bool: ...


class EvaluateRequest(Protocol):
    """How to score a run."""

    @property
    def against(self) -> str | None: ...
    @property
    def scorers(self) -> list[str]: ...
    @property
    def thresholds(self) -> dict[str, float] | None: ...
    @property
    def margin(self) -> float | None: ...
    @property
    def schema_(self) -> dict[str, Any] | None: ...
    @property
    def rubric(self) -> str | None: ...
    @property
    def concurrency(self) -> int: ...


async def create_dataset(ph: Pilothouse, body: DatasetRequest, *, flag: str) -> DatasetInfo:
    """Create the dataset ``body`` describes.

    Args:
        ph: the caller's tenant facade.
        body: the parsed request.
        flag: how the face spells ``from_conversations``, for the error.

    Raises:
        InvalidFieldError: both cases and the conversations flag were given.
    """
    if body.cases is not None:
        if body.from_conversations:
            raise InvalidFieldError("cases", f"give cases or {flag}, not both")
        return await ph.evaluation.import_dataset(
            body.name, body.cases, description=body.description
        )
    return await ph.evaluation.create_dataset(
        body.name,
        description=body.description,
        from_conversations=body.from_conversations,
        action=body.action,
        agent=body.agent,
        status=body.status,
        since=_utc(body.since),
        until=_utc(body.until),
        uuids=body.uuids,
        tag=body.tag,
        sample=body.sample,
        seed=body.seed,
    )


def _utc(moment: datetime | None) -> datetime | None:
    # A time without zone (or a bare day) is read as UTC, as /v1/conversations
    # reads from/to: every stored time is UTC, and the store refuses naive ones.
    if moment is None or moment.tzinfo is not None:
        return moment
    return moment.replace(tzinfo=UTC)


async def replay(ph: Pilothouse, body: ReplayRequest) -> ReplayRun:
    """Replay the dataset; return the run with its results (each face encodes it)."""
    return await ph.evaluation.replay(
        body.dataset,
        run=body.run,
        model=body.model,
        configuration=body.configuration,
        settings=body.settings,
        live_tools=body.live_tools,
        concurrency=body.concurrency,
        count_budgets=body.count_budgets,
    )


async def evaluate(ph: Pilothouse, run: str, body: EvaluateRequest) -> dict[str, Any]:
    """Score ``run``; return the report as JSON."""
    report = await ph.evaluation.evaluate(
        run,
        against=body.against,
        scorers=body.scorers,
        thresholds=body.thresholds,
        margin=body.margin,
        schema=body.schema_,
        rubric=body.rubric,
        concurrency=body.concurrency,
    )
    return report.as_json()
