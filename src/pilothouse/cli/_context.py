"""What every CLI command shares: settings, the facade, and error reporting.

A user's mistake ends the command with exit code 2 and one line on stderr,
never a stack trace. Commands reach pilothouse only through the facade
(:func:`open_facade`), imported when a command runs, so ``pilothouse --help``
loads none of it.
"""

from __future__ import annotations

__all__ = ["CliState", "fail", "open_facade", "run"]

import sys
from collections.abc import AsyncGenerator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

import anyio
import typer
from pydantic import ValidationError

from pilothouse.errors import BudgetExceededError, CatalogValidationError, PilothouseError
from pilothouse.settings import Settings

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse

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


@asynccontextmanager
async def open_facade(
    state: CliState,
    *,
    migrate: bool = True,
    catalog_egress: bool = False,
    long_running: bool = False,
) -> AsyncGenerator[Pilothouse]:
    """Open the facade for the command's tenant and close it at the end.

    Args:
        state: the command's settings and tenant.
        migrate: bring the schema to the newest migration first (commands
            that only report on the database pass False).
        catalog_egress: check the catalog's URLs against the egress policy
            at every call (a process that runs tenants' tools, as the
            service does).
        long_running: the command's process runs turns until stopped
            (``pilothouse events``, ``worker``): it freezes its heap after the
            first turn unless ``PILOTHOUSE_FREEZE_HEAP`` says otherwise.

    Connection and SQL failures become exit code 2 with one line naming the
    database (password hidden).
    """
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from pilothouse.api import Caller, Pilothouse

    settings = state.settings
    if long_running and "freeze_heap" not in settings.model_fields_set:
        # The process is pilothouse's own, so its heap is too (docs/operations.md).
        settings = settings.model_copy(update={"freeze_heap": True})
    ph = Pilothouse(settings, tenant=state.effective_tenant, catalog_egress=catalog_egress)
    try:
        if migrate:
            await ph.ensure_schema()
        # What the command starts is recorded as the CLI's (no API key).
        yield ph.for_tenant(ph.tenant, caller=Caller("cli"))
    except (OSError, SQLAlchemyError) as exc:
        where = make_url(state.settings.database_url).render_as_string(hide_password=True)
        reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        fail(f"database {where}: {reason}")
    finally:
        await ph.aclose()


_SETTING_OPTIONS = {"database_url": "--database-url", "secrets_file": "--secrets-file"}
"""Settings the root command's options also set."""


def settings_problem(exc: ValidationError, *, prefix: str = "PILOTHOUSE_") -> str:
    """One line naming each invalid setting, where it is set and what is wrong.

    The values are left out: a database URL or a secret may be among them.

    Args:
        exc: what validating the settings raised.
        prefix: the settings class's environment prefix.
    """
    problems: list[str] = []
    for error in exc.errors(include_url=False, include_input=False, include_context=False):
        field = ".".join(str(part) for part in error["loc"])
        if not field:  # about the settings as a whole (a misspelt variable)
            problems.append(error["msg"].removeprefix("Value error, "))
            continue
        where = f"{prefix}{field.upper()}"
        option = _SETTING_OPTIONS.get(field) if prefix == "PILOTHOUSE_" else None
        if option is not None:
            where = f"{option} or {where}"
        problems.append(f"{field} ({where}): {error['msg']}")
    return "invalid settings: " + "; ".join(problems)


def fail(message: str) -> NoReturn:
    """End the command with exit code 2 and one line on stderr."""
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(code=2)


def run(func: Callable[[], Coroutine[Any, Any, T]] | Callable[[], Awaitable[T]]) -> T:
    """Run an async command body: pilothouse errors exit 2, a spent budget exits 3."""

    async def body() -> T:
        return await func()

    try:
        return anyio.run(body)
    except CatalogValidationError as exc:
        for issue in exc.issues:
            typer.echo(str(issue), err=True)
        raise typer.Exit(code=2) from None
    except BudgetExceededError as exc:
        # Its own exit code: a script can tell a spent budget (wait for the
        # period to reset, or raise the limit) from a mistake in its input.
        typer.echo(f"error: {exc.public_message}", err=True)
        raise typer.Exit(code=3) from None
    except PilothouseError as exc:
        fail(exc.public_message)
    except KeyboardInterrupt:
        typer.echo("interrupted", err=True)
        sys.exit(130)
