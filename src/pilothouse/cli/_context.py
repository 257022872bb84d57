"""What every CLI command shares: settings, the database, and error reporting.

A user's mistake ends the command with exit code 2 and one line on stderr,
never a stack trace.
"""

from __future__ import annotations

__all__ = ["CliState", "fail", "run"]

import sys
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, NoReturn, TypeVar

import anyio
import typer

from pilothouse.errors import CatalogValidationError, PilothouseError
from pilothouse.settings import Settings
from pilothouse.store import Database

T = TypeVar("T")


@dataclass
class CliState:
    """Per-invocation state, created by the root callback and passed in ``ctx.obj``."""

    settings: Settings = field(default_factory=Settings)
    tenant: str | None = None

    @property
    def effective_tenant(self) -> str:
        """The tenant named on the command line, else the deployment default."""
        return self.tenant or self.settings.tenant

    def database(self) -> Database:
        """Open the configured database (the schema is upgraded on first use)."""
        return self.settings.open_database()


def fail(message: str) -> NoReturn:
    """End the command with exit code 2 and one line on stderr."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def run(func: Callable[[], Coroutine[Any, Any, T]] | Callable[[], Awaitable[T]]) -> T:
    """Run an async command body, turning pilothouse errors into exit code 2."""

    async def body() -> T:
        return await func()

    try:
        return anyio.run(body)
    except CatalogValidationError as exc:
        for issue in exc.issues:
            typer.echo(str(issue), err=True)
        raise typer.Exit(code=2) from None
    except PilothouseError as exc:
        fail(str(exc))
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
