"""Alembic migrations of the pilothouse schema (``versions/``, run by ``env.py``)."""

HEAD_REVISION = "0020"
"""The newest revision in ``versions/``: bump it with every new migration.

:meth:`pilothouse.store.Database.ensure_schema` compares a database's stored
revision with it and starts Alembic only when they differ, so a normal start
neither imports Alembic nor reads the migration scripts. A stale value costs
speed, never correctness (Alembic then runs and finds nothing to do); a test
checks it against the head Alembic computes.
"""
