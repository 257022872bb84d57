"""Cold start: what importing pilothouse and running a first turn may load.

Each check runs in a fresh interpreter and looks at ``sys.modules``: these are
facts about imports, not timings, so they hold on a busy machine.
"""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from database_templates import migrated_sqlite
from pilothouse.catalog import import_catalog
from pilothouse.store import Database

# Loaded only on the paths that need them: catalog tooling (YAML, validation),
# migrations, the server, the CLI, MCP, vendor SDKs and optional extras.
NEVER_ON_A_TURN = [
    "alembic",
    "anthropic",
    "boto3",
    "botocore",
    "fastapi",
    "google.genai",
    "jsonschema",
    "llama_cpp",
    "mcp",
    "pilothouse.catalog._entity_rules",
    "pilothouse.catalog._entries",
    "pilothouse.catalog._importer",
    "pilothouse.catalog._knowledge_rules",
    "pilothouse.catalog._repository",
    "pilothouse.catalog._spec",
    "pilothouse.catalog._spec_errors",
    "pilothouse.catalog._validate",
    "pilothouse.catalog._yaml",
    "pilothouse.cli",
    "pilothouse.mcp._pool",
    "pilothouse.server",
    "pilothouse.tools._registry",
    "redis",
    "ruamel",
    "starlette",
    "tiktoken",
    "typer",
    "uvicorn",
]


def _run(code: str) -> str:
    """Run ``code`` in a new interpreter; return its last line of output."""
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def _loaded(code: str, modules: list[str]) -> list[str]:
    """Run ``code`` in a new interpreter; return which of ``modules`` it imported."""
    probe = (
        "\nimport json, sys\n"
        f"print(json.dumps(sorted(m for m in {modules!r} if m in sys.modules)))\n"
    )
    return json.loads(_run(code + probe))


# What a first turn does not use and so must not import (each costs import
# time and, for as long as the process lives, garbage-collector work): the
# facade's other halves and the sync facade, the store's read queries,
# lineage, gateway audit and API keys, SageMaker's prompt formats.
OFF_THE_FIRST_TURN = [
    "pilothouse._facade.catalog",
    "pilothouse._facade.events",
    "pilothouse._facade.history",
    "pilothouse._facade.keys",
    "pilothouse._facade.knowledge",
    "pilothouse._facade.memory",
    "pilothouse._facade.query",
    "pilothouse._sync",
    "pilothouse.providers._sagemaker_formats",
    "pilothouse.store._access",
    "pilothouse.store._gatewaycalls",
    "pilothouse.store._lineage",
    "pilothouse.store._queries",
]


def test_importing_the_api_loads_no_runtime_or_catalog_tooling() -> None:
    code = "import pilothouse.api, pilothouse.settings"
    off = [*NEVER_ON_A_TURN, *OFF_THE_FIRST_TURN, "pydantic_ai", "openai"]
    assert _loaded(code, [*off, "pilothouse.catalog._models"]) == []


def test_the_api_still_offers_its_lazily_imported_names() -> None:
    code = (
        "import pilothouse.api as api\n"
        "from pilothouse.api import QueryApi, SyncPilothouse\n"
        "assert QueryApi.__module__ == 'pilothouse._facade.query'\n"
        "assert set(api._LAZY) <= set(api.__all__)\n"
        "assert all(getattr(api, name) for name in api._LAZY)\n"
    )
    assert _loaded(code, ["pilothouse._sync"]) == ["pilothouse._sync"]


def test_importing_public_types_loads_no_database_layer() -> None:
    code = "import pilothouse.types"
    assert _loaded(code, ["sqlalchemy", "pilothouse.catalog._models", "pilothouse.store"]) == []


def test_the_cli_starts_without_the_facade_or_database_layer() -> None:
    # `pilothouse --help` and every command's start-up: each command imports
    # the facade (and SQLAlchemy) when it runs.
    code = "import pilothouse.cli"
    assert _loaded(code, ["pilothouse.api", "sqlalchemy", "pilothouse.store"]) == []


def test_importing_the_cli_loads_no_catalog_tooling_server_or_runtime() -> None:
    code = "import pilothouse.cli"
    cli = {"pilothouse.cli", "typer"}
    assert _loaded(code, [m for m in [*NEVER_ON_A_TURN, "pydantic_ai"] if m not in cli]) == []


