"""Model access: compiled catalog specs -> pydantic-ai models.

pydantic-ai's model layer is the provider layer; pilothouse owns the loop
above it. This package compiles nothing itself: the runtime hands it
:class:`ModelSpec` objects (with secrets resolved by :class:`SecretResolver`)
and gets back cached pydantic-ai models from :class:`ModelFactory`, settings
from :func:`to_model_settings`, and pilothouse errors from
:func:`translate_error`. Vendor SDKs are imported only when a kind is used.
"""

from __future__ import annotations

__all__ = [
    "BUILTIN_MODELS",
    "SECRET_REFERENCE",
    "DEFAULT_PROFILE",
    "LOCAL_PROFILE",
    "ChatTurn",
    "DeploymentSecrets",
    "LocalModelServers",
    "LocalServer",
    "LocalServers",
    "MissingExtraError",
    "ModelRequestsBlockedError",
    "ModelFactory",
    "ModelIntegrityError",
    "ModelOptions",
    "ModelProfile",
    "ModelSpec",
    "ProviderConfigError",
    "ProviderSpec",
    "SageMakerEmbedder",
    "SageMakerFormat",
    "SecretResolver",
    "SecretSource",
    "is_secret_reference",
    "profile_for",
    "redact",
    "secret_values",
    "to_model_settings",
    "translate_error",
    "uses_responses_api",
    "wire_notes",
]

from typing import TYPE_CHECKING, Any

from pilothouse.providers._errors import (
    MissingExtraError,
    ProviderConfigError,
    redact,
    translate_error,
)
from pilothouse.providers._factory import LocalServers, ModelFactory
from pilothouse.providers._guard import ModelRequestsBlockedError
from pilothouse.providers._local_models import BUILTIN_MODELS, ModelIntegrityError
from pilothouse.providers._options import ModelOptions, to_model_settings, uses_responses_api
from pilothouse.providers._profile import (
    DEFAULT_PROFILE,
    LOCAL_PROFILE,
    ModelProfile,
    profile_for,
)
from pilothouse.providers._secrets import (
    SECRET_REFERENCE,
    DeploymentSecrets,
    SecretResolver,
    SecretSource,
    is_secret_reference,
)
from pilothouse.providers._spec import ModelSpec, ProviderSpec, secret_values
from pilothouse.providers._wire import wire_notes

if TYPE_CHECKING:
    from pilothouse.providers._local import LocalModelServers, LocalServer
    from pilothouse.providers._sagemaker import SageMakerEmbedder
    from pilothouse.providers._sagemaker_formats import ChatTurn, SageMakerFormat


def __getattr__(name: str) -> Any:
    # SageMakerEmbedder lives beside the SageMaker model, which imports
    # pydantic-ai; load it only when asked for.
    if name == "SageMakerEmbedder":
        from pilothouse.providers._sagemaker import SageMakerEmbedder

        return SageMakerEmbedder
    # SageMaker's prompt formats: only where a SageMaker endpoint is used.
    if name in ("ChatTurn", "SageMakerFormat"):
        from pilothouse.providers import _sagemaker_formats

        return getattr(_sagemaker_formats, name)
    # The llama.cpp server manager is needed only where a local model runs.
    if name in ("LocalModelServers", "LocalServer"):
        from pilothouse.providers import _local

        return getattr(_local, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
