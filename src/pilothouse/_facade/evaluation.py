"""The evaluation half of the facade: datasets of recorded cases, and their replays.

A dataset is built from the tenant's recorded conversations (filtered by
action, agent, status, dates, tag, uuids, a sample size) or written by hand,
and moves between deployments as JSONL, one case per line. A replay runs
every case again through the normal run loop against a changed target
(model, configuration, option settings), answering tool calls from the
recorded results (``runtime/_replaytape.py``); its conversations are
recorded with face ``replay``.
"""

from __future__ import annotations

__all__ = ["EvaluationApi"]

import time
from collections.abc import AsyncGenerator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING, Any

import anyio

from pilothouse._caller import Caller
from pilothouse._facade.facet import Facet
from pilothouse.catalog._enums import ProcessStatus
from pilothouse.errors import InvalidFieldError, NotFoundError, PilothouseError
from pilothouse.store import Database
from pilothouse.store import _datasets as store
from pilothouse.store import _replays as replays

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from pilothouse._facade.command import CommandApi
    from pilothouse._facade.evalreport import EvalReport
    from pilothouse._facade.modelscorers import ModelTools
    from pilothouse._facade.scorers import Scorer
    from pilothouse.knowledge import Embedder
    from pilothouse.store._datasets import DatasetCase, DatasetInfo
    from pilothouse.store._replays import CaseResult, ReplayRun
    from pilothouse.types import AdHocResult, AdHocRun


