"""A thin synchronous wrapper around the async :class:`~pilothouse.api.Pilothouse`.

The async facade runs in an event loop on a background thread (an anyio
blocking portal); every call from synchronous code is handed to that loop
and waited for. The wrapper is generic: any coroutine method the async API
gains is offered synchronously with no code here, and any async generator
method becomes a plain iterator.
"""

from __future__ import annotations

__all__ = ["SyncPilothouse"]

import functools
import inspect
from collections.abc import AsyncGenerator, Callable, Iterator
from contextlib import ExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from pilothouse.settings import Settings
from pilothouse.store import Database

if TYPE_CHECKING:
    from anyio.from_thread import BlockingPortal
    from pydantic_ai.models import Model

    from pilothouse.api import Pilothouse


class _SyncProxy:
    """Offers an async object's methods as blocking calls through a portal."""

    def __init__(self, target: object, portal: BlockingPortal) -> None:
        self._target = target
        self._portal = portal

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._target, name)
        if inspect.iscoroutinefunction(attribute):
            return self._blocking(attribute)
        if inspect.isasyncgenfunction(attribute):
            return self._iterating(attribute)
        return attribute

    def __dir__(self) -> list[str]:
        return sorted(set(dir(self._target)) | set(super().__dir__()))

    def _blocking(self, method: Callable[..., Any]) -> Callable[..., Any]:
        portal = self._portal

        @functools.wraps(method)
        def call(*args: Any, **kwargs: Any) -> Any:
            return portal.call(functools.partial(method, *args, **kwargs))

        return call

    def _iterating(self, method: Callable[..., AsyncGenerator[Any]]) -> Callable[..., Any]:
        portal = self._portal

        @functools.wraps(method)
        def iterate(*args: Any, **kwargs: Any) -> Iterator[Any]:
            generator = method(*args, **kwargs)
            try:
                while True:
                    try:
                        yield portal.call(generator.__anext__)
                    except StopAsyncIteration:
                        return
            finally:
                # Runs the generator's own cleanup when the caller stops early.
                portal.call(generator.aclose)

        return iterate


async def _open(
    settings: Settings | None, tenant: str | None, database: Database | None, model: Any
) -> Any:
    from pilothouse.api import Pilothouse

    # Created on the portal's loop so the engine's connections belong to it.
    return await Pilothouse(settings, tenant=tenant, database=database, model=model).__aenter__()


class SyncPilothouse:
    """The Python API for synchronous code; same arguments as ``Pilothouse``.

    ``query`` and ``command`` offer every method of the async
    :class:`~pilothouse.api.QueryApi` and :class:`~pilothouse.api.CommandApi`
    as blocking calls with the same arguments, results and exceptions::

        with SyncPilothouse(settings) as ph:
            conversation = ph.command.start_conversation("ANALYST", "SUMMARIZE")

    Call :meth:`close` (or leave the ``with`` block) to stop the background
    event loop and close the database.

    Args:
        settings: deployment settings; read from the environment when omitted.
        tenant: the tenant every call acts for; defaults to ``settings.tenant``.
        database: a database to share (left open by :meth:`close`).

    Attributes:
        query: blocking reads.
        command: blocking state changes.
        facade: the async facade underneath, for code that wants both.
    """

    def __init__(
        self,
        settings: Settings | None = None,
        *,
        tenant: str | None = None,
        database: Database | None = None,
        model: Model | None = None,
    ) -> None:
        from anyio.from_thread import start_blocking_portal

        self._stack = ExitStack()
        self._portal = self._stack.enter_context(start_blocking_portal())
        try:
            self.facade: Pilothouse = self._portal.call(_open, settings, tenant, database, model)
        except BaseException:
            self._stack.close()
            raise
        self.query: Any = _SyncProxy(self.facade.query, self._portal)
        self.command: Any = _SyncProxy(self.facade.command, self._portal)
        self._closed = False

    @property
    def tenant(self) -> str:
        """The tenant every call acts for."""
        return self.facade.tenant

    def close(self) -> None:
        """Close the database (unless shared) and stop the background loop."""
        if self._closed:
            return
        self._closed = True
        try:
            self._portal.call(self.facade.aclose)
        finally:
            self._stack.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.close()
