"""A provider's ``settings``: the keys each kind takes, and every mistake with what to write.

Checked all at once, so a pasted configuration (the Vantiq guide's Azure
JSON has five keys pilothouse names otherwise) is fixed in one round; each
refusal says what to write instead. Separate from ``_spec`` because it is
one rule with many parts, read by the spec and by the file validation.
"""

from __future__ import annotations

__all__ = ["PROVIDER_SETTINGS", "provider_settings_issues", "raw_settings_issues"]

from typing import Any, cast

from pilothouse.catalog._enums import ProviderKind
from pilothouse.catalog._vantiq import (
    SAFETY_CATEGORIES,
    SAFETY_THRESHOLDS,
    class_settings_keys,
    kwargs_options,
    safety_name,
)

_AWS_SETTINGS = ("region", "access_key_id", "secret_access_key", "session_token", "role_arn")

#: The ``settings`` keys each provider kind honours; any other key is refused
#: (it would be accepted and ignored: a mistyped key sent calls elsewhere).
PROVIDER_SETTINGS: dict[ProviderKind, tuple[str, ...]] = {
    ProviderKind.OPENAI: ("api",),
    ProviderKind.OPENAI_COMPATIBLE: ("api",),
    ProviderKind.OLLAMA: ("api",),
    ProviderKind.AZURE: ("resource", "api_version", "deployment", "api"),
    ProviderKind.ANTHROPIC: (),
    ProviderKind.GOOGLE: ("safety_settings",),
    ProviderKind.BEDROCK: (*_AWS_SETTINGS, "threads", "model_kwargs"),
    ProviderKind.SAGEMAKER: (
        *_AWS_SETTINGS,
        "format",
        "message_format_config",
        "endpoint_name",
        "threads",
        "model_kwargs",
        "endpoint_kwargs",
    ),
    ProviderKind.LOCAL: ("model_path", "chat_format", "n_ctx", "n_threads", "threads"),
}

# Names other systems (Vantiq, LangChain) give these settings, and ours.
_SETTING_NAMES = {
    "openai_api_base": "the provider field base_url",
    "base_url": "the provider field base_url",
    "azure_endpoint": "the provider field base_url",
    "openai_api_key": "the provider field api_key, as @secrets(NAME)",
    "api_key": "the provider field api_key, as @secrets(NAME)",
    "azure_deployment": "settings.deployment",
    "openai_api_version": "settings.api_version",
    "region_name": "settings.region",
    "apiKeySecret": 'the provider field api_key as "@secrets(NAME)" with the secret\'s name',
}


def provider_settings_issues(
    kind: ProviderKind, settings: dict[str, Any]
) -> list[tuple[tuple[str, ...], str]]:
    """Every key of a provider's settings its kind does not take, with what to write instead.

    All at once: a pasted configuration (the Vantiq guide's Azure JSON has
    five such keys) is fixed in one round, not five.

    Args:
        kind: the provider's kind.
        settings: its settings (a ``class_name`` configuration already read).

    Returns:
        ``(location, rule)`` per broken rule, the location within the provider.
    """
    known = PROVIDER_SETTINGS.get(kind)
    if known is None:  # kind test: scripted in tests, takes anything
        return []
    known = (*known, *class_settings_keys(settings))
    found: list[tuple[tuple[str, ...], str]] = [
        (("settings", key), _unknown_setting(kind, key, known))
        for key in settings
        if key not in known
    ]
    found += [(("settings",), rule) for rule in _message_format_rules(settings)]
    kwargs = settings.get("model_kwargs")
    if kind is ProviderKind.BEDROCK and "class_name" not in settings and kwargs is not None:
        # On a bedrock/ model (no class_name) the guide's Titan kwargs are the
        # normalized options Converse takes: read as such, the rest refused.
        if not isinstance(kwargs, dict):
            found.append((("settings", "model_kwargs"), "must be a JSON object"))
        else:
            _, problems = kwargs_options(cast(dict[str, Any], kwargs), "settings.model_kwargs")
            found += [(("settings", "model_kwargs"), rule) for rule in problems]
    if kind is ProviderKind.GOOGLE and "safety_settings" in settings:
        found += _safety_issues(settings["safety_settings"])
    return found


