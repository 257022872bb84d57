"""Reading catalog YAML with line numbers, and writing it back deterministically.

Files are read with ruamel.yaml's round-trip loader because it remembers the
line of every key and list item, which lets each validation error point at
the offending field's own line. Values are then turned into plain Python
before pydantic sees them.
"""

from __future__ import annotations

__all__ = ["catalog_files", "dump_yaml", "line_of", "load_yaml", "to_plain"]

import io
import json
from collections.abc import Sequence
from datetime import date, datetime
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import Any, cast

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.constructor import DuplicateKeyError, RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.scalarstring import (
    DoubleQuotedScalarString,
    LiteralScalarString,
    SingleQuotedScalarString,
)
from ruamel.yaml.scanner import RoundTripScanner, ScannerError

from pilothouse.errors import ValidationIssue
from pilothouse.store._text import input_problem, read_int

_SUFFIXES = (".yaml", ".yml")


def _issue(file: str, line: int | None, field: str, rule: str) -> ValidationIssue:
    return ValidationIssue("catalog", None, field, rule, file=file, line=line)


def catalog_files(paths: Sequence[Path]) -> tuple[list[Path], list[ValidationIssue]]:
    """Expand files and folders into the catalog files to read.

    A folder contributes every ``*.yaml``/``*.yml`` below it, recursively,
    sorted by path so the merge order never depends on the file system.

    Args:
        paths: files or folders, as the user named them.

    Returns:
        The files, and an issue for each path that does not exist.
    """
    files: list[Path] = []
    issues: list[ValidationIssue] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.suffix in _SUFFIXES and p.is_file())
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            issues.append(_issue(str(path), None, "path", "no such file or folder"))
    return files, issues


# Bounds on what one catalog file may cost to read: the largest real catalogs
# are a few hundred kilobytes and a few thousand values.
MAX_DOCUMENT_CHARS = 4_000_000
MAX_EXPANDED_NODES = 200_000


class _Constructor(RoundTripConstructor):
    """ruamel's round-trip constructor, reading a decimal integer of any length.

    Python refuses to convert one of more than 4,300 digits (a bare
    ``ValueError``); :func:`read_int` stands it in, and :func:`_number_issue`
    names its field and line.
    """

    def construct_yaml_int(self, node: Any) -> Any:
        """Construct an int node; a very long decimal one through :func:`read_int`."""
        text = str(node.value).replace("_", "")
        if text.lstrip("+-").isdigit() and len(text) > 4_000:
            return read_int(text)
        base: Any = super()  # ruamel ships partial type hints
        return base.construct_yaml_int(node)


# Real catalogs nest flow collections a few levels deep.
MAX_FLOW_DEPTH = 64


class _TooDeep(ScannerError):
    """Flow collections nest past :data:`MAX_FLOW_DEPTH`."""


class _Scanner(RoundTripScanner):
    """ruamel's round-trip scanner, refusing flow collections nested too deep.

    It keeps a possible simple key per open ``[`` or ``{`` and walks them all
    at every token, so its time grows with the square of the nesting: a few
    kilobytes of brackets cost seconds of the server's CPU before the parser
    reached its recursion limit. Counting the open levels where the scanner
    opens them stops such a document at the first level past the bound.
    """

    def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:
        """Open a flow collection, or refuse one nested past :data:`MAX_FLOW_DEPTH`."""
        state: Any = self  # ruamel ships partial type hints
        if len(state.flow_context) >= MAX_FLOW_DEPTH:
            raise _TooDeep(
                None,
                None,
                f"flow collections ([...] and {{...}}) nest more than {MAX_FLOW_DEPTH} deep; "
                "write the deeper levels in block style or nest them less",
                state.reader.get_mark(),
            )
        base: Any = super()
        base.fetch_flow_collection_start(TokenClass, to_push)


_constructor_class: Any = _Constructor  # ruamel ships partial type hints
_constructor_class.add_constructor("tag:yaml.org,2002:int", _Constructor.construct_yaml_int)