def test_importing_catalog_enums_loads_no_database_layer() -> None:
    code = "from pilothouse.catalog import ProcessStatus"
    assert _loaded(code, ["sqlalchemy", "pydantic", "ruamel", "jsonschema"]) == []


def test_importing_tool_and_mcp_packages_loads_no_sdk() -> None:
    code = "import pilothouse.tools, pilothouse.mcp"
    assert _loaded(code, ["mcp", "mcp_types", "httpx", "jsonschema", "sqlalchemy"]) == []


CATALOG = """\
providers:
  - code: UP
    name: Upstream
    kind: openai-compatible
    base_url: http://127.0.0.1:9/v1
models:
  - code: M
    provider: UP
    model_name: m
configurations:
  - code: C
    name: C
    max_tokens: 64
actions:
  - code: GREET
    name: Greet
    model: M
    configuration: C
    prompt: Greet the user.
"""

FIRST_TURN = """
import asyncio
from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.testing import ScriptedModel

async def main() -> None:
    settings = Settings(database_url={url!r})
    async with Pilothouse(settings, model=ScriptedModel(["Hello."])) as ph:
        conversation = await ph.command.start_conversation(action="GREET")
        result = await ph.command.send_message(conversation.uuid, "Hi")
        assert result.output == "Hello.", result

asyncio.run(main())
"""


def _prepared(tmp_path: Path) -> str:
    """Migrate a SQLite store and import ``CATALOG`` into it; return its URL.

    The turn then runs in a fresh process, as an application's first turn
    after a restart does.
    """
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    (tmp_path / "catalog.yaml").write_text(CATALOG)

    async def prepare() -> None:
        database = Database(url)
        try:
            await import_catalog(database, "default", [tmp_path / "catalog.yaml"], user="t")
        finally:
            await database.dispose()

    anyio.run(prepare)
    return url


def test_a_first_turn_on_a_current_schema_loads_no_migration_or_tooling(tmp_path: Path) -> None:
    url = _prepared(tmp_path)
    assert _loaded(FIRST_TURN.format(url=url), [*NEVER_ON_A_TURN, *OFF_THE_FIRST_TURN]) == []


def test_importing_the_api_runs_no_full_collection_and_leaves_the_collector_on() -> None:
    # What the import builds lives as long as the process: walking the whole
    # heap in the middle of it frees nothing (pilothouse._collector). Before
    # the pause the import ran one full collection, 14 of the middle
    # generation and 159 of the youngest.
    code = (
        "import gc\n"
        "before = gc.get_stats()[2]['collections']\n"
        "import pilothouse.api\n"
        "print(gc.get_stats()[2]['collections'] - before, gc.isenabled())\n"
    )
    assert _run(code) == "0 True"


@pytest.mark.parametrize(("disabled", "expected"), [(False, "True"), (True, "False")])
def test_a_first_turn_leaves_the_collector_as_the_application_set_it(
    tmp_path: Path, disabled: bool, expected: str
) -> None:
    url = _prepared(tmp_path)
    start = "import gc\ngc.disable()\n" if disabled else "import gc\n"
    assert _run(start + FIRST_TURN.format(url=url) + "print(gc.isenabled())\n") == expected


FROZEN_AFTER_EACH_TURN = """
import asyncio, gc, logging
from pilothouse.api import Pilothouse
from pilothouse.settings import Settings
from pilothouse.testing import ScriptedModel

class Freezes(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.getMessage().startswith("heap frozen")

freezes = Freezes()
logging.getLogger("pilothouse.collector").addHandler(freezes)
logging.getLogger("pilothouse.collector").setLevel(logging.INFO)

async def main() -> None:
    settings = Settings(database_url={url!r}, freeze_heap={freeze!r})
    counts = [gc.get_freeze_count()]
    async with Pilothouse(settings, model=ScriptedModel(["Hello.", "Again."])) as ph:
        for text in ("Hi", "Hi again"):
            result = await ph.command.start_and_send(text, action="GREET")
            assert result.status.value == "CO", result
            counts.append(gc.get_freeze_count())
    print(*counts, freezes.count)

asyncio.run(main())
"""


