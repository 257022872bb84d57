"""The JSON-RPC methods of evaluation: datasets, replays and reports (admin keys only).

The same operations as REST's ``/v1/evaluation`` (``docs/evaluation.md``),
named ``pilothouse/evaluation/<action>/v1``, in the key's tenant. Building a
dataset reads every conversation of the tenant and a replay or a judge
spends model calls: like the REST routes, they need a key with the admin
scope.
"""

from __future__ import annotations

__all__ = ["EVALUATION_METHODS"]

from collections.abc import Mapping
from dataclasses import asdict
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any

from pydantic import Field, StrictBool, StrictInt
from pydantic_core import to_jsonable_python

from pilothouse.server import _evaluation_calls as calls
from pilothouse.server._jsonrpc_params import Handler, Method, NoParams, Params, method_name
from pilothouse.types import ProcessStatus

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse

_Name = Annotated[str, Field(min_length=1, max_length=128)]


class ByDataset(Params):
    """One dataset by name."""

    name: _Name


class ByRun(Params):
    """One replay run by name."""

    run: _Name


class CreateDataset(Params):
    """``createDataset``: empty, from recorded conversations (filters), or from cases."""

    name: _Name
    description: str = ""
    from_conversations: StrictBool = False
    action: str | None = None
    agent: str | None = None
    status: ProcessStatus | None = ProcessStatus.COMPLETED
    since: datetime | None = None
    until: datetime | None = None
    uuids: list[str] | None = None
    tag: str | None = None
    sample: StrictInt | None = None
    seed: StrictInt | None = None
    cases: list[dict[str, Any]] | None = None


class Replay(Params):
    """``replay``: a dataset run again against a changed target."""

    dataset: _Name
    run: _Name | None = None
    model: str | None = None
    configuration: str | None = None
    settings: dict[str, Any] | None = None
    live_tools: list[str] = Field(default_factory=lambda: list[str]())
    concurrency: Annotated[StrictInt, Field(ge=1, le=32)] = 1
    count_budgets: StrictBool = False


class Report(Params):
    """``report``: score a run against a baseline run or the recording."""

    run: _Name
    against: str | None = None
    scorers: list[str] = Field(default_factory=lambda: ["exact"])
    thresholds: dict[str, float] | None = None
    margin: float | None = None
    schema_: Annotated[dict[str, Any] | None, Field(alias="schema")] = None
    rubric: str | None = None
    concurrency: Annotated[StrictInt, Field(ge=1, le=16)] = 4


async def _create(ph: Pilothouse, p: CreateDataset) -> Any:
    return await calls.create_dataset(ph, p, flag="fromConversations")


async def _delete(ph: Pilothouse, p: ByDataset) -> Any:
    await ph.evaluation.delete_dataset(p.name)
    return {"deleted": p.name}


async def _replay(ph: Pilothouse, p: Replay) -> Any:
    return to_jsonable_python(asdict(await calls.replay(ph, p)))


async def _get_run(ph: Pilothouse, p: ByRun) -> Any:
    return to_jsonable_python(asdict(await ph.evaluation.get_run(p.run)))


async def _list_runs(ph: Pilothouse, p: NoParams) -> Any:
    del p
    return [to_jsonable_python(asdict(r)) for r in await ph.evaluation.list_runs()]


async def _report(ph: Pilothouse, p: Report) -> Any:
    return await calls.evaluate(ph, p.run, p)


def _admin(params: type[Params], call: Handler, summary: str) -> Method:
    return Method(params, call, summary, admin=True)


EVALUATION_METHODS: Mapping[str, Method] = {
    method_name("evaluation", "listDatasets"): _admin(
        NoParams, lambda ph, _: ph.evaluation.list_datasets(), "the tenant's datasets"
    ),
    method_name("evaluation", "createDataset"): _admin(
        CreateDataset,
        _create,
        "create a dataset: empty, from recorded conversations (filters) or from cases",
    ),
    method_name("evaluation", "getDatasetCases"): _admin(
        ByDataset,
        lambda ph, p: ph.evaluation.export_dataset(p.name),
        "a dataset's cases, each as one JSONL export line",
    ),
    method_name("evaluation", "deleteDataset"): _admin(
        ByDataset, _delete, "delete a dataset and its cases"
    ),
    method_name("evaluation", "replay"): _admin(
        Replay,
        _replay,
        "replay a dataset against a changed target (an unfinished run of that name resumes)",
    ),
    method_name("evaluation", "getRun"): _admin(ByRun, _get_run, "a replay run and its results"),
    method_name("evaluation", "listRuns"): _admin(
        NoParams, _list_runs, "the tenant's replay runs, newest first, without results"
    ),
    method_name("evaluation", "report"): _admin(
        Report,
        _report,
        "score a run against a baseline run or the recording: pass rates, per-case diffs",
    ),
}
"""The evaluation methods, by name."""
