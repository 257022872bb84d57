"""Seed 000's business-key lengths: YAML, REST, the database, and migration 0005.

Seed 000 (the ERP ``sys.llm`` module) gives every entity's business key a
length; a catalog moved over from it must keep fitting, and a longer key is
refused everywhere with the entity and the limit named.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from alembic import command
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError, IntegrityError
from typer.testing import CliRunner, Result

from database_templates import scratch_postgres_database
from pilothouse.api import Pilothouse
from pilothouse.catalog import CODE_LENGTHS, validate_paths
from pilothouse.cli import app as cli_app
from pilothouse.errors import CatalogValidationError
from pilothouse.settings import Settings
from pilothouse.store import Database, head_revision
from pilothouse.store._engine import KeyLengthRefusal, _alembic_config

# Seed 000, "Entities": "Business key (up to N characters)", per entity.
SEED_LENGTHS = {
    "application": 8,
    "agent": 8,
    "agent type": 4,
    "action": 12,
    "action type": 4,
    "persona": 8,
    "persona type": 4,
    "skill": 8,
    "skill type": 4,
    "tool": 12,
    "advisor": 8,
    "advisor type": 4,
    "document collection": 8,
    "vector store": 8,
    "memory strategy": 4,
    "configuration": 4,
    "model": 12,
    "provider": 4,
}

# kind, entity, the other fields an entity of that kind needs.
KINDS = [
    ("applications", "application", ""),
    ("agents", "agent", "    application: APP\n"),
    ("agent_types", "agent type", ""),
    ("actions", "action", "    model: M\n    configuration: C\n    prompt: p\n"),
    ("action_types", "action type", ""),
    ("personas", "persona", "    prompt: p\n"),
    ("persona_types", "persona type", ""),
    ("skills", "skill", "    prompt: p\n"),
    ("skill_types", "skill type", ""),
    ("tools", "tool", "    name: t\n    kind: schema\n"),
    ("advisors", "advisor", "    implementation: logging\n"),
    ("advisor_types", "advisor type", ""),
    ("document_collections", "document collection", "    store: S\n    collection_name: c\n"),
    ("vector_stores", "vector store", ""),
    ("memory_strategies", "memory strategy", "    kind: FULL\n"),
    ("configurations", "configuration", "    max_tokens: 1\n"),
    ("models", "model", "    provider: P\n    model_name: m\n"),
    ("providers", "provider", "    kind: openai-compatible\n"),
]

BASE = """\
providers:
  - {code: P, kind: openai-compatible}
models:
  - {code: M, provider: P, model_name: m}
configurations:
  - {code: C, max_tokens: 1}
applications:
  - {code: APP}
vector_stores:
  - {code: S}
