"""Builds (and caches) a pydantic-ai model for each compiled model spec.

One factory lives as long as the runtime. Models and the SDK and HTTP clients
under them are built on first use and kept: building an OpenAI client costs
more than a request, and a pooled HTTP client keeps its connections warm.
Vendor SDKs are imported on first use of their kind, so ``import
pilothouse.providers`` stays cheap and a missing optional extra is reported
by name only when a catalog actually uses that kind.

SDK-level retries are turned off (``max_retries=0``): the runtime retries with
backoff and records each attempt, which a hidden SDK retry would bypass.
"""

from __future__ import annotations

__all__ = ["AwsClientFactory", "LocalServers", "ModelFactory"]

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol, cast

import anyio
import anyio.to_thread

from pilothouse._collector import collector_paused
from pilothouse.catalog._enums import ProviderKind
from pilothouse.catalog._vantiq import safety_name
from pilothouse.providers._errors import MissingExtraError, ProviderConfigError
from pilothouse.providers._guard import check_model_requests, model_override
from pilothouse.providers._options import ModelOptions, uses_responses_api
from pilothouse.providers._spec import ModelSpec, ProviderSpec

if TYPE_CHECKING:
    import httpx2
    from pydantic_ai.models import Model

    from pilothouse.providers._egress import EgressPolicy


class LocalServers(Protocol):
    """What the factory needs from the local llama.cpp server manager."""

    async def base_url(
        self,
        *,
        model_path: str | None = None,
        chat_format: str = "pilothouse",
        n_ctx: int = 4096,
        n_threads: int | None = None,
    ) -> str:
        """Start or reuse a server for the model and return its ``/v1`` base URL."""
        ...

    def check_model_name(self, model_name: str, *, model_path: str | None = None) -> str:
        """Refuse a ``model_name`` the served file is not; return the served model's id."""
        ...


AwsClientFactory = Callable[[str, Mapping[str, Any]], Any]
"""Makes a boto3 client: ``(service_name, client_kwargs) -> client``."""

_EXTRAS: Mapping[ProviderKind, str] = {
    ProviderKind.OPENAI: "openai",
    ProviderKind.OPENAI_COMPATIBLE: "openai",
    ProviderKind.AZURE: "openai",
    ProviderKind.OLLAMA: "openai",
    ProviderKind.LOCAL: "local",
    ProviderKind.ANTHROPIC: "anthropic",
    ProviderKind.BEDROCK: "bedrock",
    ProviderKind.GOOGLE: "google",
    ProviderKind.SAGEMAKER: "sagemaker",
}
logger = logging.getLogger(__name__)

_OPENAI_URL = "https://api.openai.com/v1"
_ANTHROPIC_URL = "https://api.anthropic.com"
_OLLAMA_URL = "http://127.0.0.1:11434/v1"
# Rebuild a model whose assumed-role credentials expire within this window.
_CREDENTIAL_MARGIN_SECONDS = 300.0


def _default_aws_client(service: str, kwargs: Mapping[str, Any]) -> Any:
    import boto3.session  # pyright: ignore[reportMissingTypeStubs]

    # A fresh session per client, not boto3's module-level default session,
    # so one provider's credentials never leak into another's client.
    session: Any = boto3.session.Session()
    return session.client(service, **kwargs)


@dataclass
class _Entry:
    model: Model
    expires_at: float | None = None


