"""Compiled provider and model specs: what the factory needs to build a model.

The runtime compiles these once per catalog version from the catalog's
Provider and Model rows, with ``@secrets(NAME)`` references already resolved,
so building or looking up a model never touches the store or the secrets file.
"""

from __future__ import annotations

__all__ = [
    "custom_config_options",
    "ModelSpec",
    "ProviderSpec",
    "compile_model_spec",
    "secret_values",
]

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from functools import cached_property
from typing import TYPE_CHECKING, Any, Final, cast

from pilothouse.catalog._enums import ModelCapability, ProviderKind
from pilothouse.providers._profile import ModelProfile, profile_for

_KIND_PROFILE: Final = ModelProfile()
"""Marks a spec built without a profile: it gets its provider kind's."""

if TYPE_CHECKING:
    from pilothouse.catalog._views import ModelRecord
    from pilothouse.providers._options import ModelOptions
    from pilothouse.providers._secrets import SecretSource


@dataclass(frozen=True)
class ProviderSpec:
    """One provider (vendor endpoint and credentials) as the factory sees it.

    Attributes:
        code: the provider's catalog code, e.g. ``OPENAI``.
        kind: which API it speaks, so which adapter serves it.
        base_url: the endpoint, when not the vendor's default.
        api_key: the already-resolved secret value, or ``None``.
        headers: extra HTTP headers sent with every request (values may be
            secrets, so they are never shown by ``repr``).
        settings: kind-specific values, e.g. Azure ``api_version``, Bedrock
            ``region``, SageMaker ``endpoint_name`` (see ``docs/providers.md``).
    """

    code: str
    kind: ProviderKind
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    headers: Mapping[str, str] = field(default_factory=dict[str, str], repr=False)
    settings: Mapping[str, Any] = field(default_factory=dict[str, Any], repr=False)

    def __repr__(self) -> str:
        # Hand-written so that neither the key nor header values (often bearer
        # tokens) nor secret-bearing settings can reach a log line via repr().
        key = "set" if self.api_key else "unset"
        header_names = sorted(self.headers)
        setting_names = sorted(self.settings)
        return (
            f"ProviderSpec(code={self.code!r}, kind={self.kind.value!r}, "
            f"base_url={self.base_url!r}, api_key=<{key}>, headers={header_names!r}, "
            f"settings={setting_names!r})"
        )

    def __hash__(self) -> int:
        # The mapping fields are not hashable, so hash the digest of all fields.
        return hash(self._digest)

    def fingerprint(self) -> str:
        """Return a stable digest of every field, for use as a cache key.

        Two specs with equal fields share one cached client; a changed key or
        setting gives a new digest, so a new catalog version rebuilds.
        """
        return self._digest

    @cached_property
    def _digest(self) -> str:
        # Computed once per spec: the factory looks it up on every call, and
        # specs are immutable (the runtime compiles new ones per catalog version).
        payload = json.dumps(
            {
                "code": self.code,
                "kind": self.kind.value,
                "base_url": self.base_url,
                "api_key": self.api_key,
                "headers": dict(self.headers),
                "settings": dict(self.settings),
            },
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(payload.encode()).hexdigest()


@dataclass(frozen=True)
class ModelSpec:
    """One model of a provider, with what it can do and what it costs.

    Attributes:
        code: the model's catalog code, e.g. ``GPT4OMINI``.
        provider: the provider serving it.
        model_name: the vendor's model id (or Azure deployment, Bedrock model
            id, SageMaker label).
        capabilities: what the model can do.
        input_price: price per one million input tokens, when known.
        output_price: price per one million output tokens, when known.
        knowledge_cutoff: the model's training cutoff, when known.
        profile: how the run loop talks to the model; the provider kind's
            profile (:func:`profile_for`) unless given.
    """

    code: str
    provider: ProviderSpec
    model_name: str
    capabilities: frozenset[ModelCapability] = frozenset()
    input_price: Decimal | None = None
    output_price: Decimal | None = None
    knowledge_cutoff: date | None = None
    profile: ModelProfile = _KIND_PROFILE

    def __post_init__(self) -> None:
        if self.profile is _KIND_PROFILE:
            object.__setattr__(self, "profile", profile_for(self.provider.kind))

    def __hash__(self) -> int:
        return hash(self._digest)

    def fingerprint(self) -> str:
        """Return a stable digest of the model and its provider, for caching."""
        return self._digest

    @cached_property
    def _digest(self) -> str:
        payload = json.dumps(
            [self.code, self.model_name, self.provider.fingerprint()], separators=(",", ":")
        )
        return hashlib.sha256(payload.encode()).hexdigest()


def secret_values(spec: ModelSpec) -> tuple[str, ...]:
    """The provider's resolved secrets: its key and every header value.

    Masked wherever a vendor's message quotes them back (errors, audit).
    """
    provider = spec.provider
    values = [provider.api_key or "", *provider.headers.values()]
    # Very short values would mask ordinary words; keys are never that short.
    return tuple(v for v in values if len(v) >= 6)


# The guide's "openai/<model-name>" names OpenAI or "a model compatible with
# OpenAI" (its Ollama example: openai/llama3.2:latest), so the prefix is
# Vantiq's on every kind that speaks OpenAI's protocol and is removed once.
# A server whose own ids start with it (OpenRouter's "openai/gpt-4o") is
# written as Vantiq needs it too: openai/openai/gpt-4o.
_OPENAI_LIKE = frozenset({ProviderKind.OPENAI, ProviderKind.OPENAI_COMPATIBLE, ProviderKind.OLLAMA})

# Vantiq's model-name prefixes (seed 004) and the provider kinds they name.
VANTIQ_PREFIXES: Final[dict[str, frozenset[ProviderKind]]] = {
    "openai/": _OPENAI_LIKE,
    "bedrock/": frozenset({ProviderKind.BEDROCK}),
    "google-genai/": frozenset({ProviderKind.GOOGLE}),
    # NVIDIA NIM serves the OpenAI API.
    "nvidia-nim/": frozenset({ProviderKind.OPENAI_COMPATIBLE}),
}

# Vantiq's whole model names whose model is named in the settings instead.
VANTIQ_NAMES: Final[dict[str, tuple[ProviderKind, str]]] = {
    "azure-openai": (ProviderKind.AZURE, "deployment"),
    "azure-openai-embedding": (ProviderKind.AZURE, "deployment"),
    "sagemaker": (ProviderKind.SAGEMAKER, "endpoint_name"),
    "sagemaker-embedding": (ProviderKind.SAGEMAKER, "endpoint_name"),
}


def vendor_model_name(
    provider_code: str, kind: ProviderKind, settings: Mapping[str, Any], model_name: str
) -> str:
    """Return the model id the vendor gets for a catalog ``model_name``.

    A Vantiq model name (``openai/gpt-4o``, ``bedrock/<modelId>``,
    ``google-genai/gemini-2.0-flash``, ``nvidia-nim/<model>``) loses its
    prefix, once (``openai/`` on openai, openai-compatible and ollama
    providers alike, so an OpenRouter id ``openai/gpt-4o`` is written
    ``openai/openai/gpt-4o``); ``azure-openai`` and ``sagemaker`` (and their ``-embedding``
    forms) name the provider's ``settings.deployment`` / ``endpoint_name``.
    A model name that is not a Vantiq one is sent as it is.

    Raises:
        ProviderConfigError: the prefix names another kind of provider, or the
            setting a whole Vantiq name needs is missing.
    """
    from pilothouse.providers._errors import ProviderConfigError

    if kind is ProviderKind.TEST:
        return model_name
    if "class_name" in settings:
        # A Vantiq custom configuration names the model itself; the catalog
        # model's name is descriptive, as the guide says of such definitions.
        custom = settings.get("model_name") or settings.get("model_id")
        if not custom:
            raise ProviderConfigError(
                f"provider {provider_code}: a class_name configuration needs "
                "settings.model_name (ChatOpenAI) or settings.model_id (Bedrock)"
            )
        return str(custom)
    whole = VANTIQ_NAMES.get(model_name)
    if whole is not None:
        wanted, setting = whole
        if kind is not wanted:
            raise ProviderConfigError(
                f"model name '{model_name}' is Vantiq's name for a {wanted.value} model; "
                f"provider {provider_code} is kind '{kind.value}'"
            )
        value = settings.get(setting)
        if not value:
            raise ProviderConfigError(
                f"model name '{model_name}' needs the provider's settings.{setting} "
                f"(provider {provider_code})"
            )
        return str(value)
    for prefix, kinds in VANTIQ_PREFIXES.items():
        if model_name.startswith(prefix) and len(model_name) > len(prefix):
            if kind not in kinds:
                names = " or ".join(sorted(k.value for k in kinds))
                raise ProviderConfigError(
                    f"model name '{model_name}': the prefix {prefix} names a {names} provider; "
                    f"provider {provider_code} is kind '{kind.value}'"
                )
            return model_name[len(prefix) :]
    return model_name


def compile_model_spec(model: ModelRecord, secrets: SecretSource) -> ModelSpec:
    """Build the spec of a catalog model, with its provider's secrets resolved.

    Args:
        model: the catalog row, its provider loaded.
        secrets: resolves ``@secrets(NAME)`` references, in the scope of the
            provider row's tenant (never another tenant's).

    Returns:
        The spec the factory (or an embedder) is built from.
    """
    provider = model.provider
    # The row's own tenant picks the scope: a stored row never reads
    # another tenant's secrets, whoever runs it.
    resolve = secrets.for_tenant(provider.tenant).resolve
    return ModelSpec(
        code=model.code,
        provider=ProviderSpec(
            code=provider.code,
            kind=provider.kind,
            base_url=provider.base_url,
            api_key=resolve(provider.api_key) if provider.api_key else None,
            headers={str(k): resolve(str(v)) for k, v in provider.headers.items()},
            # AWS keys (and any other setting) may be @secrets(NAME) references:
            # the factory gets their values, never the reference text.
            settings={
                str(k): resolve(v) if isinstance(v, str) else v
                for k, v in provider.settings.items()
            },
        ),
        model_name=vendor_model_name(
            provider.code, provider.kind, provider.settings, model.model_name
        ),
        capabilities=frozenset(ModelCapability(c) for c in model.capabilities),
        input_price=model.input_price,
        output_price=model.output_price,
        knowledge_cutoff=model.knowledge_cutoff,
    )


def custom_config_options(
    provider_code: str, settings: Mapping[str, Any], kind: ProviderKind | None = None
) -> ModelOptions:
    """The normalized options a provider's Vantiq configuration sets (seed 004).

    A ``class_name`` configuration's parameters; a ``bedrock`` provider's
    ``model_kwargs`` (Titan's ``maxTokenCount`` is ``max_tokens``, ...); a
    ``sagemaker`` provider's ``model_kwargs`` that are its format's names of
    options (``max_new_tokens``). They are the model's own, so they override
    the action's configuration; a per-call runtime config still overrides them.

    Args:
        provider_code: for messages.
        settings: the provider's settings.
        kind: the provider's kind (the ``model_kwargs`` are read by kind).

    Returns:
        The options (all None when the settings set none).

    Raises:
        ProviderConfigError: a value of the wrong type or range, named.
    """
    from pilothouse.providers._errors import ProviderConfigError
    from pilothouse.providers._options import ModelOptions

    if "class_name" not in settings:
        given = _kwargs_options(provider_code, settings, kind)
    else:
        names = ("temperature", "max_tokens", "top_p", "top_k", "stop")
        names += ("presence_penalty", "frequency_penalty")
        given = {name: settings[name] for name in names if name in settings}
    if not given:
        return ModelOptions()
    try:
        return ModelOptions.parse(given)
    except ValueError as exc:
        raise ProviderConfigError(f"provider {provider_code}: settings: {exc}") from None


def _kwargs_options(
    provider_code: str, settings: Mapping[str, Any], kind: ProviderKind | None
) -> dict[str, Any]:
    kwargs = settings.get("model_kwargs")
    if not isinstance(kwargs, dict) or not kwargs:
        return {}
    given = cast(dict[str, Any], kwargs)
    if kind is ProviderKind.BEDROCK:
        from pilothouse.catalog._vantiq import kwargs_options

        return kwargs_options(given, "settings.model_kwargs")[0]
    if kind is ProviderKind.SAGEMAKER:
        # The guide's max_new_tokens: 350 is the configuration's max_tokens
        # under the container's name: the explicit kwarg wins over it.
        from pilothouse.providers._sagemaker_formats import SageMakerFormat, format_setting

        value = format_setting(provider_code, settings)
        if value is None:
            return {}
        names = SageMakerFormat.from_config(value).parameter_names
        return {option: given[native] for option, native in names.items() if native in given}
    return {}
