"""The declarative base shared by the catalog and the conversation store.

Both live in one metadata so one Alembic history migrates them together.
"""

from __future__ import annotations

__all__ = ["Base", "JsonValue", "utcnow"]

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import JSON, MetaData
from sqlalchemy.orm import DeclarativeBase

JsonValue = Any
"""A JSON document as stored in a JSON column."""

# Deterministic constraint names let Alembic alter constraints on SQLite
# (batch mode) and PostgreSQL alike.
_NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """Return the current time as an aware UTC datetime."""
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """Declarative base of every pilothouse table."""

    metadata = MetaData(naming_convention=_NAMING)
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}
