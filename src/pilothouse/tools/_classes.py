"""Tool classes named by a caller, gated by the operator's allow-list.

The CIB seven connector's ``toolClasses`` parameter names classes "whose
@Tool-annotated methods are registered with the agent"; each "must have a
public no-arg constructor" (seed 003). pilothouse's own marker is
:func:`pilothouse.tools.tool`, so the methods of a named class marked with
``@tool`` become the agent's tools; its other methods are not offered.

Importing a module runs its code, so a caller may only name classes the
operator allowed: ``Settings.invoke_tool_classes`` lists modules (allowing
every class defined in them and in their submodules) or single classes. The
names are resolved by the catalog's code resolver (``tools/_code.py``) under
that list, so a name outside it is refused before anything is imported.
"""

from __future__ import annotations

__all__ = ["DOTTED_NAME", "tool_class_tools"]

import inspect
import re

from pilothouse.tools._base import ExecutableTool, ToolError
from pilothouse.tools._code import CodePolicy
from pilothouse.tools._python import marker_of, python_tool, service_functions

DOTTED_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
"""A Python module or class path: identifiers joined by dots."""


def tool_class_tools(name: str, policy: CodePolicy) -> list[ExecutableTool]:
    """Import a class the policy grants, make an instance and return its ``@tool`` methods as tools.

    Args:
        name: ``package.module.Class``.
        policy: the operator's grants (``Settings.invoke_tool_classes``); a
            name outside them is refused before anything is imported.

    Returns:
        One tool per marked method, in definition order.

    Raises:
        CodeNotGrantedError: the policy does not grant the class.
        ToolError: the module cannot be imported, it has no such class, the
            class needs constructor arguments, or no method is marked.
    """
    module_name, _, class_name = name.rpartition(".")
    if not module_name:
        raise ToolError(f"'{name}' is not a class name: write package.module.Class")
    target = policy.resolve(f"{module_name}:{class_name}")
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