def _number_issue(file: str, document: Any) -> ValidationIssue | None:
    """The first number the input rules refuse (beyond 64 bits, NaN, infinite), located."""
    pending: list[tuple[Any, tuple[str | int, ...]]] = [(document, ())]
    while pending:
        node, location = pending.pop()
        if isinstance(node, dict):
            mapping = cast(dict[Any, Any], node)
            for key in mapping:
                if isinstance(key, int | float) and input_problem(key) is not None:
                    return _issue(
                        file,
                        line_of(document, location),
                        "yaml (a key)",
                        "a key " + str(input_problem(key)),
                    )
            pending.extend((v, (*location, str(k))) for k, v in reversed(list(mapping.items())))
        elif isinstance(node, list):
            items = cast(list[Any], node)
            pending.extend((v, (*location, i)) for i, v in reversed(list(enumerate(items))))
        elif isinstance(node, int | float) and not isinstance(node, bool):
            problem = input_problem(node)
            if problem is not None:
                field = "".join(
                    f"[{part}]" if isinstance(part, int) else (f".{part}" if i else part)
                    for i, part in enumerate(location)
                )
                return _issue(file, line_of(document, location), field or "yaml", problem)
    return None


def load_yaml(path: Path) -> tuple[Any, ValidationIssue | None]:
    """Parse one YAML file, keeping line information.

    Args:
        path: the file.

    Returns:
        The round-trip document (``None`` for an empty file), or the one issue
        locating the syntax error.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return None, _issue(str(path), None, "file", f"cannot be read ({exc.__class__.__name__})")
    if len(text) > MAX_DOCUMENT_CHARS:
        return None, _issue(
            str(path),
            None,
            "yaml",
            f"the document has {len(text):,} characters, more than the "
            f"{MAX_DOCUMENT_CHARS:,} a catalog file may have; split it into several files",
        )
    try:
        loader: Any = YAML(typ="rt")  # ruamel ships partial type hints
        loader.Constructor = _Constructor
        loader.Scanner = _Scanner
        document = loader.load(text)
    except _TooDeep as exc:
        deep: Any = exc
        problem = str(deep.problem)
        if _is_json(text):
            # JSON has only flow collections: there is no block style to use.
            problem = f"arrays and objects nest more than {MAX_FLOW_DEPTH} deep; nest them less"
        return None, _issue(str(path), _mark_line(exc), "yaml", problem)
    except DuplicateKeyError as exc:
        # ruamel's own message quotes both values, which may be a secret.
        return None, _issue(str(path), _mark_line(exc), "yaml", "a mapping key is repeated")
    except MarkedYAMLError as exc:
        error: Any = exc
        problem = str(error.problem or error.context or "invalid YAML")
        return None, _issue(str(path), _mark_line(exc), "yaml", problem)
    except YAMLError as exc:
        return None, _issue(str(path), None, "yaml", str(exc).splitlines()[0])
    except RecursionError:
        return None, _issue(str(path), None, "yaml", "the document nests too deeply")
    problem = _expansion_problem(document)
    if problem is not None:
        return None, _issue(str(path), None, "yaml", problem)
    number = _number_issue(str(path), document)
    if number is not None:
        return None, number
    return document, None


def _is_json(text: str) -> bool:
    """Whether ``text`` is a JSON document (a JSON body reaches the reader as text)."""
    try:
        json.loads(text)
    except RecursionError:
        # Nested past the interpreter's limit, it is still JSON.
        return text.lstrip()[:1] in ("{", "[")
    except ValueError:
        return False
    return True


def _expansion_problem(document: Any) -> str | None:
    """Why the document's aliases expand too far (an alias bomb), or None.

    The loader shares one object per anchor, so parsing is cheap; whatever
    walks the document afterwards (validation, conversion) sees every alias
    expanded. The expanded size is counted once per shared node.
    """
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def size(node: Any) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise _Recursive
        children: list[Any]
        if isinstance(node, dict):
            mapping = cast("dict[Any, Any]", node)
            children = [*mapping.keys(), *mapping.values()]
        elif isinstance(node, list):
            children = list(cast("list[Any]", node))
        else:
            return 1
        open_nodes.add(key)
        total = 1
        for child in children:
            total += size(child)
            if total > MAX_EXPANDED_NODES:
                break
        open_nodes.discard(key)
        sizes[key] = total
        return total

    try:
        total = size(document)
    except _Recursive:
        return "an alias refers to a node that contains it (a recursive alias)"
    except RecursionError:
        return "the document nests too deeply"
    if total > MAX_EXPANDED_NODES:
        return (
            f"its aliases expand to more than {MAX_EXPANDED_NODES:,} values (an alias bomb?); "
            "write the repeated parts out or use fewer nested aliases"
        )
    return None


class _Recursive(Exception):
    """A node reached again while it is being counted."""


def _mark_line(exc: Any) -> int | None:
    mark = exc.problem_mark or exc.context_mark
    return None if mark is None else int(mark.line) + 1


def line_of(node: Any, location: Sequence[str | int]) -> int | None:
    """Find the 1-based line of the deepest part of ``location`` inside ``node``.

    Args:
        node: a round-trip mapping or sequence.
        location: keys and indexes, e.g. ``("schemas", "output", "schema")``.

    Returns:
        The line of the innermost key or item found, else of ``node`` itself.
    """
    line: int | None = None
    current: Any = node  # ruamel's line info (``.lc``) is untyped
    if isinstance(current, CommentedMap | CommentedSeq):
        line = int(_lc(current).line) + 1
    for part in location:
        if isinstance(current, CommentedMap) and part in current:
            line = int(_lc(current).key(part)[0]) + 1
            current = _child(current, part)
        elif (
            isinstance(current, CommentedSeq) and isinstance(part, int) and 0 <= part < len(current)
        ):
            line = int(_lc(current).item(part)[0]) + 1
            current = _child(current, part)
        else:
            break
    return line


def _lc(node: Any) -> Any:
    return node.lc


def _child(node: Any, part: str | int) -> Any:
    return node[part]


def to_plain(node: Any) -> Any:
    """Turn a round-trip document into plain ``dict``/``list``/scalars.

    Dates become ISO strings so free-form JSON settings stay JSON; typed date
    fields parse them back.
    """
    if isinstance(node, dict):
        mapping = cast(dict[Any, Any], node)
        return {str(k): to_plain(v) for k, v in mapping.items()}
    if isinstance(node, list):
        return [to_plain(v) for v in cast(list[Any], node)]
    if isinstance(node, bool):
        return bool(node)
    if isinstance(node, str):
        return str(node)
    if isinstance(node, int):
        # ruamel's ScalarBoolean is an int subclass; keep it a bool.
        return bool(node) if type(node).__name__ == "ScalarBoolean" else int(node)
    if isinstance(node, float):
        return float(node)
    if isinstance(node, datetime | date):
        return node.isoformat()
    return node


def _literal_ok(text: str) -> bool:
    # A literal block cannot carry trailing spaces or control characters
    # faithfully; such text stays a quoted scalar.
    return "\n" in text and all(
        line == line.rstrip() and (line.isprintable() or line == "") for line in text.split("\n")
    )


def _is_flow_scalar(value: Any) -> bool:
    if isinstance(value, bool | int | float):
        return True
    return isinstance(value, str) and value.isprintable() and 0 < len(value) <= 40


_INDICATORS = frozenset("?:-,[]{}#&*!|>'\"%@`")


def _yaml_value(value: Any) -> Any:
    if isinstance(value, dict):
        mapping = CommentedMap()
        for k, v in cast(dict[str, Any], value).items():
            mapping[k] = _yaml_value(v)
        return mapping
    if isinstance(value, list):
        items = cast(list[Any], value)
        sequence: Any = CommentedSeq([_yaml_value(v) for v in items])
        if items and all(_is_flow_scalar(v) for v in items) and len(repr(items)) <= 60:
            sequence.fa.set_flow_style()
        return sequence
    if isinstance(value, StrEnum):
        return value.value
    if isinstance(value, Decimal):
        return int(value) if value == value.to_integral_value() else float(value)
    if isinstance(value, str) and _literal_ok(value):
        return LiteralScalarString(value)
    if isinstance(value, str) and not value.isprintable():
        # Double quotes escape line separators and control characters that
        # a plain scalar would carry raw (and a reader would then fold).
        return DoubleQuotedScalarString(value)
    if isinstance(value, str) and value[:1] in _INDICATORS:
        # ruamel leaves "?0" or ": x" plain inside flow sequences, where they
        # read back as mapping keys; quoting keeps them strings.
        return SingleQuotedScalarString(value)
    return value


def dump_yaml(document: dict[str, Any]) -> str:
    """Write a catalog document as YAML, one blank line between kinds.

    Args:
        document: kind names to lists of plain entity mappings.

    Returns:
        The YAML text; the same document always gives the same text.
    """
    yaml: Any = YAML(typ="rt")
    yaml.width = 4096
    yaml.indent(mapping=2, sequence=4, offset=2)
    buffer = io.StringIO()
    yaml.dump(_yaml_value(document), buffer)
    lines = buffer.getvalue().splitlines(keepends=True)
    out: list[str] = []
    for index, line in enumerate(lines):
        if index and line[:1] not in (" ", "-", "\n", ""):
            out.append("\n")
        out.append(line)
    return "".join(out)
