"""Facts about the code's structure, read from the source with ``ast`` and regexes.

- Every face (``server/``, ``cli/``) enters pilothouse through one door: it
  imports ``pilothouse.api``, ``pilothouse.types``, ``pilothouse.errors``,
  ``pilothouse.settings`` and its own package, nothing else of pilothouse
  (function-level and ``TYPE_CHECKING`` imports included).
- The docs and the README show public imports only.
- Every third-party module the package imports is declared in pyproject.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "pilothouse"
DOOR = {"pilothouse.api", "pilothouse.types", "pilothouse.errors", "pilothouse.settings"}
FACES = ("server", "cli", "events")
# A face may use another face's public package: `pilothouse worker` runs the
# events package's Worker, `pilothouse serve` checks the server's
# ServerSettings before uvicorn starts. Their private modules stay out of reach.
PUBLIC_FACES = {"cli": ("pilothouse.events", "pilothouse.server")}


def imported_modules(source: str) -> list[tuple[int, str]]:
    """Every module an import statement anywhere in ``source`` names (line, module).

    ``from x import y`` names ``x`` and, when ``x.y`` is a module, ``x.y``:
    both are listed, so ``from pilothouse.store import _writer`` is caught.
    """
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module))
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def door_violations(source: str, face: str) -> list[str]:
    """The imports of a face's module that go around the door."""
    own = f"pilothouse.{face}"
    wrong: list[str] = []
    for line, module in imported_modules(source):
        if module != "pilothouse" and not module.startswith("pilothouse."):
            continue
        # `from pilothouse.api import Pilothouse` also lists pilothouse.api.Pilothouse.
        allowed = any(module == m or module.startswith(f"{m}.") for m in (*DOOR, own))
        allowed = allowed or any(
            module == m or (module.startswith(f"{m}.") and not module[len(m) + 1 :].startswith("_"))
            for m in PUBLIC_FACES.get(face, ())
        )
        if not allowed:
            wrong.append(f"line {line}: {module}")
    return wrong


def test_the_door_check_catches_what_it_must() -> None:
    # The check itself, on imports a face must not make.
    source = """
from pilothouse.api import Pilothouse
from pilothouse.server._deps import Facade
from pilothouse.store import _writer

def later():
    from pilothouse.runtime._hitl import AnswerError
    import pilothouse.catalog._models

if TYPE_CHECKING:
    from pilothouse.store import Database
"""
    assert door_violations(source, "server") == [
        "line 4: pilothouse.store",
        "line 4: pilothouse.store._writer",
        "line 7: pilothouse.runtime._hitl",
        "line 7: pilothouse.runtime._hitl.AnswerError",
        "line 8: pilothouse.catalog._models",
        "line 11: pilothouse.store",
        "line 11: pilothouse.store.Database",
    ]


@pytest.mark.parametrize("face", FACES)
def test_faces_import_only_the_door_and_their_own_package(face: str) -> None:
    modules = sorted((SRC / face).rglob("*.py"))
    assert modules, f"no modules under {face}/"
    wrong = {
        str(path.relative_to(ROOT)): found
        for path in modules
        if (found := door_violations(path.read_text(encoding="utf-8"), face))
    }
    assert wrong == {}


# `from pilothouse.x._y import z`, `import pilothouse._x`, or a private name
# imported from a public module (`from pilothouse.x import _y`).
_PRIVATE_IMPORT = re.compile(
    r"^\s*(?:from\s+pilothouse(?:\.\w+)*\._\w+|import\s+pilothouse(?:\.\w+)*\._\w+"
    r"|from\s+pilothouse(?:\.\w+)*\s+import\s+(?:\(\s*)?(?:[^\n#]*,\s*)?_\w+)",
    re.MULTILINE,
)


def test_private_import_pattern() -> None:
    assert _PRIVATE_IMPORT.search("from pilothouse.runtime._advisors import Next")
    assert _PRIVATE_IMPORT.search("import pilothouse.store._types")
    assert _PRIVATE_IMPORT.search("from pilothouse.store import Database, _writer")
    assert not _PRIVATE_IMPORT.search("from pilothouse.advisors import AdvisedCall, Next")
    assert not _PRIVATE_IMPORT.search("from pilothouse.types import ProcessStatus")


def test_docs_show_only_public_imports() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    wrong = {
        str(page.relative_to(ROOT)): [m.group(0).strip() for m in found]
        for page in pages
        if (found := list(_PRIVATE_IMPORT.finditer(page.read_text(encoding="utf-8"))))
    }
    assert wrong == {}


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def test_every_imported_distribution_is_declared() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    requirements = [
        *project["dependencies"],
        *(r for extra in project["optional-dependencies"].values() for r in extra),
    ]
    declared = {_normalized(re.split(r"[\[<>=!~; ]", r, maxsplit=1)[0]) for r in requirements}
    distributions = packages_distributions()
    undeclared: dict[str, list[str]] = {}
    for path in sorted(SRC.rglob("*.py")):
        for _, module in imported_modules(path.read_text(encoding="utf-8")):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top == "pilothouse" or top in undeclared:
                continue
            owners = {_normalized(d) for d in distributions.get(top, [])}
            if not owners & declared:
                undeclared[top] = sorted(owners) or ["(not installed)"]
    assert undeclared == {}