def _safety_issues(value: Any) -> list[tuple[tuple[str, ...], str]]:
    where = ("settings", "safety_settings")
    if not isinstance(value, dict):
        return [(where, "must map harm categories to block thresholds")]
    found: list[tuple[tuple[str, ...], str]] = []
    for category, threshold in cast(dict[str, Any], value).items():
        if safety_name(str(category), "HARM_CATEGORY_") not in SAFETY_CATEGORIES:
            found.append(
                (
                    (*where, str(category)),
                    f"not a harm category; write one of {', '.join(SAFETY_CATEGORIES)}",
                )
            )
        if not isinstance(threshold, str) or safety_name(threshold) not in SAFETY_THRESHOLDS:
            found.append(
                (
                    (*where, str(category)),
                    f"not a block threshold; write one of {', '.join(SAFETY_THRESHOLDS)}",
                )
            )
    return found


def raw_settings_issues(raw: dict[str, Any]) -> list[tuple[tuple[str, ...], str]]:
    """:func:`provider_settings_issues` of a provider given as plain data that failed elsewhere.

    Nothing is said when the kind is not a kind or the settings are a
    ``class_name`` configuration (read, and checked, with the rest).
    """
    settings = raw.get("settings")
    if not isinstance(settings, dict) or "class_name" in settings:
        return []
    try:
        kind = ProviderKind(raw.get("kind"))
    except ValueError:
        return []
    return provider_settings_issues(kind, cast(dict[str, Any], settings))


def _unknown_setting(kind: ProviderKind, key: str, known: tuple[str, ...]) -> str:
    instead = _SETTING_NAMES.get(key)
    if instead is not None:
        hint = f"write {instead} instead"
    elif key in _OPTION_NAMES:
        hint = (
            f"a model option: write {key} in a configuration (configurations: "
            f"- code: ..., {key}: ...) named by the action, or in the runtime config"
        )
    else:
        hint = f"kind '{kind.value}' takes {', '.join(known) or 'no settings'}"
    return f"not a setting of this provider; {hint}"


# The Vantiq guide's normalized parameters: options of a call, not of a provider
# (a class_name configuration keeps them: _vantiq.py).
_OPTION_NAMES = frozenset(
    {"temperature", "max_tokens", "top_p", "top_k", "stop", "presence_penalty", "frequency_penalty"}
)


# The Vantiq guide's message_format_config keys (seed 004); the provider
# layer turns them into a SageMaker format (providers/_sagemaker_formats.py).
_MESSAGE_FORMAT_KEYS = (
    "request_key",
    "request_nesting_level",
    "request_parameters_key",
    "response_path",
)


def _message_format_rules(settings: dict[str, Any]) -> list[str]:
    """Every broken rule of a ``message_format_config``, at once."""
    config = settings.get("message_format_config")
    if config is None:
        return []
    if "format" in settings:
        return [
            "settings.format and settings.message_format_config both name the message "
            "format; keep one"
        ]
    if not isinstance(config, dict):
        return ["settings.message_format_config must be an object"]
    fields = cast(dict[str, Any], config)
    rules = [
        f"settings.message_format_config.{key} is not a key of the guide's message "
        f"format; write {', '.join(_MESSAGE_FORMAT_KEYS)} (or settings.format for more)"
        for key in fields
        if key not in _MESSAGE_FORMAT_KEYS
    ]
    rules += [
        f"settings.message_format_config.{key} is required (a string)"
        for key in ("request_key", "response_path")
        if not isinstance(fields.get(key), str)
    ]
    if fields.get("request_nesting_level", 0) not in (0, 1, 2):
        rules.append("settings.message_format_config.request_nesting_level must be 0, 1 or 2")
    return rules
