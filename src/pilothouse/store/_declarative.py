"""The declarative base of every mapped class; importing it loads SQLAlchemy's ORM.

The classes are declared on Core tables of their own modules
(``__table__``), so the schema is the tables', whichever way it is used.
"""

from __future__ import annotations

__all__ = ["Base"]

from typing import Any

from sqlalchemy import JSON
from sqlalchemy.orm import DeclarativeBase

from pilothouse.store._tables import metadata


class Base(DeclarativeBase):
    """Declarative base of every pilothouse mapped class."""

    metadata = metadata
    # For the classes still declared with mapped_column() (knowledge, memory,
    # API keys, lineage, the gateways' audit: none is used by a turn), the
    # type of their JSON columns.
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}
