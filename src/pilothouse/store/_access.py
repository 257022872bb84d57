"""API keys: who may call the HTTP service, for which tenant; the browser UI's sessions.

Only a digest of each key is stored; the key itself is shown once, when it
is created. A browser session is stored the same way: its cookie holds a
random session id, the table its digest and the key it was opened with.
"""

from __future__ import annotations

__all__ = ["ApiKey", "UiSession"]

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


class UiSession(Base):
    """A browser UI session, opened by logging in with an API key.

    The cookie carries the session id, never the key. The session acts for
    its key while that key is active: revoking the key ends its sessions.

    Attributes:
        digest: SHA-256 of the session id (the id is random: nothing to
            brute-force, and a copy of the table opens no session).
        key_prefix: the prefix of the API key the session was opened with.
        expires_at: when the session ends unless logged out before.
    """

    __tablename__ = "ui_session"

    digest: Mapped[str] = mapped_column(String(64), primary_key=True)
    key_prefix: Mapped[str] = mapped_column(String(16), index=True)
    created_at: Mapped[datetime] = mapped_column(UtcDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UtcDateTime, index=True)
