"""Deployment settings, read from ``PILOTHOUSE_*`` environment variables.

A :class:`Settings` object is created once at the edge (CLI, server, tests)
and passed down; nothing reads the environment behind the caller's back.
"""

from __future__ import annotations

__all__ = [
    "Settings",
    "database_driver_url",
    "refuse_misspelt_prefix",
    "refuse_misspelt_variables",
]

import difflib
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

if TYPE_CHECKING:
    from pilothouse.store import Database


def _default_database_url() -> str:
    return f"sqlite+aiosqlite:///{Path('.pilothouse') / 'pilothouse.db'}"


_DATABASE_DRIVERS = {
    "sqlite": "sqlite+aiosqlite",
    "sqlite+aiosqlite": "sqlite+aiosqlite",
    "postgres": "postgresql+asyncpg",
    "postgresql": "postgresql+asyncpg",
    "postgresql+asyncpg": "postgresql+asyncpg",
}
"""The URL schemes pilothouse runs on, each to the async driver it uses."""

_DATABASE_EXAMPLES = "sqlite+aiosqlite:///path/to/file.db or postgresql+asyncpg://user@host:5432/db"


def refuse_misspelt_variables(
    environ: Mapping[str, str],
    prefix: str,
    settings: Iterable[str],
    *,
    elsewhere: Iterable[str] = (),
) -> None:
    """Refuse a ``prefix`` variable that is not a setting but nearly spells one.

    pydantic-settings reads only the variables its fields name: a misspelt
    one (``PILOTHOUSE_FREZE_HEAP``) was ignored, and the default it meant to
    change stayed in force without a word. A variable that resembles no
    setting (a script's own ``PILOTHOUSE_KEY``) is left alone.

    Args:
        environ: the environment.
        prefix: the settings class's prefix (``PILOTHOUSE_``).
        settings: its fields' names.
        elsewhere: longer prefixes another settings class reads
            (``PILOTHOUSE_SERVER_``), checked there.

    Raises:
        ValueError: naming the variable and the setting it resembles.
    """
    known = {name.upper() for name in settings}
    skipped = tuple(elsewhere)
    for variable in environ:
        upper = variable.upper()  # pydantic-settings reads names case-insensitively
        if not upper.startswith(prefix) or upper.startswith(skipped):
            continue
        suffix = upper.removeprefix(prefix)
        if suffix not in known:
            _refuse_if_close(variable, suffix, known, cutoff=0.8, prefix=prefix)


def refuse_misspelt_prefix(
    environ: Mapping[str, str],
    prefix: str,
    settings: Iterable[str],
    *,
    within: str,
    neighbours: Iterable[str],
) -> None:
    """Refuse a variable that names one of ``prefix``'s settings with the prefix misspelt.

    :func:`refuse_misspelt_variables` compares what follows a prefix, so
    ``PILOTHOUSE_SEVER_PORT`` (meant for ``PILOTHOUSE_SERVER_PORT``) is
    checked as a ``PILOTHOUSE_`` setting called ``SEVER_PORT``, resembles
    none, and was ignored. Here whole names are compared, with a stricter
    cutoff (the shared ``PILOTHOUSE_`` alone makes names look alike), so a
    bare ``PILOTHOUSE_SERVER`` or ``PILOTHOUSE_PORT`` of a script is left alone.

    Args:
        environ: the environment.
        prefix: the settings class's prefix (``PILOTHOUSE_SERVER_``).
        settings: its fields' names.
        within: the shorter prefix the misspelt ones share (``PILOTHOUSE_``).
        neighbours: settings that ``within`` itself reads (``Settings``'
            fields), never taken for misspellings.

    Raises:
        ValueError: naming the variable and the setting it resembles.
    """
    known = {f"{prefix}{name}".upper() for name in settings}
    theirs = {f"{within}{name}".upper() for name in neighbours}
    for variable in environ:
        upper = variable.upper()
        if upper.startswith(within) and not upper.startswith(prefix) and upper not in theirs:
            _refuse_if_close(variable, upper, known, cutoff=0.9)