def test_freeze_heap_freezes_once_after_the_first_turn(tmp_path: Path) -> None:
    # Settings.freeze_heap: the start-up heap (models, mappings, compiled
    # action) leaves the collector's walks after the first turn, and only
    # then: the second turn freezes nothing more.
    url = _prepared(tmp_path)
    counts = _run(FROZEN_AFTER_EACH_TURN.format(url=url, freeze=True))
    before, first, _, freezes = map(int, counts.split())
    assert before == 0
    assert first > 100_000, "the start-up heap was not frozen"
    assert freezes == 1


def test_the_library_freezes_nothing_by_default(tmp_path: Path) -> None:
    url = _prepared(tmp_path)
    assert _run(FROZEN_AFTER_EACH_TURN.format(url=url, freeze=False)) == "0 0 0 0"


READ_CONVERSATIONS = """
import asyncio
from pilothouse.api import Pilothouse
from pilothouse.settings import Settings

async def main() -> None:
    async with Pilothouse(Settings(database_url={url!r})) as ph:
        page = await ph.query.list_conversations()
        assert page.total == 0, page

asyncio.run(main())
"""


def test_reading_conversations_loads_no_catalog_models(tmp_path: Path) -> None:
    # `pilothouse conversations list` and the like: the query half loads the
    # catalog's ORM models on its first catalog read only.
    url = migrated_sqlite(tmp_path / "ph.db")
    modules = ["pilothouse.catalog._models", "alembic", "pydantic_ai"]
    assert _loaded(READ_CONVERSATIONS.format(url=url), modules) == []


def test_importing_knowledge_loads_no_numpy_model_or_store() -> None:
    code = "import pilothouse.knowledge"
    heavy = ["numpy", "onnxruntime", "tokenizers", "usearch", "asyncpg", "pypdf", "docx"]
    assert _loaded(code, [*heavy, "sqlalchemy"]) == []


@pytest.mark.parametrize(
    "package",
    [
        "pilothouse.catalog",
        "pilothouse.store",
        "pilothouse.tools",
        "pilothouse.mcp",
        "pilothouse.knowledge",
    ],
)
def test_every_lazily_imported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        value = getattr(module, name)
        lazy = module._MODULE_OF.get(name)
        if lazy is not None:
            assert value is getattr(importlib.import_module(f"{package}.{lazy}"), name), name
    assert set(module.__all__) <= set(dir(module))
    with pytest.raises(AttributeError, match="no attribute 'missing'"):
        _ = module.missing


FINALIZED_AT_EXIT = """
import os
from pilothouse.api import Pilothouse
from pilothouse.settings import Settings

Pilothouse(Settings(database_url={url!r}, fast_exit={fast!r}))

class Cycle:
    # os.write is bound now: at exit the module's globals may be gone.
    def __del__(self, write=os.write) -> None:
        write(1, b"finalized\\n")

cycle = Cycle()
cycle.me = cycle  # alive at exit, and only a collection can free it
print("ready", flush=True)
"""


def test_fast_exit_leaves_cycles_alive_at_exit_out_of_the_last_collections(
    tmp_path: Path,
) -> None:
    # Settings.fast_exit (the default): the interpreter's last collections
    # skip the heap, which is what makes the process end sooner; the cost,
    # shown here, is that a cycle alive at exit is not finalized.
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    assert _run(FINALIZED_AT_EXIT.format(url=url, fast=True)) == "ready"


def test_without_fast_exit_the_interpreter_finalizes_cycles_at_exit(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    assert _run(FINALIZED_AT_EXIT.format(url=url, fast=False)) == "finalized"


FLUSHED_AT_EXIT = """
from pilothouse.api import Pilothouse
from pilothouse.settings import Settings

Pilothouse(Settings(database_url={url!r}))
log = open({path!r}, "w")  # never closed: only this global holds it
log.write("written before exit")
"""


def test_fast_exit_still_flushes_a_file_only_a_module_global_holds(tmp_path: Path) -> None:
    # What reference counting frees at exit is still freed: the module's
    # globals are cleared, the file is closed and its buffer written.
    url = f"sqlite+aiosqlite:///{tmp_path / 'ph.db'}"
    path = tmp_path / "log.txt"
    result = subprocess.run(
        [sys.executable, "-c", FLUSHED_AT_EXIT.format(url=url, path=str(path))],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert path.read_text() == "written before exit"