class ModelFactory:
    """Builds one pydantic-ai model per model spec and keeps it.

    Args:
        local_servers: the local llama.cpp server manager, needed for kind
            ``local``; owned by the caller (``aclose`` leaves it running).
        transport: an ``httpx2`` transport for every HTTP client the factory
            creates (a retrying or mock transport); ``None`` for the default.
        aws_client_factory: makes boto3 clients; defaults to a fresh boto3
            session per client.
        timeout: read timeout in seconds for provider calls.
        connect_timeout: seconds to open a connection to a provider.
        max_connections: connections per provider client, open and in
            flight at once (all kept alive between calls).
        egress: when given, every provider request goes only to an address
            this policy (the running turn's tenant's, see ``current_egress``)
            checked, pinned per request against DNS rebinding; the HTTP
            service gives it. Local llama.cpp servers pilothouse starts itself
            are not checked.
    """

    def __init__(
        self,
        local_servers: LocalServers | None = None,
        *,
        transport: httpx2.AsyncBaseTransport | None = None,
        aws_client_factory: AwsClientFactory | None = None,
        timeout: float = 600.0,
        connect_timeout: float = 10.0,
        max_connections: int = 1000,
        egress: EgressPolicy | None = None,
    ) -> None:
        self._egress = egress
        self._local_servers = local_servers
        self._connect_timeout = connect_timeout
        self._max_connections = max_connections
        self._transport = transport
        self._aws_client_factory = aws_client_factory or _default_aws_client
        self._timeout = timeout
        self._models: dict[str, _Entry] = {}
        self._http_clients: dict[str, httpx2.AsyncClient] = {}
        self._sdk_clients: dict[str, Any] = {}
        self._aws_clients: list[Any] = []
        self._lock = anyio.Lock()
        self._closed = False

    async def model(self, spec: ModelSpec, options: ModelOptions | None = None) -> Model:
        """Return the model for ``spec``, building it on first use.

        Args:
            spec: the compiled model spec.
            options: the call's options; for OpenAI and Azure a reasoning
                summary selects the Responses API model.

        Returns:
            A pydantic-ai model, shared by every caller with an equal spec; or,
            inside ``pilothouse.testing.override(model=...)``, that model.

        Raises:
            ProviderConfigError: the spec lacks a required setting, or its kind
                is ``test`` (test models are injected by ``pilothouse.testing``).
            MissingExtraError: the kind's optional dependency is not installed.
            ModelRequestsBlockedError: real model requests are blocked (tests).
        """
        if self._closed:
            raise ProviderConfigError("the model factory is closed")
        # Asked on every call, not when a model is built: a model built
        # before a test blocked requests (or overrode the model) is cached.
        override = model_override.get()
        if override is not None:
            return override
        check_model_requests(spec)
        responses = uses_responses_api(spec, options)
        key = f"{spec.fingerprint()}:{'responses' if responses else 'default'}"
        local_url: str | None = None
        if spec.provider.kind is ProviderKind.LOCAL:
            self.check_local_model(spec)
            # Asked on every call: the manager restarts a server that died, on
            # a new port, and the model must follow it there.
            local_url = await self._local_base_url(spec.provider)
            key = f"{key}:{local_url}"
        entry = self._models.get(key)
        if entry is not None and not _expiring(entry):
            return entry.model
        async with self._lock:
            entry = self._models.get(key)
            if entry is None or _expiring(entry):
                entry = await self._build(spec, responses, local_url)
                self._models[key] = entry
            return entry.model

    async def aclose(self) -> None:
        """Close every HTTP and AWS client the factory created and forget the models."""
        self._closed = True
        clients = list(self._http_clients.values())
        self._http_clients.clear()
        self._sdk_clients.clear()
        self._models.clear()
        for client in clients:
            await client.aclose()
        for aws_client in self._aws_clients:
            aws_client.close()
        self._aws_clients.clear()

    async def _build(self, spec: ModelSpec, responses: bool, local_url: str | None) -> _Entry:
        kind = spec.provider.kind
        if kind is ProviderKind.TEST:
            raise ProviderConfigError(
                f"provider {spec.provider.code}: kind 'test' models are not built by the "
                "factory; script them with pilothouse.testing.override(model=ScriptedModel(...))"
            )
        try:
            return await self._build_kind(spec, responses, local_url)
        except ImportError as exc:
            raise MissingExtraError(kind.value, _EXTRAS[kind]) from exc

    async def _build_kind(self, spec: ModelSpec, responses: bool, local_url: str | None) -> _Entry:
        kind = spec.provider.kind
        if kind is ProviderKind.BEDROCK:
            return await self._bedrock(spec)
        if kind is ProviderKind.SAGEMAKER:
            return await self._sagemaker(spec)
        # A kind's first model imports its SDK, and every model loads the
        # model library's price table once: long-lived objects only, built
        # with the collector paused (see pilothouse._collector).
        with collector_paused():
            return _Entry(self._build_sync(kind, spec, responses, local_url))

    def _build_sync(
        self, kind: ProviderKind, spec: ModelSpec, responses: bool, local_url: str | None
    ) -> Model:
        if kind in (ProviderKind.OPENAI, ProviderKind.OPENAI_COMPATIBLE, ProviderKind.LOCAL):
            return self._openai(spec, responses, local_url)
        if kind is ProviderKind.AZURE:
            return self._azure(spec, responses)
        if kind is ProviderKind.OLLAMA:
            return self._ollama(spec)
        if kind is ProviderKind.ANTHROPIC:
            return self._anthropic(spec)
        if kind is ProviderKind.GOOGLE:
            return self._google(spec)
        raise ProviderConfigError(f"provider kind '{kind.value}' is not supported")

    # -- HTTP ---------------------------------------------------------------

    def _http_client(self, provider: ProviderSpec, *, pinned: bool = True) -> httpx2.AsyncClient:
        import httpx2

        from pilothouse.providers._pool import provider_transport
        from pilothouse.providers._urls import UrlKeepingClient
        from pilothouse.providers._wire_transport import WireRepairTransport

        pin = self._egress if pinned and self._transport is None else None
        key = f"{provider.fingerprint()}:{'pinned' if pin is not None else 'direct'}"
        client = self._http_clients.get(key)
        if client is None:
            connections = self._max_connections
            inner: httpx2.AsyncBaseTransport
            if self._transport is not None:
                inner = self._transport
            elif pin is not None:
                from pilothouse.providers._egress_transport import PinnedTransport

                inner = PinnedTransport(lambda: provider_transport(connections), pin)
            else:
                inner = provider_transport(connections)
            # Keeps each URL's parse: the SDKs send a handful of URLs again and again.
            client = UrlKeepingClient(
                timeout=httpx2.Timeout(self._timeout, connect=self._connect_timeout),
                limits=httpx2.Limits(
                    max_connections=self._max_connections,
                    max_keepalive_connections=self._max_connections,
                ),
                # Several pools under heavy load, so no request waits on a
                # walk of hundreds of connections (providers/_pool.py).
                # Chat completions are repaired before the SDK parses them
                # (providers/_wire.py).
                transport=WireRepairTransport(inner),
            )
            self._http_clients[key] = client
        return client

    # -- OpenAI SDK family --------------------------------------------------

    def _openai(self, spec: ModelSpec, responses: bool, local_url: str | None) -> Model:
        provider = spec.provider
        if provider.kind is ProviderKind.OPENAI or responses:
            return self._openai_sdk(spec, responses, local_url)
        base_url = _openai_base_url(provider, local_url)
        try:
            from pilothouse.providers._chat import ChatCompletionsModel
        except ImportError as exc:
            # The client reads pydantic-ai's profiles, errors and parts through
            # some of its private modules; with a pydantic-ai release that lacks
            # one, pydantic-ai's own model (the client's reference) serves,
            # slower but the same, and the log says why.
            logger.warning(
                "provider %s: pilothouse's Chat Completions client cannot load with this "
                "pydantic-ai (%s); using pydantic-ai's OpenAIChatModel",
                provider.code,
                exc,
            )
            return self._openai_sdk(spec, responses, local_url)

        # Chat Completions on a compatible server: pilothouse's own client
        # (providers/_chat.py), with pydantic-ai's SDK model on the same HTTP
        # client for the requests it does not build itself.
        return ChatCompletionsModel(
            spec.model_name,
            client=self._http_client(provider, pinned=local_url is None),
            base_url=base_url,
            api_key=provider.api_key,
            headers=dict(provider.headers),
            provider_name=provider.code.lower(),
            fallback=lambda: self._openai_sdk(spec, responses, local_url),
        )

    def _openai_sdk(self, spec: ModelSpec, responses: bool, local_url: str | None) -> Model:
        from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
        from pydantic_ai.providers.openai import OpenAIProvider
        from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider

        from pilothouse.providers._openai_client import FastAsyncOpenAI

        provider = spec.provider
        base_url = _openai_base_url(provider, local_url)
        sdk_key = f"{provider.fingerprint()}:{base_url}"
        client = self._sdk_clients.get(sdk_key)
        if client is None:
            client = FastAsyncOpenAI(
                # Local servers take any key, but the SDK insists on one.
                api_key=provider.api_key or "not-set",
                base_url=base_url,
                default_headers=dict(provider.headers),
                # A local server is pilothouse's own child on loopback, not a
                # URL anyone chose: not subject to the egress policy.
                http_client=self._http_client(provider, pinned=local_url is None),
                max_retries=0,
            )
            self._sdk_clients[sdk_key] = client
        if provider.kind is ProviderKind.OPENAI:
            sdk_provider: Any = OpenAIProvider(openai_client=client)
        else:
            sdk_provider = OpenAICompatibleProvider(provider.code.lower(), openai_client=client)
        if responses:
            return OpenAIResponsesModel(spec.model_name, provider=sdk_provider)
        return OpenAIChatModel(spec.model_name, provider=sdk_provider)

    def check_local_model(self, spec: ModelSpec) -> None:
        """Refuse a ``local`` model whose ``model_name`` is not the file its provider serves.

        Called when an action is compiled for a turn, before anything is
        written: the record must never name a model that did not run.

        Raises:
            ProviderConfigError: the name does not match; the message names the
                model, its provider, the served file and the installed models.
        """
        if spec.provider.kind is not ProviderKind.LOCAL or self._local_servers is None:
            return
        model_path = local_server_options(spec.provider).get("model_path")
        try:
            self._local_servers.check_model_name(spec.model_name, model_path=model_path)
        except ProviderConfigError as exc:
            raise ProviderConfigError(
                f"model {spec.code} (provider {spec.provider.code}): {exc}"
            ) from exc

    async def _local_base_url(self, provider: ProviderSpec) -> str:
        if self._local_servers is None:
            raise ProviderConfigError(
                f"provider {provider.code}: kind 'local' needs ModelFactory(local_servers=...)"
            )
        return await self._local_servers.base_url(**local_server_options(provider))

    def _azure(self, spec: ModelSpec, responses: bool) -> Model:
        from pydantic_ai.models.openai import OpenAIChatModel, OpenAIResponsesModel
        from pydantic_ai.providers.azure import AzureProvider

        from pilothouse.providers._openai_client import FastAsyncAzureOpenAI

        provider = spec.provider
        settings = provider.settings
        endpoint = provider.base_url
        if endpoint is None and settings.get("resource"):
            endpoint = f"https://{settings['resource']}.openai.azure.com"
        if endpoint is None:
            raise ProviderConfigError(
                f"provider {provider.code}: kind 'azure' needs base_url or settings.resource"
            )
        api_version = settings.get("api_version")
        if not api_version:
            raise ProviderConfigError(
                f"provider {provider.code}: kind 'azure' needs settings.api_version"
            )
        if not provider.api_key:
            raise ProviderConfigError(f"provider {provider.code}: kind 'azure' needs api_key")
        deployment = settings.get("deployment")
        key = provider.fingerprint()
        client = self._sdk_clients.get(key)
        if client is None:
            client = FastAsyncAzureOpenAI(
                azure_endpoint=endpoint,
                azure_deployment=str(deployment) if deployment else None,
                api_version=str(api_version),
                api_key=provider.api_key,
                default_headers=dict(provider.headers),
                http_client=self._http_client(provider),
                max_retries=0,
            )
            self._sdk_clients[key] = client
        sdk_provider = AzureProvider(openai_client=client)
        if responses:
            return OpenAIResponsesModel(spec.model_name, provider=sdk_provider)
        return OpenAIChatModel(spec.model_name, provider=sdk_provider)

    def _ollama(self, spec: ModelSpec) -> Model:
        from pydantic_ai.models.ollama import OllamaModel
        from pydantic_ai.providers.ollama import OllamaProvider

        from pilothouse.providers._openai_client import FastAsyncOpenAI

        provider = spec.provider
        key = provider.fingerprint()
        client = self._sdk_clients.get(key)
        if client is None:
            client = FastAsyncOpenAI(
                api_key=provider.api_key or "ollama",
                base_url=provider.base_url or _OLLAMA_URL,
                default_headers=dict(provider.headers),
                http_client=self._http_client(provider),
                max_retries=0,
            )
            self._sdk_clients[key] = client
        return OllamaModel(spec.model_name, provider=OllamaProvider(openai_client=client))

    # -- Anthropic, Google ----------------------------------------------------

    def _anthropic(self, spec: ModelSpec) -> Model:
        from anthropic import AsyncAnthropic
        from pydantic_ai.models.anthropic import AnthropicModel
        from pydantic_ai.providers.anthropic import AnthropicProvider

        provider = spec.provider
        if not provider.api_key:
            raise ProviderConfigError(f"provider {provider.code}: kind 'anthropic' needs api_key")
        key = provider.fingerprint()
        client = self._sdk_clients.get(key)
        if client is None:
            client = AsyncAnthropic(
                api_key=provider.api_key,
                base_url=provider.base_url or _ANTHROPIC_URL,
                default_headers=dict(provider.headers),
                http_client=self._http_client(provider),
                max_retries=0,
            )
            self._sdk_clients[key] = client
        return AnthropicModel(spec.model_name, provider=AnthropicProvider(anthropic_client=client))

    def _google(self, spec: ModelSpec) -> Model:
        from google.genai import Client
        from google.genai.types import HttpOptions
        from pydantic_ai.models.google import GoogleModel, GoogleModelSettings
        from pydantic_ai.providers.google import GoogleProvider

        provider = spec.provider
        if not provider.api_key:
            raise ProviderConfigError(f"provider {provider.code}: kind 'google' needs api_key")
        key = provider.fingerprint()
        client = self._sdk_clients.get(key)
        if client is None:
            http_client = self._http_client(provider)
            client = Client(
                vertexai=False,
                api_key=provider.api_key,
                http_options=HttpOptions(
                    base_url=provider.base_url,
                    headers=dict(provider.headers),
                    httpx_async_client=http_client,
                    # google-genai overrides the client's timeout with its own
                    # (None by default), so pin it here, in milliseconds.
                    timeout=int(self._timeout * 1000),
                ),
            )
            self._sdk_clients[key] = client
        settings: GoogleModelSettings = {}
        safety = google_safety_settings(provider.settings.get("safety_settings"))
        if safety:
            settings["google_safety_settings"] = safety  # pyright: ignore[reportGeneralTypeIssues]
        return GoogleModel(
            spec.model_name, provider=GoogleProvider(client=client), settings=settings or None
        )

    # -- AWS ----------------------------------------------------------------

    async def aws_client(self, provider: ProviderSpec, service: str) -> Any:
        """Build a boto3 client for a provider's region and credentials.

        The factory owns it (``aclose`` closes it). Used by embedders, which
        call AWS without a pydantic-ai model around them.

        Args:
            provider: an AWS provider (``bedrock``, ``sagemaker``).
            service: the boto3 service name, e.g. ``bedrock-runtime``.

        Returns:
            The client.

        Raises:
            ProviderConfigError: ``settings.region`` is missing.
        """
        client, _ = await self._aws_client(provider, service)
        return client

    async def _aws_client(self, provider: ProviderSpec, service: str) -> tuple[Any, float | None]:
        from botocore.config import Config  # pyright: ignore[reportMissingTypeStubs]

        settings = provider.settings
        region = settings.get("region")
        if not region:
            raise ProviderConfigError(
                f"provider {provider.code}: kind '{provider.kind.value}' needs settings.region"
            )
        credentials: dict[str, Any] = {}
        if settings.get("access_key_id"):
            credentials = {
                "aws_access_key_id": settings["access_key_id"],
                "aws_secret_access_key": settings.get("secret_access_key"),
                "aws_session_token": settings.get("session_token"),
            }
        expires_at: float | None = None
        role_arn = settings.get("role_arn")
        if role_arn:
            credentials, expires_at = await self._assume_role(
                provider, str(role_arn), str(region), credentials
            )
        kwargs: dict[str, Any] = {
            "region_name": region,
            # One attempt: the runtime retries with backoff and records it.
            "config": Config(
                retries={"total_max_attempts": 1, "mode": "standard"},
                read_timeout=self._timeout,
            ),
            **{k: v for k, v in credentials.items() if v is not None},
        }
        if provider.base_url:
            kwargs["endpoint_url"] = provider.base_url
        client = self._aws_client_factory(service, kwargs)
        self._aws_clients.append(client)
        return client, expires_at

    async def _assume_role(
        self,
        provider: ProviderSpec,
        role_arn: str,
        region: str,
        credentials: Mapping[str, Any],
    ) -> tuple[dict[str, Any], float | None]:
        sts = self._aws_client_factory(
            "sts",
            {"region_name": region, **{k: v for k, v in credentials.items() if v is not None}},
        )
        try:
            response = await anyio.to_thread.run_sync(
                lambda: sts.assume_role(
                    RoleArn=role_arn, RoleSessionName=f"pilothouse-{provider.code}"[:64]
                )
            )
        finally:
            sts.close()
        creds = response["Credentials"]
        expiration = creds.get("Expiration")
        expires_at = expiration.timestamp() if expiration is not None else None
        return (
            {
                "aws_access_key_id": creds["AccessKeyId"],
                "aws_secret_access_key": creds["SecretAccessKey"],
                "aws_session_token": creds["SessionToken"],
            },
            expires_at,
        )

    async def _bedrock(self, spec: ModelSpec) -> _Entry:
        from pydantic_ai.models.bedrock import BedrockConverseModel
        from pydantic_ai.providers.bedrock import BedrockProvider

        client, expires_at = await self._aws_client(spec.provider, "bedrock-runtime")
        model = BedrockConverseModel(
            spec.model_name, provider=BedrockProvider(bedrock_client=client)
        )
        return _Entry(model, expires_at)

    async def _sagemaker(self, spec: ModelSpec) -> _Entry:
        from pilothouse.providers._sagemaker import SageMakerModel
        from pilothouse.providers._sagemaker_formats import SageMakerFormat, format_setting

        settings = spec.provider.settings
        fmt_value = format_setting(spec.provider.code, settings)
        if fmt_value is None:
            raise ProviderConfigError(
                f"provider {spec.provider.code}: kind 'sagemaker' needs settings.format "
                "or settings.message_format_config"
            )
        fmt = SageMakerFormat.from_config(fmt_value)
        model_kwargs = _kwargs(spec.provider.code, settings, "model_kwargs")
        if model_kwargs:
            # Vantiq's model_kwargs: parameters sent with every request; the
            # call's own options (configuration, runtime config) still win.
            fmt = replace(fmt, parameters={**fmt.parameters, **model_kwargs})
        endpoint_kwargs = _kwargs(spec.provider.code, settings, "endpoint_kwargs")
        unknown = sorted(set(endpoint_kwargs) - set(ENDPOINT_KWARGS))
        if unknown:
            raise ProviderConfigError(
                f"provider {spec.provider.code}: settings.endpoint_kwargs.{unknown[0]} is not an "
                f"argument of invoke_endpoint; write one of {', '.join(ENDPOINT_KWARGS)}"
            )
        client, expires_at = await self._aws_client(spec.provider, "sagemaker-runtime")
        model = SageMakerModel(
            spec.model_name,
            client=client,
            endpoint_name=str(settings.get("endpoint_name") or spec.model_name),
            message_format=fmt,
            endpoint_kwargs=endpoint_kwargs,
        )
        return _Entry(model, expires_at)


