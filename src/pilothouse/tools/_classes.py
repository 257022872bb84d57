"""Tool classes named by a caller, gated by the operator's allow-list.

The CIB seven connector's ``toolClasses`` parameter names classes "whose
@Tool-annotated methods are registered with the agent"; each "must have a
public no-arg constructor" (seed 003). pilothouse's own marker is
:func:`pilothouse.tools.tool`, so the methods of a named class marked with
``@tool`` become the agent's tools; its other methods are not offered.

Importing a module runs its code, so a caller may only name classes the
operator allowed: ``Settings.invoke_tool_classes`` lists modules (allowing
every class in them and in their submodules) or single classes. A name
outside the list is refused before anything is imported.
"""

from __future__ import annotations

__all__ = ["DOTTED_NAME", "ToolClassAllowList", "tool_class_tools"]

import importlib
import inspect
import re
from collections.abc import Iterable
from dataclasses import dataclass

from pilothouse.tools._base import ExecutableTool, ToolError
from pilothouse.tools._python import marker_of, python_tool, service_functions

DOTTED_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
"""A Python module or class path: identifiers joined by dots."""


@dataclass(frozen=True)
class ToolClassAllowList:
    """The modules and classes callers may name as tool classes.

    Attributes:
        entries: dotted module or class names; empty allows nothing.
    """

    entries: tuple[str, ...] = ()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> ToolClassAllowList:
        """Check and keep the operator's entries.

        Args:
            entries: dotted module or class names.

        Returns:
            The allow-list.

        Raises:
            ValueError: an entry that is no dotted Python name, naming it.
        """
        checked: list[str] = []
        for entry in entries:
            name = entry.strip()
            if not DOTTED_NAME.match(name):
                raise ValueError(
                    f"invoke_tool_classes entry '{entry}' is not a dotted module or class name"
                )
            checked.append(name)
        return cls(tuple(checked))

    def allows(self, name: str) -> bool:
        """Whether ``name`` is an entry, or a class inside an entry's module tree.

        Args:
            name: a dotted class name.

        Returns:
            True when allowed. A prefix only counts at a dot, so an entry
            ``acme.tools`` does not allow ``acme.toolsmith.X``.
        """
        return any(name == entry or name.startswith(entry + ".") for entry in self.entries)


def tool_class_tools(name: str) -> list[ExecutableTool]:
    """Import a class, make an instance and return its ``@tool``-marked methods as tools.

    The allow-list is the caller's to check first: this imports.

    Args:
        name: ``package.module.Class``.

    Returns:
        One tool per marked method, in definition order.

    Raises:
        ToolError: the module cannot be imported, it has no such class, the
            class needs constructor arguments, or no method is marked.
    """
    module_name, _, class_name = name.rpartition(".")
    if not module_name:
        raise ToolError(f"'{name}' is not a class name: write package.module.Class")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolError(f"'{name}': cannot import '{module_name}': {exc}") from exc
    target = getattr(module, class_name, None)
    if not inspect.isclass(target):
        raise ToolError(f"'{name}': module '{module_name}' has no class '{class_name}'")
    # service_functions makes the instance (no-arg constructor) and lists its
    # public methods, only the marked ones when any is marked.
    functions = [func for func in service_functions(target) if marker_of(func) is not None]
    if not functions:
        raise ToolError(
            f"'{name}' has no method marked with @tool (from pilothouse.tools import tool); "
            "only marked methods become tools"
        )
    return [python_tool(func) for func in functions]
