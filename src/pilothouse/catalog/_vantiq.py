"""Vantiq's ``class_name`` custom LLM configurations (seed 004), read as provider settings.

A migrating user pastes the guide's custom configuration into a provider's
``settings``; it is read once, here, into pilothouse's own fields so that
every way in (YAML, REST) and every way out (export) sees one shape:

- ``vantiq.llms.ChatOpenAI``: ``openai_api_base`` / ``base_url`` become the
  provider's ``base_url``, ``openai_api_key`` / ``api_key`` its ``api_key``
  (a ``@secrets(NAME)`` reference, like every key); ``model_name`` stays in
  ``settings``: it is what the server gets, whatever the catalog model's own
  (descriptive) ``model_name``, as the guide says of a custom definition.
- ``vantiq.llms.ChatAWSBedrockConverse`` and
  ``vantiq.embeddings.BedrockEmbeddings``: ``aws_region``,
  ``aws_access_key_id``, ``aws_secret_access_key``, ``aws_role_arn`` become
  ``settings.region``, ``access_key_id``, ``secret_access_key``,
  ``role_arn``; ``model_id`` stays: it is the Bedrock ``modelId`` called.
- the guide's normalized parameters (``temperature``, ``max_tokens``,
  ``top_p``, ``top_k``, ``stop``, ``presence_penalty``,
  ``frequency_penalty``) stay in ``settings``: they are the model's own
  options, over the action's configuration (a runtime config still wins).

Anything else in such a configuration is refused naming the key.
"""

from __future__ import annotations

__all__ = ["CLASS_OPTIONS", "VANTIQ_CLASSES", "class_settings_keys", "read_custom_config"]

from typing import Any, cast

from pilothouse.catalog._enums import ProviderKind

_OPENAI_KINDS = (ProviderKind.OPENAI_COMPATIBLE, ProviderKind.OPENAI, ProviderKind.OLLAMA)

VANTIQ_CLASSES: dict[str, tuple[ProviderKind, ...]] = {
    "vantiq.llms.ChatOpenAI": _OPENAI_KINDS,
    "vantiq.llms.ChatAWSBedrockConverse": (ProviderKind.BEDROCK,),
    "vantiq.embeddings.BedrockEmbeddings": (ProviderKind.BEDROCK,),
}
"""The guide's classes and the provider kinds that serve them (the first is the default)."""

CLASS_OPTIONS = (
    "temperature",
    "max_tokens",
    "top_p",
    "top_k",
    "stop",
    "presence_penalty",
    "frequency_penalty",
)
"""The guide's normalized configuration parameters."""

# Keys moved out of settings: to a provider field ("field:") or another setting.
_MOVED: dict[str, dict[str, str]] = {
    "vantiq.llms.ChatOpenAI": {
        "openai_api_base": "field:base_url",
        "base_url": "field:base_url",
        "openai_api_key": "field:api_key",
        "api_key": "field:api_key",
    },
    "bedrock": {
        "aws_region": "region",
        "aws_access_key_id": "access_key_id",
        "aws_secret_access_key": "secret_access_key",
        "aws_role_arn": "role_arn",
    },
}
_MODEL_KEY = {"vantiq.llms.ChatOpenAI": "model_name", "bedrock": "model_id"}


def _family(class_name: str) -> str:
    return "vantiq.llms.ChatOpenAI" if class_name.endswith("ChatOpenAI") else "bedrock"


def class_settings_keys(settings: dict[str, Any]) -> tuple[str, ...]:
    """The settings keys a translated custom configuration keeps (none without one).

    Args:
        settings: a provider's settings.

    Returns:
        ``class_name``, the model key and the normalized parameters.
    """
    class_name = settings.get("class_name")
    if not isinstance(class_name, str):
        return ()
    return ("class_name", _MODEL_KEY[_family(class_name)], *CLASS_OPTIONS, *_extra(class_name))


BEDROCK_CHAT = "vantiq.llms.ChatAWSBedrockConverse"


def _extra(class_name: str) -> tuple[str, ...]:
    # The guide's optional model_kwargs: the model's own parameters, sent as
    # Converse's additionalModelRequestFields.
    return ("model_kwargs",) if class_name == BEDROCK_CHAT else ()


def read_custom_config(data: dict[str, Any]) -> dict[str, Any]:
    """Read a provider whose settings hold a ``class_name`` custom configuration.

    Args:
        data: the provider as given (YAML or JSON).

    Returns:
        The provider with the configuration's keys in pilothouse's places.

    Raises:
        ValueError: an unknown class, a kind that cannot serve it, a key the
            configuration does not take, a key given twice, or no model id.
    """
    raw_settings = data.get("settings")
    if not isinstance(raw_settings, dict):
        return data
    settings = dict(cast(dict[str, Any], raw_settings))
    class_name = settings.get("class_name")
    if class_name is None:
        return data
    if not isinstance(class_name, str) or class_name not in VANTIQ_CLASSES:
        raise ValueError(
            f"settings.class_name '{class_name}' is not a Vantiq class pilothouse reads; "
            f"write one of {', '.join(VANTIQ_CLASSES)}"
        )
    kinds = VANTIQ_CLASSES[class_name]
    out = dict(data)
    kind = out.setdefault("kind", kinds[0].value)
    if kind not in {k.value for k in kinds}:
        raise ValueError(
            f"settings.class_name '{class_name}' is served by a provider of kind "
            f"{' or '.join(k.value for k in kinds)}, not '{kind}'"
        )
    family = _family(class_name)
    moved = _MOVED[family]
    model_key = _MODEL_KEY[family]
    kept = {"class_name", model_key, *CLASS_OPTIONS, *_extra(class_name)}
    translated: dict[str, Any] = {}
    for key, value in settings.items():
        target = moved.get(key)
        if target is None:
            if key not in kept:
                extra = (
                    " (an embedding model's model_kwargs are not sent: leave them out)"
                    if key == "model_kwargs"
                    else ""
                )
                raise ValueError(
                    f"settings.{key} is not a key of a {class_name} configuration; write "
                    f"{', '.join(sorted({*kept, *moved}))}{extra}"
                )
            if key == "model_kwargs" and not isinstance(value, dict):
                raise ValueError(
                    "settings.model_kwargs must be a JSON object of the model's own "
                    'parameters, e.g. {"top_k": 50}'
                )
            translated[key] = value
            continue
        if target.startswith("field:"):
            field = target.removeprefix("field:")
            if out.get(field) is not None and out[field] != value:
                raise ValueError(
                    f"settings.{key} and the provider field {field} are both given; keep one"
                )
            out[field] = value
        else:
            if target in translated:
                raise ValueError(f"settings.{key} is given twice (also as {target}); keep one")
            translated[target] = value
    if not isinstance(translated.get(model_key), str) or not translated[model_key]:
        raise ValueError(
            f"settings.{model_key} is required with class_name '{class_name}': the model "
            "the server runs"
        )
    out["settings"] = translated
    return out
