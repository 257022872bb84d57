"""Evaluation datasets, replays and reports under ``/v1/evaluation`` (the key's tenant).

A dataset is built from the tenant's recorded conversations or from cases
in the body; a replay runs it again against another model, configuration
or options with tool calls answered from the recording; a report scores a
run against a baseline run or the recording. Building datasets reads every
conversation of the tenant and replays spend model calls: admin keys only.
"""

from __future__ import annotations

__all__ = ["router"]

from dataclasses import asdict
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Response
from fastapi.encoders import jsonable_encoder
from pydantic import BaseModel, ConfigDict, Field

from pilothouse.server import _evaluation_calls as calls
from pilothouse.server._deps import AdminFacade, CheckedJsonRoute
from pilothouse.server._problems import PROBLEM_RESPONSES
from pilothouse.types import DatasetInfo, ProcessStatus

router = APIRouter(
    prefix="/v1/evaluation",
    tags=["evaluation"],
    responses=PROBLEM_RESPONSES,
    route_class=CheckedJsonRoute,
)


class DatasetBody(BaseModel):
    """A dataset to create: empty, from recorded conversations, or from cases."""

    model_config = ConfigDict(extra="forbid")

    name: Annotated[str, Field(min_length=1, max_length=128)]
    description: str = ""
    from_conversations: bool = False
    action: str | None = None
    agent: str | None = None
    status: ProcessStatus | None = ProcessStatus.COMPLETED
    since: datetime | None = None
    until: datetime | None = None
    uuids: list[str] | None = None
    tag: str | None = None
    sample: int | None = None
    seed: int | None = None
    cases: list[dict[str, Any]] | None = None


class ReplayBody(BaseModel):
    """A replay of a dataset against a changed target."""

    model_config = ConfigDict(extra="forbid")

    dataset: str
    run: str | None = None
    model: str | None = None
    configuration: str | None = None
    settings: dict[str, Any] | None = None
    live_tools: list[str] = []
    concurrency: Annotated[int, Field(ge=1, le=32)] = 1
    count_budgets: bool = False


class EvaluateBody(BaseModel):
    """How to score a run."""

    model_config = ConfigDict(extra="forbid")

    against: str | None = None
    scorers: list[str] = ["exact"]
    thresholds: dict[str, float] | None = None
    margin: float | None = None
    schema_: Annotated[dict[str, Any] | None, Field(alias="schema")] = None
    rubric: str | None = None
    concurrency: Annotated[int, Field(ge=1, le=16)] = 4


@router.get("/datasets", summary="The tenant's datasets")
async def list_datasets(ph: AdminFacade) -> list[DatasetInfo]:
    """Return every dataset with its case count."""
    return await ph.evaluation.list_datasets()


@router.post("/datasets", status_code=201, summary="Create a dataset")
async def create_dataset(ph: AdminFacade, body: DatasetBody) -> DatasetInfo:
    """Create a dataset from recorded conversations (filters) or from the given cases."""
    return await calls.create_dataset(ph, body, flag="from_conversations")


@router.get("/datasets/{name}/cases", summary="A dataset's cases (the JSONL export's lines)")
async def dataset_cases(ph: AdminFacade, name: str) -> list[dict[str, Any]]:
    """Return the cases in order, each as one export line."""
    return await ph.evaluation.export_dataset(name)


@router.delete("/datasets/{name}", status_code=204, summary="Delete a dataset")
async def delete_dataset(ph: AdminFacade, name: str) -> Response:
    """Delete a dataset and its cases."""
    await ph.evaluation.delete_dataset(name)
    return Response(status_code=204)


@router.post("/replays", summary="Replay a dataset (resumes an unfinished run of that name)")
async def replay(ph: AdminFacade, body: ReplayBody) -> dict[str, Any]:
    """Run the dataset's cases again and return the run with its results."""
    return jsonable_encoder(asdict(await calls.replay(ph, body)))


@router.get("/replays/{run}", summary="A replay run and its results")
async def get_run(ph: AdminFacade, run: str) -> dict[str, Any]:
    """Return the run with one result per finished case."""
    return jsonable_encoder(asdict(await ph.evaluation.get_run(run)))


@router.post("/replays/{run}/report", summary="Score a run against a baseline or the recording")
async def report(ph: AdminFacade, run: str, body: EvaluateBody) -> dict[str, Any]:
    """Return pass rates, per-case diffs and the failed checks (``passed`` false when any)."""
    return await calls.evaluate(ph, run, body)