ENDPOINT_KWARGS = (
    "CustomAttributes",
    "TargetModel",
    "TargetVariant",
    "TargetContainerHostname",
    "InferenceId",
    "EnableExplanations",
    "InferenceComponentName",
    "SessionId",
)
"""What SageMaker's ``invoke_endpoint`` takes besides the body (Vantiq's ``endpoint_kwargs``)."""


def _openai_base_url(provider: ProviderSpec, local_url: str | None) -> str:
    """Where an OpenAI-family provider's requests go (a local server's own URL first)."""
    if provider.kind is ProviderKind.OPENAI:
        if not provider.api_key:
            raise ProviderConfigError(f"provider {provider.code}: kind 'openai' needs api_key")
        return provider.base_url or _OPENAI_URL
    if local_url is not None:
        return local_url
    if not provider.base_url:
        raise ProviderConfigError(
            f"provider {provider.code}: kind 'openai-compatible' needs base_url"
        )
    return provider.base_url


def _kwargs(code: str, settings: Mapping[str, Any], name: str) -> dict[str, Any]:
    value = settings.get(name)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProviderConfigError(f"provider {code}: settings.{name} must be an object")
    return dict(cast("dict[str, Any]", value))


_LOCAL_SETTINGS = ("model_path", "chat_format", "n_ctx", "n_threads")


