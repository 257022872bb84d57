"""What every half of the facade shares: the database, opened on first use, and the tenant."""

from __future__ import annotations

__all__ = ["Facet"]

from collections.abc import Callable

from pilothouse.store import Database


class Facet:
    """What the halves of the facade share: the database and the tenant.

    Args:
        database: returns the database, opened on first use (a facade that
            only validates files never opens it).
        tenant: the tenant every call acts for.
    """

    def __init__(self, database: Callable[[], Database], tenant: str) -> None:
        self._database_of = database
        self.tenant = tenant

    @property
    def _database(self) -> Database:
        return self._database_of()

    async def _ready(self) -> Database:
        # A no-op after the first call; makes a fresh database usable with
        # no setup step.
        await self._database.ensure_schema()
        return self._database