class EvaluationApi(Facet):
    """Evaluation datasets of one tenant.

    Args:
        database: the store.
        tenant: whose datasets and conversations.
        command: the command half replays run their turns with (its caller
            is the ``replay`` face); judges' turns run there too.
        embedder: the packaged embedder of the ``embedding`` scorer, made on
            first use (None: that scorer is refused).
    """

    def __init__(
        self,
        database: Callable[[], Database],
        tenant: str,
        command: Callable[[], CommandApi],
        embedder: Callable[[], Embedder] | None = None,
    ) -> None:
        super().__init__(database, tenant)
        self._command_of = command
        self._embedder_of = embedder

    @asynccontextmanager
    async def _transaction(self) -> AsyncGenerator[AsyncConnection]:
        database = await self._ready()
        async with database.sessions() as session, session.begin():
            yield await session.connection()

    async def _info(self, connection: AsyncConnection, name: str) -> DatasetInfo:
        for info in await store.list_datasets(connection, self.tenant):
            if info.name == name:
                return info
        raise NotFoundError(f"no dataset {name!r}")

    async def create_dataset(
        self,
        name: str,
        *,
        description: str = "",
        from_conversations: bool = False,
        action: str | None = None,
        agent: str | None = None,
        status: ProcessStatus | None = ProcessStatus.COMPLETED,
        since: datetime | None = None,
        until: datetime | None = None,
        uuids: Collection[str] | None = None,
        tag: str | None = None,
        sample: int | None = None,
        seed: int | None = None,
    ) -> DatasetInfo:
        """Create a dataset, empty or filled with the recorded conversations the filters select.

        Erased users' conversations and replays are never taken.

        Args:
            name: unique within the tenant.
            description: free text.
            from_conversations: fill it from recorded conversations; without
                it the filters are refused and the dataset starts empty.
            action: only this action's conversations.
            agent: only this agent's.
            status: only conversations in this status (None: any).
            since: created at or after.
            until: created before.
            uuids: only these conversations.
            tag: only conversations whose message data carries this tag.
            sample: at most this many cases, chosen at random.
            seed: the sample's random seed (repeatable samples).

        Raises:
            InvalidFieldError: the name is taken or empty, a filter was given
                without ``from_conversations``, or ``sample`` is below 1.
        """
        filters = {
            "action": action,
            "agent": agent,
            "since": since,
            "until": until,
            "uuids": uuids,
            "tag": tag,
            "sample": sample,
            "seed": seed,
        }
        given = sorted(k for k, v in filters.items() if v is not None)
        if not from_conversations and given:
            raise InvalidFieldError(
                given[0], f"filters need from_conversations: {', '.join(given)}"
            )
        if sample is not None and sample < 1:
            raise InvalidFieldError("sample", "sample must be at least 1")
        async with self._transaction() as connection:
            await store.create_dataset(connection, self.tenant, name, description)
            if from_conversations:
                where = store.CaseFilter(
                    action=action,
                    agent=agent,
                    status=status,
                    since=since,
                    until=until,
                    uuids=uuids,
                    tag=tag,
                    sample=sample,
                    seed=seed,
                )
                cases = await store.select_conversations(connection, self.tenant, where)
                await store.add_cases(connection, self.tenant, name, cases)
            return await self._info(connection, name)

    async def list_datasets(self) -> list[DatasetInfo]:
        """Return the tenant's datasets by name."""
        async with self._transaction() as connection:
            return await store.list_datasets(connection, self.tenant)

    async def get_dataset(self, name: str) -> DatasetInfo:
        """Return one dataset's facts.

        Raises:
            NotFoundError: no such dataset.
        """
        async with self._transaction() as connection:
            return await self._info(connection, name)

    async def cases(self, name: str) -> list[DatasetCase]:
        """Return a dataset's cases in order.

        Raises:
            NotFoundError: no such dataset.
        """
        async with self._transaction() as connection:
            return await store.dataset_cases(connection, self.tenant, name)

    async def add_cases(self, name: str, cases: Sequence[DatasetCase]) -> DatasetInfo:
        """Append cases (hand-written or copied) to a dataset.

        Raises:
            NotFoundError: no such dataset.
        """
        async with self._transaction() as connection:
            await store.add_cases(connection, self.tenant, name, cases)
            return await self._info(connection, name)

    async def export_dataset(self, name: str) -> list[dict[str, Any]]:
        """Return a dataset's cases as JSON objects, one per JSONL line.

        Raises:
            NotFoundError: no such dataset.
        """
        return [store.case_to_json(case) for case in await self.cases(name)]

    async def import_dataset(
        self, name: str, lines: Sequence[Mapping[str, Any]], *, description: str = ""
    ) -> DatasetInfo:
        """Create a dataset from JSON objects (an export's lines, or hand-written cases).

        Every line is checked before anything is written.

        Raises:
            InvalidFieldError: the name is taken, or a line has an unknown
                field or a field of the wrong type (named with its line).
        """
        cases = [store.case_from_json(line, f"line {i}") for i, line in enumerate(lines, 1)]
        async with self._transaction() as connection:
            await store.create_dataset(connection, self.tenant, name, description)
            await store.add_cases(connection, self.tenant, name, cases)
            return await self._info(connection, name)

    async def delete_dataset(self, name: str) -> None:
        """Delete a dataset and its cases.

        Raises:
            NotFoundError: no such dataset.
        """
        async with self._transaction() as connection:
            await store.delete_dataset(connection, self.tenant, name)

    async def replay(
        self,
        dataset: str,
        *,
        run: str | None = None,
        model: str | None = None,
        configuration: str | None = None,
        settings: Mapping[str, Any] | None = None,
        live_tools: Collection[str] = (),
        concurrency: int = 1,
        count_budgets: bool = False,
    ) -> ReplayRun:
        """Run every case of a dataset again through the run loop against a changed target.

        Tool calls are answered from the recorded results when the same tool
        is called with equal arguments; any other call is a divergence,
        reported in the case's result and answered with an error, unless the
        tool is in ``live_tools``. Giving the name of an unfinished run
        resumes it: only the cases it lacks run.

        Args:
            dataset: the dataset to replay.
            run: the run's name (default: ``<dataset>-<UTC time>``); an
                existing run of the same dataset and target resumes.
            model: a catalog model code instead of each action's.
            configuration: a catalog configuration code instead of each action's.
            settings: model options and switches of the runtime config
                (``{"temperature": 0.2}``), checked like any runtime config.
            live_tools: tools that run for real when a call does not match;
                each must be a catalog tool marked read-only
                (``settings.read_only: true``).
            concurrency: how many cases run at once.
            count_budgets: hold the replay's model calls on the tenant's
                budgets (by default a replay spends nothing of them).

        Raises:
            NotFoundError: no such dataset, model or configuration.
            InvalidFieldError: ``concurrency`` below 1, a live tool that is
                not a read-only catalog tool, or an existing run of another
                dataset or target.
        """
        from pilothouse.runtime._replaytape import ReplayTape, TapeCall, replaying

        if concurrency < 1:
            raise InvalidFieldError("concurrency", "must be at least 1")
        target: dict[str, Any] = {
            "model": model,
            "configuration": configuration,
            "settings": dict(settings or {}),
            "live_tools": sorted(live_tools),
            "count_budgets": count_budgets,
        }
        cases = await self.cases(dataset)
        await self._check_target(model, configuration)
        await self._check_live_tools(live_tools)
        name = run or f"{dataset}-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}"
        async with self._transaction() as connection:
            run_id = await replays.find_run(connection, self.tenant, name)
            if run_id is None:
                run_id = await replays.create_run(connection, self.tenant, name, dataset, target)
                done: set[int] = set()
            else:
                earlier = await replays.read_run(connection, self.tenant, name)
                if earlier.dataset != dataset or dict(earlier.target) != target:
                    raise InvalidFieldError(
                        "run", f"run {name!r} replays another dataset or target"
                    )
                done = {r.sequence for r in earlier.results}
        command = self._command_of()
        limiter = anyio.CapacityLimiter(concurrency)

        async def one(case: DatasetCase) -> None:
            async with limiter:
                tape = ReplayTape(
                    calls=tuple(TapeCall(c.name, c.arguments, c.result) for c in case.tool_calls),
                    live_tools=frozenset(live_tools),
                    model=model,
                    configuration=configuration,
                    count_budgets=count_budgets,
                )
                started = time.perf_counter()
                with replaying(tape):
                    try:
                        turn = await command.start_and_send(
                            case.input_text,
                            action=case.action,
                            agent=case.agent,
                            input_data=case.input_data,
                            runtime_config=settings,
                        )
                    except PilothouseError as exc:
                        result = _failed(case, tape, str(exc))
                    else:
                        result = replays.CaseResult(
                            sequence=case.sequence,
                            status="ok" if turn.error is None else "failed",
                            output=turn.text,
                            tool_calls=_calls(tape),
                            divergences=_divergences(tape),
                            answered=tape.answered,
                            input_tokens=turn.input_tokens,
                            output_tokens=turn.output_tokens,
                            cost=turn.cost,
                            latency_ms=int((time.perf_counter() - started) * 1000),
                            conversation_uuid=turn.conversation_uuid,
                            error=turn.error,
                        )
                async with self._transaction() as connection:
                    await replays.add_result(connection, run_id, result)

        async with anyio.create_task_group() as group:
            for case in cases:
                if case.sequence not in done:
                    group.start_soon(one, case)
        async with self._transaction() as connection:
            await replays.finish_run(connection, run_id)
            return await replays.read_run(connection, self.tenant, name)

    async def _check_target(self, model: str | None, configuration: str | None) -> None:
        """Refuse an unknown model or configuration before any case runs."""
        from pilothouse.catalog._read import CatalogReader

        def read(connection: Any) -> None:
            reader = CatalogReader(connection, self.tenant)
            if model is not None and reader.model(model) is None:
                raise NotFoundError(f"model '{model}' not found")
            if configuration is not None and reader.configuration(configuration) is None:
                raise NotFoundError(f"configuration '{configuration}' not found")

        async with self._transaction() as connection:
            await connection.run_sync(read)

    async def _check_live_tools(self, names: Collection[str]) -> None:
        """Refuse a live tool that is not in the catalog or not marked read-only."""
        from sqlalchemy import select

        from pilothouse.catalog._tables import tool_table

        if not names:
            return
        c = tool_table.c
        async with self._transaction() as connection:
            rows = await connection.execute(
                select(c.name, c.settings).where(
                    c.tenant == self.tenant, c.active.is_(True), c.name.in_(sorted(names))
                )
            )
            marked: dict[str, bool] = {}
            for row in rows:
                settings: Mapping[str, Any] = row.settings or {}
                marked[row.name] = marked.get(row.name, False) or settings.get("read_only") is True
        for name in sorted(names):
            if name not in marked:
                raise InvalidFieldError("live_tools", f"no active catalog tool named {name!r}")
            if not marked[name]:
                raise InvalidFieldError(
                    "live_tools",
                    f"tool {name!r} is not marked read-only; a replay runs only read-only tools "
                    "live (set settings.read_only: true in its catalog entry if calling it "
                    "changes nothing)",
                )

    async def evaluate(
        self,
        run: str,
        *,
        against: str | None = None,
        scorers: Sequence[str | Scorer] = ("exact",),
        thresholds: Mapping[str, float] | None = None,
        margin: float | None = None,
        schema: Mapping[str, Any] | None = None,
        rubric: str | None = None,
        concurrency: int = 4,
    ) -> EvalReport:
        """Score a replay run case by case against a baseline run or the recording.

        Args:
            run: the run to score.
            against: a baseline run of the same dataset (None: the recorded
                outputs, tool calls, cost and latency).
            scorers: built-in scorer specs (``exact``, ``normalised``,
                ``json_field:a,b``, ``json_valid``, ``tool_sequence``,
                ``regex:...``, ``cost_delta:1.5``, ``latency_delta:2``,
                ``embedding:0.8``, ``judge:MODEL``) or scorer objects, plain
                or async.
            thresholds: the lowest pass rate each scorer may have, by name.
            margin: the most a pass rate may drop below the baseline run's.
            schema: the JSON schema ``json_valid`` checks outputs against.
            rubric: what ``judge:MODEL`` scorers grade by (a default rubric
                otherwise); each verdict is a recorded, audited, priced turn.
            concurrency: how many verdicts of async scorers (judges,
                embeddings) are awaited at once.

        Raises:
            NotFoundError: no such run, baseline or judge model.
            InvalidFieldError: an unknown scorer, a threshold of no scorer,
                a margin without a baseline, a rubric without a judge, or a
                baseline of another dataset.
        """
        from pilothouse._facade.evalreport import build_report
        from pilothouse._facade.modelscorers import LlmJudge
        from pilothouse._facade.scorers import parse_scorer

        if concurrency < 1:
            raise InvalidFieldError("concurrency", "must be at least 1")
        tools = self._model_tools(rubric)
        units = [parse_scorer(s, schema, tools) if isinstance(s, str) else s for s in scorers]
        if not units:
            raise InvalidFieldError("scorers", "name at least one scorer")
        judges = [u for u in units if isinstance(u, LlmJudge)]
        if rubric is not None and not judges:
            raise InvalidFieldError("rubric", "a rubric is for judge:MODEL scorers; name one")
        for judge in judges:
            await self._check_target(judge.model, None)
        async with self._transaction() as connection:
            scored = await replays.read_run(connection, self.tenant, run)
            baseline = (
                await replays.read_run(connection, self.tenant, against)
                if against is not None
                else None
            )
            if baseline is not None and baseline.dataset != scored.dataset:
                raise InvalidFieldError("against", f"run {against!r} replays another dataset")
            cases = await store.dataset_cases(connection, self.tenant, scored.dataset)
        return await build_report(
            cases,
            scored,
            baseline,
            units,
            thresholds=thresholds,
            margin=margin,
            concurrency=concurrency,
        )

    def _model_tools(self, rubric: str | None) -> ModelTools:
        """The embedder and the judges' runner the model-backed scorers call."""
        from pilothouse._facade.modelscorers import ModelTools

        if rubric is not None and not rubric.strip():
            raise InvalidFieldError("rubric", "the rubric is empty")
        embedder_of = self._embedder_of

        async def embed(texts: Sequence[str]) -> list[list[float]]:
            assert embedder_of is not None
            vectors = await embedder_of().embed(texts)
            return [[float(x) for x in row] for row in vectors]

        async def ask(run: AdHocRun) -> AdHocResult:
            return await self._command_of().run_adhoc(run)

        return ModelTools(embed if embedder_of is not None else None, ask, rubric)

    async def get_run(self, name: str) -> ReplayRun:
        """Return a replay run with its results.

        Raises:
            NotFoundError: no such run.
        """
        async with self._transaction() as connection:
            return await replays.read_run(connection, self.tenant, name)

    async def list_runs(self) -> list[ReplayRun]:
        """Return the tenant's replay runs, newest first, without their results."""
        async with self._transaction() as connection:
            return await replays.list_runs(connection, self.tenant)


def _calls(tape: Any) -> tuple[dict[str, Any], ...]:
    return tuple({"name": name, "arguments": arguments} for name, arguments in tape.called)


def _divergences(tape: Any) -> tuple[dict[str, Any], ...]:
    return tuple(
        {
            "tool": d.tool,
            "arguments": dict(d.arguments),
            "expected": [dict(e) for e in d.expected],
            "live": d.live,
        }
        for d in tape.divergences
    )


def _failed(case: DatasetCase, tape: Any, error: str) -> CaseResult:
    return replays.CaseResult(
        sequence=case.sequence,
        status="failed",
        output=None,
        tool_calls=_calls(tape),
        divergences=_divergences(tape),
        answered=tape.answered,
        cost=Decimal(0),
        error=error,
    )


REPLAY_CALLER = Caller("replay")
"""Who a replay's conversations were started by."""