def local_server_options(provider: ProviderSpec) -> dict[str, Any]:
    """Check a ``local`` provider's settings and turn them into server options.

    Args:
        provider: a provider of kind ``local``.

    Returns:
        Keyword arguments for :meth:`LocalServers.base_url`.

    Raises:
        ProviderConfigError: a setting is unknown or has the wrong type; the
            message names it and the settings that exist.
    """
    settings = provider.settings
    unknown = sorted(k for k in settings if k not in _LOCAL_SETTINGS)
    if unknown:
        raise ProviderConfigError(
            f"provider {provider.code}: kind 'local' has no setting {', '.join(unknown)}; "
            f"its settings are {', '.join(_LOCAL_SETTINGS)}"
        )
    options: dict[str, Any] = {}
    for name in ("model_path", "chat_format"):
        value = settings.get(name)
        if value is not None:
            if not isinstance(value, str) or not value:
                raise ProviderConfigError(
                    f"provider {provider.code}: settings.{name} must be a non-empty string"
                )
            options[name] = value
    for name, least in (("n_ctx", 256), ("n_threads", 1)):
        value = settings.get(name)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ProviderConfigError(
                    f"provider {provider.code}: settings.{name} must be an integer of at "
                    f"least {least} (got {value!r})"
                )
            options[name] = value
    return options


