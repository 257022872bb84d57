"""Server code a catalog may name: the one resolver of ``package.module:name`` references.

A few fields name Python code by its import path: a python tool's
``implementation`` (a function, or a service class), an advisor's
``implementation``, an OpenAPI gateway's ``settings.gateway.token_exchange``
hook, and ``/v1/invoke``'s ``toolClasses``. Naming code imports its module
(whose top-level code runs) and calls what it holds, inside the server's
process, with its files, secrets and network. Every such name is resolved
here, under a :class:`CodePolicy`:

- **open**, in the operator's own process (the CLI, an application that
  embeds :class:`~pilothouse.api.Pilothouse`): any importable name, as the
  operator wrote it;
- **granted**, where tenants write the catalog (the HTTP service, and the
  ``pilothouse events``/``worker`` processes that run their tools): only
  what the operator listed in a setting. An entry without a colon
  (``acme.tools``) grants the public names *defined* in that module and its
  submodules, never what they import (``acme.tools:os.system`` is refused);
  an entry ``acme.tools:lookup`` grants that one name. A name outside the
  list is refused before anything is imported.

The same check runs when a tenant writes the field (a validation issue
naming the field and the setting) and again when the name is resolved, so a
row written before the policy existed is refused too, never run.
"""

from __future__ import annotations

__all__ = [
    "BUILTIN_ADVISORS",
    "CATALOG_CODE_SETTING",
    "CodeNotGrantedError",
    "CodePolicy",
    "catalog_code_refusals",
    "check_code_entry",
    "resolve_reference",
]

import importlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any, cast

from pilothouse.tools._base import ToolError

CATALOG_CODE_SETTING = "PILOTHOUSE_CATALOG_CODE"
"""The operator's grant of code to tenants' catalogs (``Settings.catalog_code``)."""

BUILTIN_ADVISORS = (
    "pilothouse.advisors:LoggingAdvisor",
    "pilothouse.advisors:CacheAdvisor",
    "pilothouse.advisors:ContentFilterAdvisor",
)
"""The built-in advisors by reference: granted to every catalog (by name they import nothing)."""

_DOC = 'docs/security.md, "Server code is the operator\'s"'
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_ENTRY = re.compile(rf"^{_DOTTED}(?::{_DOTTED})?$")


def check_code_entry(entry: str) -> str:
    """Check one allow-list entry: ``package.module`` or ``package.module:name``.

    Args:
        entry: the entry as the operator wrote it.

    Returns:
        The entry without surrounding spaces.

    Raises:
        ValueError: it is neither form, naming it.
    """
    text = entry.strip()
    if not _ENTRY.match(text):
        raise ValueError(
            f"entry '{entry}' is neither a module ('package.module') "
            "nor a callable ('package.module:name')"
        )
    return text


class CodeNotGrantedError(ToolError):
    """A name the operator has not granted to tenants' catalogs."""


def resolve_reference(reference: str) -> object:
    """Import what ``package.module`` or ``package.module:attr.path`` names, without a policy.

    For the operator's own code only (``ToolRegistry.register``, an open
    :class:`CodePolicy`); a tenant's name goes through :meth:`CodePolicy.resolve`.

    Args:
        reference: a module path, optionally followed by ``:`` and an
            attribute path inside it.

    Returns:
        The module, or the attribute it names.

    Raises:
        ToolError: the reference is malformed, the module cannot be imported
            or it lacks the attribute.
    """
    module_name, attribute = _split(reference)
    return _walk(reference, _import(reference, module_name), attribute, tree=None)


def _split(reference: str) -> tuple[str, str]:
    module_name, colon, attribute = reference.partition(":")
    if not module_name or (colon and not attribute):
        raise ToolError(
            f"reference '{reference}' is malformed: "
            "expected 'package.module' or 'package.module:name'"
        )
    return module_name, attribute


def _import(reference: str, module_name: str) -> object:
    try:
        return importlib.import_module(module_name)
    except ImportError as exc:
        raise ToolError(f"reference '{reference}': cannot import '{module_name}': {exc}") from exc


def _beneath(name: str, entry: str) -> bool:
    return name == entry or name.startswith(entry + ".")


def _walk(reference: str, target: object, attribute: str, *, tree: str | None) -> object:
    """Follow the attribute path; under a module grant, stay inside the granted modules."""
    module_name = reference.partition(":")[0]
    for part in attribute.split(".") if attribute else ():
        try:
            target = getattr(target, part)
        except AttributeError:
            raise ToolError(
                f"reference '{reference}': '{module_name}' has no attribute '{attribute}'"
            ) from None
        if tree is not None and isinstance(target, ModuleType):
            # A module the granted one imported (acme.tools:os) is not granted.
            raise CodeNotGrantedError(
                f"'{reference}' reaches the module '{target.__name__}' through "
                f"'{module_name}'; a module grant covers what its modules define"
            )
    if tree is not None:
        defined_in = getattr(target, "__module__", None)
        if not isinstance(defined_in, str) or not _beneath(defined_in, tree):
            # acme.tools:rmtree after 'from shutil import rmtree' in acme.tools.
            raise CodeNotGrantedError(
                f"'{reference}' is defined in '{defined_in}', outside the granted "
                f"module '{tree}'; grant it by its own name"
            )
    return target


