"""Building a catalog in code, for tests, and importing it without YAML files.

:class:`CatalogBuilder` collects entities with the fields of their YAML form,
checks each one as it is added (the same rules as ``pilothouse catalog
validate``), and imports the whole through the same all-or-nothing import as
the files, after the references between entities are checked.
"""

from __future__ import annotations

__all__ = ["CatalogBuilder"]

from typing import TYPE_CHECKING, Any, Self

from pilothouse.catalog import (
    KINDS,
    CatalogSpec,
    dump_yaml,
    import_documents,
    parse_spec,
    spec_document,
)
from pilothouse.catalog._kinds import suggest
from pilothouse.errors import CatalogValidationError, ValidationIssue
from pilothouse.settings import Settings
from pilothouse.store import Database

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse
    from pilothouse.catalog import ImportSummary

SCRIPTED_PROVIDER = "TEST"
SCRIPTED_MODEL = "SCRIPTED"
DEFAULT_CONFIGURATION = "DFLT"


class CatalogBuilder:
    """A catalog built in code: add entities, then import them.

    Every method takes the fields of the entity's YAML form (see
    ``docs/catalog.md``) as keyword arguments and returns the builder, so
    calls chain. Each entity is validated when added: a wrong field raises
    :class:`~pilothouse.errors.CatalogValidationError` at that call. References
    between entities (an action's model, an agent's application) are checked
    at import, against the entities added and those already stored.

    An entity added with the code of one already added replaces it, so the
    defaults below can be changed. Unless ``scripted=False``, the builder
    starts with what a test of a scripted model needs:

    - provider ``TEST`` of kind ``test`` (never called: its model is the one
      given to :func:`~pilothouse.testing.override` or ``Pilothouse(model=...)``);
    - model ``SCRIPTED`` of it, with function calling and streaming, free;
    - configuration ``DFLT`` (1024 tokens, retries without delay);

    and :meth:`action` uses the last two unless told otherwise.

    Example:
        ```python
        catalog = (
            CatalogBuilder()
            .action("SUMMARIZE", prompt="Summarize the text.")
            .application("CRM")
            .agent("ANALYST", application="CRM", goal_action="SUMMARIZE")
        )
        await catalog.import_into(ph)
        ```

    Args:
        scripted: start with the ``TEST`` provider, the ``SCRIPTED`` model and
            the ``DFLT`` configuration.
    """

    def __init__(self, *, scripted: bool = True) -> None:
        self._specs: dict[str, dict[str, CatalogSpec]] = {}
        if scripted:
            self.provider(SCRIPTED_PROVIDER, kind="test")
            self.model(
                SCRIPTED_MODEL,
                provider=SCRIPTED_PROVIDER,
                model_name="scripted",
                capabilities=["FC", "SR"],
                input_price=0,
                output_price=0,
            )
            self.configuration(DEFAULT_CONFIGURATION, max_tokens=1024, retry_delay=0)

    def add(self, kind: str, /, **fields: Any) -> Self:
        """Add an entity of any kind.

        Args:
            kind: the kind's name as a YAML key: ``providers``, ``models``,
                ``actions``, ``skills``, ``mcp_clients``, ...
            **fields: the entity's fields, as in YAML.

        Raises:
            CatalogValidationError: an unknown kind, or a field breaks a rule.
        """
        if kind not in KINDS:
            rule = "unknown kind" + suggest(kind, KINDS)
            raise CatalogValidationError([ValidationIssue("catalog", None, kind, rule)])
        spec = parse_spec(kind, fields)
        self._specs.setdefault(kind, {})[spec.key] = spec
        return self

    def provider(self, code: str, /, *, kind: str, **fields: Any) -> Self:
        """Add a provider: a model vendor or server and how to reach it."""
        return self.add("providers", code=code, kind=kind, **fields)

    def model(self, code: str, /, *, provider: str, model_name: str, **fields: Any) -> Self:
        """Add a model of a provider."""
        return self.add("models", code=code, provider=provider, model_name=model_name, **fields)

    def configuration(self, code: str, /, *, max_tokens: int, **fields: Any) -> Self:
        """Add a configuration: sampling parameters and limits of a call."""
        return self.add("configurations", code=code, max_tokens=max_tokens, **fields)

    def action(
        self,
        code: str,
        /,
        *,
        prompt: str,
        model: str = SCRIPTED_MODEL,
        configuration: str = DEFAULT_CONFIGURATION,
        **fields: Any,
    ) -> Self:
        """Add an action; its model and configuration default to the scripted ones."""
        return self.add(
            "actions",
            code=code,
            prompt=prompt,
            model=model,
            configuration=configuration,
            **fields,
        )

    def application(self, code: str, /, **fields: Any) -> Self:
        """Add a business application."""
        return self.add("applications", code=code, **fields)

    def agent(self, code: str, /, *, application: str, **fields: Any) -> Self:
        """Add an agent of an application."""
        return self.add("agents", code=code, application=application, **fields)

    def persona(self, code: str, /, *, prompt: str, **fields: Any) -> Self:
        """Add a persona: a reusable voice or role prompt."""
        return self.add("personas", code=code, prompt=prompt, **fields)

    def skill(self, code: str, /, *, prompt: str, **fields: Any) -> Self:
        """Add a skill: a capability prompt that may own tools."""
        return self.add("skills", code=code, prompt=prompt, **fields)

    def tool(self, code: str, /, *, name: str, kind: str, **fields: Any) -> Self:
        """Add a tool; ``name`` is the function name the model sees."""
        return self.add("tools", code=code, name=name, kind=kind, **fields)

    def mcp_client(self, name: str, /, *, transport: str, **fields: Any) -> Self:
        """Add an MCP client (its business key is its name)."""
        return self.add("mcp_clients", name=name, transport=transport, **fields)

    def advisor(self, code: str, /, *, implementation: str, **fields: Any) -> Self:
        """Add an advisor: an interceptor around the model call."""
        return self.add("advisors", code=code, implementation=implementation, **fields)

    def memory_strategy(self, code: str, /, *, kind: str, **fields: Any) -> Self:
        """Add a memory strategy (``FULL``, or ``WINDOW`` of ``window_size``)."""
        return self.add("memory_strategies", code=code, kind=kind, **fields)

    def document(self) -> dict[str, list[dict[str, Any]]]:
        """Return the catalog as one YAML-shaped document, kinds in dependency order."""
        return {
            name: [spec_document(kind, spec) for spec in self._specs[name].values()]
            for name, kind in KINDS.items()
            if self._specs.get(name)
        }

    def yaml(self) -> str:
        """Return the catalog as YAML text, for ``pilothouse catalog import``."""
        return dump_yaml(self.document())

    async def import_into(
        self,
        target: Pilothouse | Settings | Database,
        *,
        tenant: str | None = None,
        user: str = "pilothouse.testing",
    ) -> ImportSummary:
        """Import the catalog, all or nothing, as ``pilothouse catalog import`` does.

        Args:
            target: a Pilothouse (its database and tenant), settings (their
                database, opened and closed here, and tenant), or a database.
            tenant: whose catalog; defaults to the target's tenant, or
                ``default`` for a database.
            user: written to ``updated_by`` of every row.

        Returns:
            What the import created, updated or left unchanged.

        Raises:
            CatalogValidationError: a reference names no entity; nothing was
                written.
        """
        documents = [self.document()]
        if isinstance(target, Database):
            return await import_documents(target, tenant or "default", documents, user=user)
        if isinstance(target, Settings):
            database = target.open_database()
            try:
                return await import_documents(
                    database, tenant or target.tenant, documents, user=user
                )
            finally:
                await database.dispose()
        facade = target.for_tenant(tenant) if tenant else target
        return await facade.catalog.import_documents(documents, user=user)