def _expiring(entry: _Entry) -> bool:
    return entry.expires_at is not None and entry.expires_at - time.time() < (
        _CREDENTIAL_MARGIN_SECONDS
    )


def google_safety_settings(value: object) -> list[dict[str, str]]:
    """Turn ``{harm category: threshold}`` into Gemini's safety settings list.

    Categories may omit the ``HARM_CATEGORY_`` prefix and are case-insensitive
    (``harassment`` -> ``HARM_CATEGORY_HARASSMENT``); thresholds are Gemini's
    names (``BLOCK_NONE``, ``BLOCK_ONLY_HIGH``, ``BLOCK_MEDIUM_AND_ABOVE``,
    ``BLOCK_LOW_AND_ABOVE``, ``OFF``).

    Args:
        value: the provider's ``safety_settings`` setting, or ``None``.

    Returns:
        The list, in the mapping's order.

    Raises:
        ProviderConfigError: the value is not a mapping of strings.
    """
    if value is None:
        return []
    if not isinstance(value, Mapping):
        raise ProviderConfigError("settings.safety_settings must map harm category to threshold")
    out: list[dict[str, str]] = []
    for category, threshold in value.items():  # pyright: ignore[reportUnknownVariableType]
        if not isinstance(category, str) or not isinstance(threshold, str):
            raise ProviderConfigError(
                "settings.safety_settings must map harm category names to threshold names"
            )
        # The guide's spellings ("BLOCK_LOW_AND ABOVE") are Gemini's names with a space.
        out.append(
            {
                "category": safety_name(category, "HARM_CATEGORY_"),
                "threshold": safety_name(threshold),
            }
        )
    return out
