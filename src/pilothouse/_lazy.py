"""Names a package exports but imports only on first use (PEP 562).

A package lists, per private module, the names it re-exports; importing the
package then loads none of those modules, and each name is imported and
cached in the package's namespace the first time it is read.
"""

from __future__ import annotations

__all__ = ["lazy_exports"]

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, modules: Mapping[str, tuple[str, ...]], namespace: dict[str, Any]
) -> tuple[dict[str, str], Callable[[str], Any], Callable[[], list[str]]]:
    """Build a package's ``_MODULE_OF``, ``__getattr__`` and ``__dir__``.

    Args:
        package: the package's ``__name__``.
        modules: private module name -> the names it provides.
        namespace: the package's ``globals()``, where imported names are cached.

    Returns:
        The name -> module map, and the two module-level hooks.
    """
    module_of = {name: module for module, names in modules.items() for name in names}

    def getattr_(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(namespace.get("__all__", ())))

    return module_of, getattr_, dir_