"""


def test_code_lengths_are_the_seeds() -> None:
    assert {name: CODE_LENGTHS[name] for name in SEED_LENGTHS} == SEED_LENGTHS


def _issues(tmp_path: Path, kind: str, code: str, fields: str) -> list[str]:
    entry = f"  - code: {code}\n{fields}"
    # The base defines some kinds itself: the entry joins that list then.
    if f"\n{kind}:\n" in f"\n{BASE}":
        document = BASE.replace(f"{kind}:\n", f"{kind}:\n{entry}", 1)
    else:
        document = f"{BASE}{kind}:\n{entry}"
    (tmp_path / "c.yaml").write_text(document)
    _, issues = validate_paths([tmp_path])
    return [f"{issue.entity}: {issue.field}: {issue.rule}" for issue in issues]


@pytest.mark.parametrize(("kind", "entity", "fields"), KINDS)
def test_yaml_takes_a_key_of_the_seeds_length_and_refuses_one_more(
    tmp_path: Path, kind: str, entity: str, fields: str
) -> None:
    limit = SEED_LENGTHS[entity]
    assert _issues(tmp_path, kind, "K" * limit, fields) == []
    assert _issues(tmp_path, kind, "K" * (limit + 1), fields) == [
        f"{entity}: code: at most {limit} characters (got {limit + 1})"
    ]


@pytest.mark.parametrize("code", ["INVOKE", "TOOLCALL"])
def test_an_action_may_not_take_a_code_the_runtime_records_its_own_conversations_under(
    tmp_path: Path, code: str
) -> None:
    fields = "    model: M\n    configuration: C\n    prompt: p\n"
    (issue,) = _issues(tmp_path, "actions", code, fields)
    assert issue.startswith(f"action: code: '{code}' is reserved for the conversations of")
    assert issue.endswith("; choose another action code")
    assert _issues(tmp_path, "actions", f"{code}2", fields) == []


def test_the_example_catalog_fits_the_seeds_lengths() -> None:
    parsed, issues = validate_paths([Path(__file__).parents[2] / "examples" / "catalog"])
    assert issues == []
    for kind, entity, _ in KINDS:
        for entry in parsed.entries.get(kind, []):
            assert len(entry.spec.key) <= SEED_LENGTHS[entity], (entity, entry.spec.key)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("table", "limit"),
    [("provider", 4), ("configuration", 4), ("memory_strategy", 4), ("persona", 8)],
)
async def test_the_database_refuses_a_longer_key(
    database: Database, table: str, limit: int
) -> None:
    columns = {
        "provider": "kind, headers, settings",
        "configuration": "max_tokens, stop, retry_count, retry_delay",
        "memory_strategy": "kind, window_size",
        "persona": "prompt",
    }[table]
    values = {
        "provider": "'openai', '{}', '{}'",
        "configuration": "1, '[]', 0, 0",
        "memory_strategy": "'FULL', 20",
        "persona": "'p'",
    }[table]

    def insert(code: str) -> str:
        return (
            f"INSERT INTO {table} (code, name, {columns}, tenant, active, version, updated_at, "
            f"updated_by) VALUES ('{code}', '', {values}, 'default', true, 1, "
            "'2026-01-01 00:00:00+00', 'x')"
        )

    async with database.engine.begin() as connection:
        await connection.execute(text(insert("K" * limit)))
    with pytest.raises((IntegrityError, DBAPIError)) as caught:
        async with database.engine.begin() as connection:
            await connection.execute(text(insert("L" * (limit + 1))))
    message = str(caught.value)
    assert f"{limit}" in message
    with pytest.raises((IntegrityError, DBAPIError)):
        async with database.engine.begin() as connection:
            await connection.execute(
                text(
                    f"UPDATE {table} SET code = '{'U' * (limit + 1)}' WHERE code = '{'K' * limit}'"
                )
            )


def _to(connection: object, revision: str) -> None:
    config = _alembic_config()
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


_OLD_ROWS = [
    "INSERT INTO provider (code, name, kind, headers, settings, tenant, active, version, "
    "updated_at, updated_by) VALUES ('{code}', '', 'openai', '{{}}', '{{}}', '{tenant}', "
    "true, 1, '2026-01-01 00:00:00+00', 'x')",
    "INSERT INTO configuration (code, name, max_tokens, stop, retry_count, retry_delay, "
    "tenant, active, version, updated_at, updated_by) VALUES ('{code}', '', 1, '[]', 0, 0, "
    "'{tenant}', true, 1, '2026-01-01 00:00:00+00', 'x')",
]


def _rule(length: int, tenant: str, limit: int) -> str:
    return (
        f"{length} characters in tenant '{tenant}', the ERP key length is {limit}: rename it "
        f"(and every reference to it) to at most {limit} characters, then run "
        "`pilothouse db upgrade` again; nothing was changed (until then `pilothouse catalog "
        "export` and `pilothouse conversations list` read this database)"
    )


def _cli(url: str, *args: str) -> Result:
    # The commands the refusal names, as a user runs them.
    return CliRunner().invoke(cli_app, ["--database-url", url, *args])


async def _migration_refuses_then_runs(db: Database) -> None:
    async with db.engine.begin() as connection:
        await connection.run_sync(_to, "0004")
        await connection.execute(text(_OLD_ROWS[0].format(code="OPENAI", tenant="acme")))
        await connection.execute(text(_OLD_ROWS[0].format(code="OAI", tenant="acme")))
        await connection.execute(text(_OLD_ROWS[1].format(code="DEFAULT", tenant="default")))
    with pytest.raises(CatalogValidationError) as caught:
        await db.upgrade()
    # Every too-long row, with its tenant, length and the limit; nothing truncated.
    assert [str(issue) for issue in caught.value.issues] == [
        f"provider 'OPENAI': code: {_rule(6, 'acme', 4)}",
        f"configuration 'DEFAULT': code: {_rule(7, 'default', 4)}",
    ]
    assert isinstance(caught.value, KeyLengthRefusal)
    readable_at = caught.value.readable_at
    async with db.engine.connect() as connection:
        codes = (await connection.execute(text("SELECT code FROM provider ORDER BY code"))).all()
        revision = (
            await connection.execute(text("SELECT version_num FROM alembic_version"))
        ).scalar_one()
    assert [row[0] for row in codes] == ["OAI", "OPENAI"]
    # Every migration but the refused one is done: the database can be read.
    assert revision == readable_at != "0004"
    # Not `async with`, which brings the schema up to date for writes.
    ph = Pilothouse(Settings(database_url=db.url), tenant="acme")
    try:
        exported = await ph.catalog.export()
        assert "code: OPENAI" in exported
        assert (await ph.query.list_conversations()).total == 0
        with pytest.raises(KeyLengthRefusal):
            await ph.ensure_schema()  # what writes need is still refused
    finally:
        await ph.aclose()
    exported_by_cli = await anyio.to_thread.run_sync(
        _cli, db.url, "--tenant", "acme", "catalog", "export"
    )
    assert exported_by_cli.exit_code == 0, exported_by_cli.output
    assert "code: OPENAI" in exported_by_cli.stdout
    listed = await anyio.to_thread.run_sync(_cli, db.url, "conversations", "list", "--json")
    assert listed.exit_code == 0, listed.output
    refused = await anyio.to_thread.run_sync(_cli, db.url, "db", "upgrade")
    assert refused.exit_code == 2
    assert "`pilothouse catalog export` and `pilothouse conversations list`" in refused.output
    # Renamed by the user, the migration runs.
    async with db.engine.begin() as connection:
        await connection.execute(text("UPDATE provider SET code = 'OPEN' WHERE code = 'OPENAI'"))
        await connection.execute(text("UPDATE configuration SET code = 'DFLT'"))
    assert await db.upgrade() == (readable_at, head_revision())
    assert await db.schema_is_current()


@pytest.mark.anyio
async def test_migration_0005_refuses_too_long_keys_on_sqlite(tmp_path: Path) -> None:
    db = Database(f"sqlite+aiosqlite:///{tmp_path / 'old.db'}")
    try:
        await _migration_refuses_then_runs(db)
    finally:
        await db.dispose()


@pytest.mark.anyio
@pytest.mark.postgres
async def test_migration_0005_refuses_too_long_keys_on_postgres() -> None:
    async with scratch_postgres_database("pilothouse_0005") as url:
        db = Database(url)
        try:
            await _migration_refuses_then_runs(db)
        finally:
            await db.dispose()