@dataclass(frozen=True)
class CodePolicy:
    """Which importable names may be resolved: any (open), or the operator's grants.

    Attributes:
        restricted: whether only granted names resolve.
        entries: the operator's grants (``package.module`` or ``package.module:name``).
        setting: the setting that holds the grants, named in every refusal.
    """

    restricted: bool = False
    entries: tuple[str, ...] = ()
    setting: str = CATALOG_CODE_SETTING

    @classmethod
    def open(cls) -> CodePolicy:
        """The operator's own process: every importable name resolves."""
        return cls()

    @classmethod
    def granted(cls, entries: Iterable[str], *, setting: str = CATALOG_CODE_SETTING) -> CodePolicy:
        """Only the names the operator listed resolve.

        Args:
            entries: the grants, checked with :func:`check_code_entry`.
            setting: the setting they come from.

        Raises:
            ValueError: an entry of neither form.
        """
        return cls(True, tuple(check_code_entry(entry) for entry in entries), setting)

    def _grant(
        self, module_name: str, attribute: str, builtin: Iterable[str]
    ) -> tuple[bool, str | None]:
        """Whether the name is granted, and the module tree a module grant confines it to."""
        dotted = f"{module_name}.{attribute}" if attribute else module_name
        tree: str | None = None
        for entry in (*builtin, *self.entries):
            if ":" in entry:
                if entry == f"{module_name}:{attribute}":
                    return True, None
                continue
            if entry == dotted:
                # A class or function named by its dotted path (toolClasses' form).
                return True, None
            private = any(part.startswith("_") for part in attribute.split("."))
            if attribute and not private and _beneath(module_name, entry):
                tree = entry
        return tree is not None, tree

    def refusal(self, reference: str, *, builtin: Iterable[str] = ()) -> str | None:
        """Why a name may not be resolved, before anything is imported; None when it may.

        Args:
            reference: ``package.module:name``.
            builtin: names pilothouse grants for this field whatever the setting.

        Returns:
            The rule broken, naming the setting and docs, or None.
        """
        if not self.restricted:
            return None
        module_name, _, attribute = reference.partition(":")
        if module_name and attribute and self._grant(module_name, attribute, builtin)[0]:
            return None
        listed = "lists other names" if self.entries else "is empty"
        return (
            f"'{reference}' names server code the operator has not granted to tenants' "
            f"catalogs; a tenant may name a tool registered in code, or a module or "
            f"callable the operator lists in {self.setting}, which {listed} (see {_DOC})"
        )

    def resolve(self, reference: str, *, builtin: Iterable[str] = ()) -> object:
        """Import the name, if this policy grants it.

        Args:
            reference: ``package.module:attr.path``.
            builtin: names pilothouse grants for this field whatever the setting.

        Returns:
            What it names.

        Raises:
            CodeNotGrantedError: not granted (nothing was imported), or a
                module grant's name leads outside the granted modules.
            ToolError: malformed, or it cannot be imported.
        """
        if not self.restricted:
            return resolve_reference(reference)
        rule = self.refusal(reference, builtin=builtin)
        if rule is not None:
            raise CodeNotGrantedError(rule)
        module_name, attribute = _split(reference)
        tree = self._grant(module_name, attribute, builtin)[1]
        try:
            return _walk(reference, _import(reference, module_name), attribute, tree=tree)
        except CodeNotGrantedError as exc:
            raise CodeNotGrantedError(f"{exc} in {self.setting} (see {_DOC})") from None


def catalog_code_refusals(
    kind: str, document: Mapping[str, Any], policy: CodePolicy
) -> list[tuple[tuple[str, ...], str]]:
    """What a written entity names as code and the policy refuses, with each field's location.

    The fields: a python tool's ``implementation`` (a ``module:name``; a
    plain name is a tool registered in code), a tool's
    ``settings.gateway.token_exchange``, an advisor's ``implementation`` (a
    ``module:name``; a plain name is a built-in).

    Args:
        kind: the catalog kind's plural name (``tools``, ``advisors``).
        document: the entity as its spec document.
        policy: the writer's code policy.

    Returns:
        ``(location, rule)`` per refused field; empty under an open policy.
    """
    if not policy.restricted:
        return []
    named: list[tuple[tuple[str, ...], str, tuple[str, ...]]] = []
    implementation = document.get("implementation")
    reference = implementation.strip() if isinstance(implementation, str) else ""
    if kind == "tools":
        if document.get("kind") == "python" and ":" in reference:
            named.append((("implementation",), reference, ()))
        settings = document.get("settings")
        gateway = (
            cast("Mapping[str, Any]", settings).get("gateway")
            if isinstance(settings, Mapping)
            else None
        )
        if isinstance(gateway, Mapping):
            exchange = cast("Mapping[str, Any]", gateway).get("token_exchange")
            if exchange is not None:
                named.append((("settings", "gateway", "token_exchange"), str(exchange), ()))
    elif kind == "advisors" and ":" in reference:
        named.append((("implementation",), reference, BUILTIN_ADVISORS))
    found: list[tuple[tuple[str, ...], str]] = []
    for location, name, builtin in named:
        rule = policy.refusal(name, builtin=builtin)
        if rule is not None:
            found.append((location, rule))
    return found