def _refuse_if_close(
    variable: str, name: str, known: Iterable[str], *, cutoff: float, prefix: str = ""
) -> None:
    """Raise ``ValueError`` when ``name`` nearly spells one of ``known`` (``prefix`` + it)."""
    close = difflib.get_close_matches(name, known, n=1, cutoff=cutoff)
    if close:
        raise ValueError(
            f"{variable} is not a setting, so it would be ignored: "
            f"write {prefix}{close[0]} (or unset it)"
        )


def database_driver_url(url: str) -> str:
    """Return ``url`` with the async driver pilothouse uses for its database.

    ``sqlite://`` becomes ``sqlite+aiosqlite://``; ``postgres://`` and
    ``postgresql://`` (the forms hosting platforms hand out) become
    ``postgresql+asyncpg://``. The rest of the URL is kept as written.

    Raises:
        ValueError: not a URL, or a database or driver pilothouse does not
            run on (MySQL, psycopg, ...); the message shows the scheme only,
            never the password.
    """
    scheme, separator, rest = url.partition("://")
    if not separator:
        raise ValueError(f"is not a database URL: write {_DATABASE_EXAMPLES}")
    driver = _DATABASE_DRIVERS.get(scheme.lower())
    if driver is None:
        raise ValueError(
            f"'{scheme}://' is not a database pilothouse runs on (SQLite through aiosqlite, "
            f"PostgreSQL through asyncpg): write {_DATABASE_EXAMPLES}"
        )
    return f"{driver}://{rest}"


