"""The evaluation half of the facade: datasets of recorded cases, their export and import.

A dataset is built from the tenant's recorded conversations (filtered by
action, agent, status, dates, tag, uuids, a sample size) or written by hand,
and moves between deployments as JSONL, one case per line.
"""

from __future__ import annotations

__all__ = ["EvaluationApi"]

from collections.abc import AsyncIterator, Callable, Collection, Mapping, Sequence
from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any

from pilothouse._facade.facet import Facet
from pilothouse.catalog._enums import ProcessStatus
from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.store import Database
from pilothouse.store import _datasets as store

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection

    from pilothouse.store._datasets import DatasetCase, DatasetInfo


class EvaluationApi(Facet):
    """Evaluation datasets of one tenant.

    Args:
        database: the store.
        tenant: whose datasets and conversations.
    """

    def __init__(self, database: Callable[[], Database], tenant: str) -> None:
        super().__init__(database, tenant)

    @asynccontextmanager
    async def _transaction(self) -> AsyncIterator[AsyncConnection]:
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
