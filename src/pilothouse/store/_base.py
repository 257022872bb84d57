"""What the catalog's and the store's tables share: the clock and the declarative base.

Every table lives in one metadata (:data:`pilothouse.store._tables.metadata`)
so one Alembic history migrates them together. The tables are Core tables in
modules that do not import SQLAlchemy's ORM; the mapped classes are declared
on them, on :class:`Base`, which is imported on first use (PEP 562) because
importing it loads the ORM: a first turn on the store's fast path never does.
"""

from __future__ import annotations

__all__ = ["Base", "JsonValue", "utcnow"]

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from pilothouse._lazy import lazy_exports

if TYPE_CHECKING:
    from pilothouse.store._declarative import Base

JsonValue = Any
"""A JSON document as stored in a JSON column."""


def utcnow() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


_MODULE_OF, __getattr__, __dir__ = lazy_exports(
    "pilothouse.store", {"_declarative": ("Base",)}, globals()
)
