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

__all__ = [
    "CLASS_OPTIONS",
    "VANTIQ_CLASSES",
    "KWARG_OPTIONS",
    "SAFETY_CATEGORIES",
    "SAFETY_THRESHOLDS",
    "SettingsIssues",
    "class_settings_keys",
    "kwargs_options",
    "safety_name",
    "read_custom_config",
]

from typing import Any, cast

from pilothouse.catalog._enums import ProviderKind


class SettingsIssues(ValueError):
    """Every broken rule of a provider's settings, each at its own key.

    Pydantic keeps one error per validator; the catalog's validation reads
    ``issues`` from the error to report each key on its own line.

    Args:
        issues: ``(location, rule)`` pairs, the location within the provider.
    """

    def __init__(self, issues: list[tuple[tuple[str, ...], str]]) -> None:
        super().__init__("; ".join(f"{'.'.join(loc)}: {rule}" for loc, rule in issues))
        self.issues = issues


KWARG_OPTIONS: dict[str, str] = {
    "maxTokenCount": "max_tokens",
    "maxTokens": "max_tokens",
    "max_new_tokens": "max_tokens",
    "max_tokens": "max_tokens",
    "temperature": "temperature",
    "topP": "top_p",
    "top_p": "top_p",
    "topK": "top_k",
    "top_k": "top_k",
    "stopSequences": "stop",
    "stop": "stop",
}
"""Model kwargs the guide writes (Titan's ``maxTokenCount``, ...) and the option each is.

The guide: "``max_tokens`` is an alias to ``model_kwargs.maxTokenCount`` for
the Bedrock Titan model"; Converse takes the normalized names for every model.
"""


def kwargs_options(kwargs: dict[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """Read a ``model_kwargs`` object as normalized options.

    Args:
        kwargs: the object as written.
        where: its name in messages (``settings.model_kwargs``).

    Returns:
        The options, and one rule per key that is no option (what to write
        instead) or names an option twice.
    """
    options: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in kwargs.items():
        option = KWARG_OPTIONS.get(key)
        if option is None:
            problems.append(
                f"{where}.{key} is not read here; write one of "
                f"{', '.join(sorted(set(KWARG_OPTIONS.values())))} "
                "(Titan's maxTokenCount is max_tokens, topP top_p, stopSequences stop)"
            )
        elif option in options:
            problems.append(f"{where}.{key} names {option} again; keep one")
        else:
            options[option] = value
    return options, problems


SAFETY_CATEGORIES = (
    "HARM_CATEGORY_HARASSMENT",
    "HARM_CATEGORY_HATE_SPEECH",
    "HARM_CATEGORY_SEXUALLY_EXPLICIT",
    "HARM_CATEGORY_DANGEROUS_CONTENT",
    "HARM_CATEGORY_CIVIC_INTEGRITY",
)
"""Gemini's harm categories (the guide lists the first four)."""

SAFETY_THRESHOLDS = (
    "BLOCK_LOW_AND_ABOVE",
    "BLOCK_MEDIUM_AND_ABOVE",
    "BLOCK_ONLY_HIGH",
    "BLOCK_NONE",
    "OFF",
)
"""Gemini's block thresholds."""


def safety_name(text: str, prefix: str = "") -> str:
    """A harm category or threshold as Gemini spells it.

    The guide writes ``BLOCK_LOW_AND ABOVE`` (a space for an underscore) and
    categories may leave out ``HARM_CATEGORY_``: both are read as Gemini's names.
    """
    name = "_".join(text.upper().split())
    return name if name.startswith(prefix) else f"{prefix}{name}"


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
    # Every key the configuration does not take, at once (one round to fix them).
    unknown: list[tuple[tuple[str, ...], str]] = []
    for key, value in settings.items():
        target = moved.get(key)
        if target is None:
            if key not in kept:
                extra = (
                    " (an embedding model's model_kwargs are not sent: leave them out)"
                    if key == "model_kwargs"
                    else ""
                )
                unknown.append(
                    (
                        ("settings", key),
                        f"not a key of a {class_name} configuration; write "
                        f"{', '.join(sorted({*kept, *moved}))}{extra}",
                    )
                )
                continue
            if key == "model_kwargs" and not isinstance(value, dict):
                unknown.append(
                    (
                        ("settings", key),
                        'must be a JSON object of the model\'s own parameters, e.g. {"top_k": 50}',
                    )
                )
                continue
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
    if unknown:
        raise SettingsIssues(unknown)
    if not isinstance(translated.get(model_key), str) or not translated[model_key]:
        raise ValueError(
            f"settings.{model_key} is required with class_name '{class_name}': the model "
            "the server runs"
        )
    out["settings"] = translated
    return out