class Settings(BaseSettings):
    """Settings of one pilothouse deployment.

    Attributes:
        database_url: SQLAlchemy async URL, e.g. ``sqlite+aiosqlite:///x.db``
            or ``postgresql+asyncpg://user@host:5432/db``; ``sqlite://``,
            ``postgres://`` and ``postgresql://`` get those drivers, any
            other database or driver is refused.
        secrets_file: optional ``NAME=value`` file that ``@secrets(NAME)``
            references resolve from, one ``[tenant]`` section per tenant
            (``[*]``: every tenant; lines before any section: the tenant
            ``tenant`` names). A tenant resolves only its own section and
            ``[*]`` (docs/security.md#secrets).
        secrets_env: the environment variables a tenant's ``@secrets(NAME)``
            may read, per tenant (``*``: every tenant); no other variable is
            ever a secret. Each entry is ``NAME`` (the variable of that name)
            or ``NAME=VARIABLE``. JSON in ``PILOTHOUSE_SECRETS_ENV``, e.g.
            ``{"default": ["OPENAI_API_KEY"], "acme":
            ["OPENAI_API_KEY=ACME_OPENAI_KEY"]}``.
        tenant: the tenant used when a caller names none.
        audit: whether conversations record their audit timeline by default.
        user: the name written to ``updated_by`` for catalog changes.
        database_pool_size: connections kept open to a server database
            (PostgreSQL; SQLite uses one writer thread and ignores it).
        database_max_overflow: further connections opened under load.
        database_pool_timeout: seconds a transaction waits for a connection
            before it fails.
        database_lazy_start: on PostgreSQL, let the first write of a turn
            that nobody streams and that runs no tool commit without waiting
            for the log's flush; the turn's next write, which waits, makes it
            durable too. Off by default: a database server crash between the
            two writes loses that start record although the model call may
            have gone out (docs/operations.md). No answer is ever delivered
            before its record is durable either way.
        provider_max_connections: connections to one provider kept open and
            in flight at once; more concurrent model calls wait for one.
        provider_connect_timeout: seconds to open a connection to a provider.
        provider_timeout: seconds a model call may take in all.
        script_tools: how catalog script tools run: ``sandbox`` (the
            default: in a bubblewrap sandbox without network, files or
            environment of the server; refused where ``bwrap`` is missing),
            ``trusted`` (a plain child process, for a single-tenant
            deployment that trusts every catalog writer) or ``off``. A
            deployment setting: no catalog or tenant field can change it.
        script_max_timeout: the longest wall time, in seconds, a script tool
            may run (and ask for with ``settings.timeout``; 10 s when it
            does not ask).
        script_max_output_bytes: the most a script tool may print on stdout
            or stderr (and ask for with ``settings.max_output_bytes``; 64 KiB
            when it does not ask); at the first byte past it the script is
            killed.
        script_max_processes: processes and threads a script tool may run at
            once (``settings.max_processes`` may ask for fewer).
        script_max_memory_mib: MiB of memory each process of a script tool
            may allocate (``settings.max_memory_mib`` may ask for less).
        script_max_cpu_seconds: CPU seconds each process of a script tool
            may use (``settings.max_cpu_seconds`` may ask for fewer).
        script_max_tmp_mib: MiB a script tool may write into its ``/tmp``
            (and ``/dev/shm``) in the sandbox, or into any one file in
            trusted mode (``settings.max_tmp_mib`` may ask for less). A tool
            setting above any of these ceilings is refused when the catalog
            is written, and when a row stored before is built.
        egress_allow: private or local hosts and networks (``10.0.0.0/8``,
            ``model-server.internal``, ``127.0.0.1``) that callers may make
            the service reach through the URLs they choose (``/v1/invoke``
            ``baseUrl`` and ``mcpServers``); public addresses are always
            allowed. Comma-separated in ``PILOTHOUSE_EGRESS_ALLOW``. In the
            HTTP service it also applies to every URL of the catalog (providers,
            REST and OpenAPI tools, MCP clients, vector stores) when a tenant
            writes it and again at each call, pinned to the checked address.
        egress_tenants: each tenant's own allow-list, added to
            ``egress_allow`` for that tenant only: JSON in
            ``PILOTHOUSE_EGRESS_TENANTS``, e.g. ``{"acme": ["10.1.0.0/16",
            "crm.acme.internal"]}``.
        invoke_tool_classes: the modules and classes whose ``@tool`` methods
            ``/v1/invoke`` callers may name in ``toolClasses`` (the CIB seven
            connector's parameter). A module entry (``acme.tools``) allows
            every class in it and its submodules, a class entry
            (``acme.tools.Weather``) that class only. Empty (the default)
            allows none: naming a class imports and runs its module's code.
            Comma-separated in ``PILOTHOUSE_INVOKE_TOOL_CLASSES``.
        invoke_default_model: the model name a ``/v1/invoke`` call with a
            ``baseUrl`` but no ``model`` gets at that server (the connector
            documents a default model; its own is ``gpt-5.4-nano``). The
            answer's ``outputAiMeta`` says it was the default.
            ``PILOTHOUSE_INVOKE_DEFAULT_MODEL``.
        catalog_code: the Python code tenants' catalogs may name where
            tenants write the catalog (the HTTP service, ``pilothouse events``
            and ``worker``): a python tool's ``implementation``, an advisor's
            ``implementation``, a gateway's ``token_exchange``. A module entry
            (``acme.tools``) grants the public names defined in it and its
            submodules, a callable entry (``acme.tools:lookup``) that name
            only. Empty (the default) grants none: tenants may name tools
            registered in code (``Pilothouse(tools=...)``) and the built-in
            advisors only. The operator's own processes (the CLI, an
            embedding application) resolve any name. Comma-separated in
            ``PILOTHOUSE_CATALOG_CODE``; see docs/security.md.
        tenant_mcp_stdio: let tenants of the HTTP service write stdio MCP
            clients, commands the server runs with its own files,
            environment and network; off by default (only a catalog the
            operator imports may hold them). ``PILOTHOUSE_TENANT_MCP_STDIO``.
        redis_url: a Redis every process of the deployment shares
            (``redis://host:6379/0``; the ``redis`` extra): rate limits and
            API-key revocations then hold across workers and replicas, and
            cancels reach another process's turn at once. Unset: per process
            (see docs/operations.md).
        redis_prefix: put before every Redis key and channel name, so
            deployments can share one Redis server.
        budget_alert_webhook: an ``http(s)`` URL each budget alert is also
            POSTed to as JSON, once per threshold per period (see
            docs/budgets.md). The egress policy applies to it as to every
            address the service calls. ``PILOTHOUSE_BUDGET_ALERT_WEBHOOK``.
        budget_alert_bus: a bus (``kafka://host:port`` or ``nats://host:port``)
            each budget alert is also published on, as JSON keyed by tenant,
            once per threshold per period. ``PILOTHOUSE_BUDGET_ALERT_BUS``.
        budget_alert_topic: the topic those alerts go to
            (``pilothouse.budget-alerts``). ``PILOTHOUSE_BUDGET_ALERT_TOPIC``.
        lease_seconds: how long another host's serving process may go
            without a heartbeat before the turns it runs are presumed
            orphaned and marked ``ST`` (processes on this host are checked
            by their pid at once).
        freeze_heap: after the process's first turn, move every object
            then alive out of the cyclic collector's walks (``gc.freeze``,
            once per process). Full collections then walk only what came
            later: at 200 concurrent streams they stopped the event loop for
            112-319 ms a round on pilothouse's start-up heap, 7-52 ms frozen,
            and the first token's p50 and p99 came a fifth to a quarter
            sooner (docs/benchmarks.md). The cost: a reference cycle alive at that
            moment is never collected if it becomes garbage later. Off by
            default in the library (the host application's heap would be
            frozen too); ``pilothouse serve``, ``events`` and ``worker`` own
            their processes and turn it on unless ``PILOTHOUSE_FREEZE_HEAP``
            is set.
        fast_exit: when the interpreter exits, leave the objects then alive
            out of its last collections (``gc.freeze`` in an exit handler,
            registered once per process by the first :class:`Pilothouse`).
            A process that used pilothouse then ends 0.5-0.6 s of CPU sooner
            (docs/benchmarks.md). Objects freed by reference counting still
            are; reference cycles alive at exit are left to the operating
            system without their finalizers (``__del__``, weak-reference
            callbacks) running, which Python does not promise at exit
            either. Set it off (``PILOTHOUSE_FAST_EXIT=false``) if the
            application relies on the collector to finalize something at
            exit.
        memory_index: the vector index of scoped memory search: ``auto``
            (pgvector where pilothouse's PostgreSQL has the extension, else
            the knowledge feature's embedded index, else exact search, logged
            at WARNING), or ``pgvector``, ``embedded``, ``exact`` (a kind that
            cannot run is refused on the first search, naming this field).
    """

    model_config = SettingsConfigDict(env_prefix="PILOTHOUSE_", extra="ignore")

    database_url: str = Field(default_factory=_default_database_url)
    secrets_file: Path | None = None
    secrets_env: dict[str, list[str]] = Field(default_factory=lambda: dict[str, list[str]]())
    tenant: str = "default"
    audit: bool = True
    user: str = "pilothouse"
    # Sized for hundreds of concurrent turns: a turn holds a connection only
    # for each short transaction, but SQLAlchemy's default (5 + 10) made
    # 1,000 concurrent conversations fail with pool timeouts (bench).
    database_pool_size: int = Field(default=20, ge=1)
    database_max_overflow: int = Field(default=40, ge=0)
    database_pool_timeout: float = Field(default=30.0, gt=0)
    database_lazy_start: bool = False
    # httpx's default (100 connections, 20 kept alive) capped in-flight model
    # calls per provider at 100 and reconnected the rest.
    provider_max_connections: int = Field(default=1000, ge=1)
    provider_connect_timeout: float = Field(default=10.0, gt=0)
    provider_timeout: float = Field(default=600.0, gt=0)
    script_tools: Literal["sandbox", "trusted", "off"] = "sandbox"
    script_max_timeout: float = Field(default=60.0, gt=0)
    script_max_output_bytes: int = Field(default=1024 * 1024, ge=1)
    script_max_processes: int = Field(default=64, ge=1)
    script_max_memory_mib: int = Field(default=512, ge=1)
    script_max_cpu_seconds: int = Field(default=30, ge=1)
    script_max_tmp_mib: int = Field(default=64, ge=1)
    egress_allow: Annotated[list[str], NoDecode] = Field(default_factory=lambda: list[str]())
    egress_tenants: dict[str, list[str]] = Field(default_factory=lambda: dict[str, list[str]]())
    lease_seconds: float = Field(default=30.0, gt=0)
    budget_alert_webhook: str | None = Field(default=None, max_length=2048)
    budget_alert_bus: str | None = Field(default=None, max_length=2048)
    budget_alert_topic: str = Field(
        default="pilothouse.budget-alerts",
        min_length=1,
        max_length=200,
        pattern=r"^[A-Za-z0-9._-]+$",
    )
    invoke_tool_classes: Annotated[list[str], NoDecode] = Field(default_factory=lambda: list[str]())
    invoke_default_model: str = Field(default="gpt-5.4-nano", min_length=1, max_length=256)
    catalog_code: Annotated[list[str], NoDecode] = Field(default_factory=lambda: list[str]())
    memory_index: Literal["auto", "pgvector", "embedded", "exact"] = "auto"
    tenant_mcp_stdio: bool = False
    freeze_heap: bool = False
    fast_exit: bool = True
    redis_url: str | None = None
    redis_prefix: str = Field(default="pilothouse:", min_length=1)

    @model_validator(mode="after")
    def _no_misspelt_variables(self) -> Settings:
        prefix = str(type(self).model_config.get("env_prefix", ""))
        # PILOTHOUSE_SERVER_* are ServerSettings', which checks them.
        refuse_misspelt_variables(
            os.environ, prefix, type(self).model_fields, elsewhere=(f"{prefix}SERVER_",)
        )
        return self

    @field_validator("database_url")
    @classmethod
    def _database_driver(cls, value: str) -> str:
        return database_driver_url(value)

    @field_validator("budget_alert_bus")
    @classmethod
    def _bus_scheme(cls, value: str | None) -> str | None:
        if value and not value.startswith(("kafka://", "nats://")):
            raise ValueError("must be a kafka:// or nats:// URL, e.g. nats://127.0.0.1:4222")
        return value or None

    @field_validator("budget_alert_webhook")
    @classmethod
    def _webhook_scheme(cls, value: str | None) -> str | None:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL, e.g. https://alerts.example/hook")
        return value or None

    @field_validator("redis_url")
    @classmethod
    def _redis_scheme(cls, value: str | None) -> str | None:
        if value is not None and not value.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError(
                "must be a redis://, rediss:// or unix:// URL, e.g. redis://127.0.0.1:6379/0"
            )
        return value or None

    @field_validator("egress_allow", "invoke_tool_classes", "catalog_code", mode="before")
    @classmethod
    def _split_hosts(cls, value: Any) -> Any:
        # The environment gives one string: hosts and networks, comma-separated.
        if isinstance(value, str):
            return [item.strip() for item in value.split(",") if item.strip()]
        return value

    @field_validator("egress_allow")
    @classmethod
    def _valid_hosts(cls, value: list[str]) -> list[str]:
        from pilothouse.providers._egress import EgressPolicy

        EgressPolicy.parse(value)  # raises ValueError naming a bad entry
        return value

    @field_validator("invoke_tool_classes")
    @classmethod
    def _valid_tool_classes(cls, value: list[str]) -> list[str]:
        import re

        # The same rule as tools._classes.DOTTED_NAME, without importing the tools package.
        dotted = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
        for entry in value:
            if not dotted.match(entry):
                raise ValueError(
                    f"invoke_tool_classes entry '{entry}' is not a dotted module or class name"
                )
        return value

    @field_validator("catalog_code")
    @classmethod
    def _valid_catalog_code(cls, value: list[str]) -> list[str]:
        from pilothouse.tools._code import check_code_entry

        return [check_code_entry(entry) for entry in value]  # ValueError names a bad entry

    @field_validator("egress_tenants")
    @classmethod
    def _valid_tenant_hosts(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        from pilothouse.providers._egress import EgressPolicy

        EgressPolicy.parse([], value)  # raises ValueError naming the tenant and entry
        return value

    @field_validator("secrets_env")
    @classmethod
    def _valid_secret_mapping(cls, value: dict[str, list[str]]) -> dict[str, list[str]]:
        from pilothouse.providers._secrets import parse_env_mapping

        for tenant, entries in value.items():
            parse_env_mapping(tenant, entries)  # raises ValueError naming the entry
        return value

    def open_database(self) -> Database:
        """Return the configured database (not connected until first use)."""
        from pilothouse.store import Database

        return Database(
            self.database_url,
            pool_size=self.database_pool_size,
            max_overflow=self.database_max_overflow,
            pool_timeout=self.database_pool_timeout,
        )
