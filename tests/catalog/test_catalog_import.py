"""Import, export and round trip of the catalog, on SQLite and PostgreSQL."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, inspect, select
from sqlalchemy.ext.asyncio import AsyncSession

from pilothouse.catalog import (
    KINDS,
    Action,
    ActionSchema,
    ActionSkill,
    Configuration,
    ConfigurationSpec,
    ParsedCatalog,
    Persona,
    SkillDependency,
    _importer,
    export_catalog,
    import_catalog,
)
from pilothouse.catalog._repository import read_revision
from pilothouse.catalog._validate import Entry
from pilothouse.errors import CatalogValidationError, ConflictError
from pilothouse.store import Base, Database

pytestmark = pytest.mark.anyio

EXAMPLES = Path(__file__).parents[2] / "examples" / "catalog"


def write(tmp_path: Path, text: str, name: str = "extra.yaml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text).lstrip("\n"))
    return path


async def export(database: Database, tenant: str = "default") -> str:
    async with database.sessions() as session:
        return await export_catalog(session, tenant)


async def snapshot(database: Database) -> dict[str, Any]:
    """Everything an import could change: export text, rows, versions, links, revision."""
    async with database.sessions() as session:
        rows: dict[str, Any] = {}
        for kind in KINDS.values():
            found = await session.scalars(select(kind.model))
            rows[kind.name] = sorted(
                (r.tenant, r.key, r.version, r.updated_at, r.updated_by) for r in found
            )
        tables: dict[str, int] = {}
        for table in Base.metadata.sorted_tables:
            count = await session.scalar(select(func.count()).select_from(table))
            tables[table.name] = int(count or 0)
        return {
            "export": await export_catalog(session, "default"),
            "rows": rows,
            "tables": tables,
            "revision": await read_revision(session, "default"),
        }


async def test_import_creates_every_example_entity(database: Database) -> None:
    summary = await import_catalog(database, "default", [EXAMPLES], user="alice")
    assert summary.changed
    assert summary.revision == 1
    assert {k: c.created for k, c in summary.counts.items()}["actions"] == 4
    async with database.sessions() as session:
        action = (await session.scalars(select(Action).where(Action.code == "COMPETITORS"))).one()
        assert action.updated_by == "alice"
        assert action.model.code == "QWEN05"
        assert action.configuration.code == "PREC"
        assert [s.direction.value for s in action.schemas] == ["O"]
        assert action.schemas[0].json_schema["required"] == ["name", "website", "reason"]
        dependency = (await session.scalars(select(SkillDependency))).one()
        assert dependency.depends_on.code == "MKTMAP"


async def test_importing_twice_changes_nothing(database: Database) -> None:
    await import_catalog(database, "default", [EXAMPLES])
    before = await snapshot(database)
    summary = await import_catalog(database, "default", [EXAMPLES])
    assert not summary.changed
    assert all(c.created == c.updated == 0 for c in summary.counts.values())
    assert summary.counts["agents"].unchanged == 2
    assert await snapshot(database) == before


async def test_a_changed_field_updates_one_row_and_bumps_its_version(
    database: Database, tmp_path: Path
) -> None:
    await import_catalog(database, "default", [EXAMPLES])
    extra = write(
        tmp_path,
        """
        personas:
          - code: EDITOR
            name: Concise editor
            type: EDIT
            prompt: You are a very concise editor.
        """,
    )
    summary = await import_catalog(database, "default", [extra])
    assert summary.counts["personas"].updated == 1
    assert summary.revision == 2
    async with database.sessions() as session:
        persona = (await session.scalars(select(Persona))).one()
        assert persona.version == 2
        assert persona.prompt == "You are a very concise editor."


async def test_link_rows_are_replaced_to_match_the_file(database: Database, tmp_path: Path) -> None:
    await import_catalog(database, "default", [EXAMPLES])
    extra = write(
        tmp_path,
        """
        actions:
          - code: SUMBRAND
            name: Summarize a brand document
            goal_description: A short summary of a brand document.
            type: SUMM
            model: SMOLLM2
            configuration: DFLT
            persona: EDITOR
            memory_strategy: W20
            prompt: "Summarize this brand document:\\n{document}"
            skills: [MKTMAP, BRVOICE]
            schemas:
              input:
                schema: {type: object}
        """,
    )
    summary = await import_catalog(database, "default", [extra])
    assert summary.counts["actions"].updated == 1
    async with database.sessions() as session:
        action = (await session.scalars(select(Action).where(Action.code == "SUMBRAND"))).one()
        assert [s.skill.code for s in action.skills] == ["MKTMAP", "BRVOICE"]
        assert action.version == 2  # a change to link rows alone bumps the action
        assert len(action.schemas) == 1
    # Back to the file's exact state: the extra link and schema go away.
    await import_catalog(database, "default", [EXAMPLES])
    async with database.sessions() as session:
        links = list(await session.scalars(select(ActionSkill)))
        # CAMPAIGN and TAGLINE each link BRVOICE.
        assert [(link.skill.code, link.position) for link in links] == [("BRVOICE", 0)] * 2
        schemas = list(await session.scalars(select(ActionSchema)))
        assert [s.direction.value for s in schemas] == ["O"]


async def test_a_failed_validation_writes_nothing(database: Database, tmp_path: Path) -> None:
    await import_catalog(database, "default", [EXAMPLES])
    before = await snapshot(database)
    bad = write(
        tmp_path,
        """
        personas:
          - code: EDITOR
            prompt: changed
        configurations:
          - code: NEW
            max_tokens: 0
        """,
    )
    with pytest.raises(CatalogValidationError) as caught:
        await import_catalog(database, "default", [bad])
    assert [i.rule for i in caught.value.issues] == ["must be at least 1 (got 0)"]
    assert await snapshot(database) == before


async def test_a_failure_only_the_database_detects_rolls_back_everything(
    database: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    await import_catalog(database, "default", [EXAMPLES])
    before = await snapshot(database)
    changes = write(
        tmp_path,
        """
        personas:
          - code: EDITOR
            prompt: changed
        configurations:
          - code: FRSH
            max_tokens: 5
        """,
    )
    real = _importer.validate_paths

    def sneak_a_broken_row_past_validation(*args: Any, **kwargs: Any) -> Any:
        parsed, issues = real(*args, **kwargs)
        assert isinstance(parsed, ParsedCatalog)
        broken = ConfigurationSpec.model_construct(code="BROKEN", max_tokens=None)
        parsed.add(Entry(KINDS["configurations"], broken))
        return parsed, issues

    monkeypatch.setattr(_importer, "validate_paths", sneak_a_broken_row_past_validation)
    with pytest.raises(ConflictError, match="the database refused the import, nothing was written"):
        await import_catalog(database, "default", [changes])
    assert await snapshot(database) == before


async def test_export_is_deterministic_and_round_trips_byte_for_byte(
    database: Database, tmp_path: Path
) -> None:
    await import_catalog(database, "default", [EXAMPLES])
    first = await export(database)
    exported = write(tmp_path, first, "exported.yaml")
    # Another tenant of the same database is an empty catalog.
    await import_catalog(database, "fresh", [exported])
    assert await export(database, "fresh") == first
    async with database.sessions() as session:
        for kind in KINDS.values():
            mine = await _rows(session, kind.model, "default")
            theirs = await _rows(session, kind.model, "fresh")
            assert mine.keys() == theirs.keys()
            for key, row in mine.items():
                assert kind.to_spec(row) == kind.to_spec(theirs[key])
                assert _columns(row) == _columns(theirs[key]), (kind.name, key)


async def test_export_of_one_kind(database: Database) -> None:
    await import_catalog(database, "default", [EXAMPLES])
    async with database.sessions() as session:
        text = await export_catalog(session, "default", ["configurations"])
    assert text.startswith("configurations:\n  - code: DFLT\n")
    assert "providers" not in text


async def test_export_of_an_empty_catalog_is_empty(database: Database) -> None:
    assert await export(database) == ""


async def _rows(session: AsyncSession, model: Any, tenant: str) -> dict[str, Any]:
    return {r.key: r for r in await session.scalars(select(model).where(model.tenant == tenant))}


def _columns(row: Any) -> dict[str, Any]:
    # Everything but what legitimately differs between two tenants' copies.
    skip = {"id", "tenant", "updated_at"}
    return {
        c.key: getattr(row, c.key)
        for c in inspect(row).mapper.column_attrs
        if c.key not in skip and not c.key.endswith("_id")
    }


async def test_updated_rows_keep_their_identity(database: Database, tmp_path: Path) -> None:
    await import_catalog(database, "default", [EXAMPLES])
    async with database.sessions() as session:
        before = (
            await session.scalars(select(Configuration.id).order_by(Configuration.code))
        ).all()
    extra = write(tmp_path, "configurations:\n  - code: DFLT\n    max_tokens: 100\n")
    await import_catalog(database, "default", [extra])
    async with database.sessions() as session:
        after = (await session.scalars(select(Configuration.id).order_by(Configuration.code))).all()
        default = (
            await session.scalars(select(Configuration).where(Configuration.code == "DFLT"))
        ).one()
    assert before == after
    # The file is the whole truth about DFLT: fields it leaves out fall back.
    assert (default.max_tokens, default.temperature, default.retry_delay) == (100, None, 1.0)
