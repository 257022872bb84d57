"""Compiled provider and model specs: what the factory needs to build a model.

The runtime compiles these once per catalog version from the catalog's
Provider and Model rows, with ``@secrets(NAME)`` references already resolved,
so building or looking up a model never touches the store or the secrets file.
"""

from __future__ import annotations

__all__ = ["ModelSpec", "ProviderSpec", "secret_values"]

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import date
from decimal import Decimal
from functools import cached_property
from typing import Any, Final

from pilothouse.catalog._enums import ModelCapability, ProviderKind
from pilothouse.providers._profile import ModelProfile, profile_for

_KIND_PROFILE: Final = ModelProfile()
"""Marks a spec built without a profile: it gets its provider kind's."""


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
