"""The tenant-scoped catalog repository, on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest

from pilothouse.catalog import (
    CatalogRepository,
    ConfigurationSpec,
    ModelSpec,
    ProviderSpec,
    catalog_kind,
)
from pilothouse.catalog._models import Configuration
from pilothouse.errors import (
    CatalogValidationError,
    ConflictError,
    NotFoundError,
    StaleVersionError,
)
from pilothouse.store import Database

pytestmark = pytest.mark.anyio

LOCL = ProviderSpec(code="LOCL", kind="local")  # type: ignore[arg-type]


async def seed(database: Database, tenant: str = "a") -> None:
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, tenant, user="bob")
        await repo.create("providers", LOCL)
        await repo.create("models", {"code": "SMOL", "provider": "LOCL", "model_name": "smol"})
        await repo.create("configurations", ConfigurationSpec(code="DFLT", max_tokens=64))


async def test_create_get_list(database: Database) -> None:
    await seed(database)
    async with database.sessions() as session:
        repo = CatalogRepository(session, "a")
        model = await repo.get("models", "SMOL")
        assert model.version == 1
        assert model.updated_by == "bob"
        assert [r.key for r in await repo.list("providers")] == ["LOCL"]
        spec = await repo.get_spec("models", "SMOL")
        assert spec == ModelSpec(code="SMOL", provider="LOCL", model_name="smol")
        assert await repo.revision() == 3


async def test_list_active_only(database: Database) -> None:
    await seed(database)
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        await repo.create("configurations", {"code": "OFF", "max_tokens": 1, "active": False})
        assert [r.key for r in await repo.list("configurations")] == ["DFLT", "OFF"]
        assert [r.key for r in await repo.list("configurations", active_only=True)] == ["DFLT"]


async def test_get_missing(database: Database) -> None:
    async with database.sessions() as session:
        with pytest.raises(NotFoundError, match="^action 'X' not found$"):
            await CatalogRepository(session, "a").get("actions", "X")


async def test_create_twice_conflicts(database: Database) -> None:
    await seed(database)
    async with database.sessions() as session, session.begin():
        with pytest.raises(ConflictError, match="^provider 'LOCL' already exists$"):
            await CatalogRepository(session, "a").create("providers", LOCL)


async def test_create_refuses_unknown_references(database: Database) -> None:
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        with pytest.raises(CatalogValidationError) as caught:
            await repo.create("models", {"code": "M", "provider": "NOPE", "model_name": "m"})
    assert [str(i) for i in caught.value.issues] == ["model 'M': provider: unknown provider 'NOPE'"]


async def test_create_refuses_a_literal_secret_without_echoing_it(database: Database) -> None:
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        with pytest.raises(CatalogValidationError) as caught:
            await repo.create("providers", {"code": "P", "kind": "openai", "api_key": "sk-LEAK"})
    assert str(caught.value) == (
        "provider 'P': api_key: must be a @secrets(NAME) reference, not a literal value"
    )


async def test_create_reports_type_errors_as_issues(database: Database) -> None:
    async with database.sessions() as session, session.begin():
        with pytest.raises(CatalogValidationError) as caught:
            await CatalogRepository(session, "a").create("configurations", {"code": "C"})
    assert str(caught.value) == "configuration 'C': max_tokens: required"


async def test_update_bumps_version_and_revision(database: Database) -> None:
    await seed(database)
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        row = await repo.update(
            "configurations", "DFLT", ConfigurationSpec(code="DFLT", max_tokens=99), 1
        )
        assert isinstance(row, Configuration)
        assert (row.version, row.max_tokens) == (2, 99)
        assert await repo.revision() == 4


async def test_update_without_change_keeps_the_version(database: Database) -> None:
    await seed(database)
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        spec = ConfigurationSpec(code="DFLT", max_tokens=64)
        row = await repo.update("configurations", "DFLT", spec, 1)
        assert row.version == 1
        assert await repo.revision() == 3


async def test_update_with_a_stale_version_is_refused(database: Database) -> None:
    await seed(database)
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        spec = ConfigurationSpec(code="DFLT", max_tokens=99)
        await repo.update("configurations", "DFLT", spec, 1)
        with pytest.raises(StaleVersionError, match="configuration 'DFLT' is at version 2, not 1"):
            await repo.update("configurations", "DFLT", spec.model_copy(update={"top_k": 3}), 1)


async def test_a_concurrent_update_is_caught_by_the_version_column(database: Database) -> None:
    await seed(database)
    async with database.sessions() as first, database.sessions() as second:
        async with first.begin():
            row = await CatalogRepository(first, "a").get("configurations", "DFLT")
        async with second.begin():
            await CatalogRepository(second, "a").update(
                "configurations", "DFLT", ConfigurationSpec(code="DFLT", max_tokens=2), 1
            )
        async with first.begin():
            repo = CatalogRepository(first, "a")
            # The first session still holds version 1 in memory; the UPDATE's
            # version check in the database refuses it.
            kind = catalog_kind("configurations")
            kind.apply(row, ConfigurationSpec(code="DFLT", max_tokens=3), lambda k, key: row)
            with pytest.raises(StaleVersionError, match="changed by someone else"):
                await repo._flush(kind, "DFLT")


async def test_update_cannot_change_the_key(database: Database) -> None:
    await seed(database)
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        with pytest.raises(CatalogValidationError, match="a key cannot be changed"):
            await repo.update("configurations", "DFLT", {"code": "OTHR", "max_tokens": 1}, 1)


async def test_delete(database: Database) -> None:
    await seed(database)
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        await repo.delete("configurations", "DFLT")
        with pytest.raises(NotFoundError):
            await repo.get("configurations", "DFLT")
        assert await repo.revision() == 4


async def test_delete_refuses_a_referenced_entity(database: Database) -> None:
    await seed(database)
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        with pytest.raises(ConflictError) as caught:
            await repo.delete("providers", "LOCL")
    assert str(caught.value) == "provider 'LOCL' cannot be deleted: used by model 'SMOL' (provider)"


async def test_delete_refuses_a_skill_another_depends_on(database: Database) -> None:
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        await repo.create("skills", {"code": "BASE", "prompt": "b"})
        await repo.create("skills", {"code": "TOP", "prompt": "t", "depends_on": ["BASE"]})
        with pytest.raises(ConflictError, match=r"used by skill 'TOP' \(depends_on\)"):
            await repo.delete("skills", "BASE")
        await repo.delete("skills", "TOP")
        await repo.delete("skills", "BASE")


async def test_skill_update_refuses_a_cycle(database: Database) -> None:
    async with database.sessions() as session, session.begin():
        repo = CatalogRepository(session, "a")
        await repo.create("skills", {"code": "A", "prompt": "a"})
        await repo.create("skills", {"code": "B", "prompt": "b", "depends_on": ["A"]})
        with pytest.raises(CatalogValidationError) as caught:
            await repo.update("skills", "A", {"code": "A", "prompt": "a", "depends_on": ["B"]}, 1)
    assert str(caught.value) == "skill 'A': depends_on[0]: dependency cycle A -> B -> A"


async def test_tenants_are_isolated(database: Database) -> None:
    await seed(database, "a")
    async with database.sessions() as session, session.begin():
        other = CatalogRepository(session, "b")
        with pytest.raises(NotFoundError, match="^provider 'LOCL' not found$"):
            await other.get("providers", "LOCL")
        assert await other.list("models") == []
        # References never cross tenants.
        with pytest.raises(CatalogValidationError, match="unknown provider 'LOCL'"):
            await other.create("models", {"code": "SMOL", "provider": "LOCL", "model_name": "s"})
        with pytest.raises(NotFoundError):
            await other.delete("providers", "LOCL")
        # The same key is free in another tenant.
        await other.create("providers", LOCL)
        assert await other.revision() == 1
    async with database.sessions() as session:
        assert len(await CatalogRepository(session, "a").list("providers")) == 1
        assert await CatalogRepository(session, "a").revision() == 3


async def test_unknown_kind_suggests_a_name(database: Database) -> None:
    async with database.sessions() as session:
        with pytest.raises(KeyError, match="did you mean 'actions'"):
            await CatalogRepository(session, "a").list("actoins")
