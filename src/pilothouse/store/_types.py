"""Column types that behave the same on SQLite and PostgreSQL."""

from __future__ import annotations

__all__ = ["UtcDateTime", "coded_enum"]

from datetime import UTC, datetime
from enum import StrEnum

from sqlalchemy import DateTime, Dialect, Enum
from sqlalchemy.types import TypeDecorator

# The first moment a UTC datetime holds (its last is datetime.max in UTC).
_FIRST = datetime.min.replace(tzinfo=UTC)


class UtcDateTime(TypeDecorator[datetime]):
    """An aware UTC datetime on every backend.

    SQLite drops the zone on the way in; this puts UTC back on the way out so
    callers never compare naive and aware times.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Store in UTC, refusing naive times that would be ambiguous."""
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given where an aware UTC time is required")
        try:
            return value.astimezone(UTC)
        except OverflowError:
            # A valid time whose UTC reading leaves the calendar (an hour past
            # 9999-12-31 23:59:59 UTC, or before year 1) only reaches here as
            # a client's filter bound; the calendar's end orders the same
            # against every stored time, so it stands in, on both backends.
            return datetime.max.replace(tzinfo=UTC) if value.year == 9999 else _FIRST

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        """Return aware UTC times whatever the backend kept."""
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


def _codes(cls: type[StrEnum]) -> list[str]:
    return [member.value for member in cls]


def coded_enum(cls: type[StrEnum], name: str) -> Enum:
    """Return a column type that stores an enum's wire code, not its member name.

    A check constraint rather than a native enum type keeps migrations the
    same on SQLite and PostgreSQL.
    """
    return Enum(
        cls,
        name=name,
        native_enum=False,
        length=24,
        values_callable=_codes,
        validate_strings=True,
    )
