"""API keys: who may call the HTTP service, for which tenant.

Only a digest of each key is stored; the key itself is shown once, when it
is created.
"""

from __future__ import annotations

__all__ = ["ApiKey"]

from datetime import datetime
from typing import Any

from sqlalchemy import Boolean, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from pilothouse.store._base import Base, utcnow
from pilothouse.store._types import UtcDateTime


class ApiKey(Base):
    """One API key of a tenant.

    Attributes:
        prefix: the key's first characters, shown in listings and used to
            find the row without storing the key.
        digest: SHA-256 of the whole key (keys are random, so a fast hash
            is enough; nothing is there to brute-force).
        scopes: e.g. ``["admin"]`` for catalog writes.
    """

    __tablename__ = "api_key"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    tenant: Mapped[str] = mapped_column(String(32), index=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    prefix: Mapped[str] = mapped_column(String(16), unique=True)
    digest: Mapped[str] = mapped_column(String(64))
    scopes: Mapped[list[Any]] = mapped_column(default=list)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    last_used_at: Mapped[datetime | None] = mapped_column(UtcDateTime)
