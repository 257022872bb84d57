"""Request and response shapes of SageMaker endpoints.

A SageMaker endpoint takes whatever JSON its container defines, so a provider
names a *format*: where the prompt goes (``request_key``, nested 0, 1 or 2
lists deep), where the sampling parameters go (``request_parameters_key``,
under the container's own names), where the answer is in the response
(``response_path``), and which prompt template renders a chat into one string.

Response paths are segments separated by ``.`` or ``,`` (both separators mean
the same: step one level down); a numeric segment indexes a list. So
``0.generated_text`` is ``body[0]["generated_text"]``, ``0,0.generated_text``
is ``body[0][0]["generated_text"]`` and ``generated_texts,0`` is
``body["generated_texts"][0]``. An empty path is the whole body.
"""

from __future__ import annotations

__all__ = [
    "EMBEDDING_FORMATS",
    "MESSAGE_FORMAT_CONFIG_KEYS",
    "GENERATION_FORMATS",
    "ChatTurn",
    "SageMakerFormat",
    "extract_path",
    "format_setting",
    "render_prompt",
]

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal, cast

from pilothouse.errors import UnparseableResponseError
from pilothouse.providers._errors import ProviderConfigError

Template = Literal["plain", "llama2-chat", "llama3-chat", "mistral-instruct"]
_TEMPLATES: tuple[Template, ...] = ("plain", "llama2-chat", "llama3-chat", "mistral-instruct")


@dataclass(frozen=True)
class ChatTurn:
    """One message of a conversation, reduced to what a text endpoint can take.

    Attributes:
        role: ``system``, ``user`` or ``assistant``.
        content: the message text.
    """

    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class SageMakerFormat:
    """How to talk to one SageMaker container.

    Attributes:
        name: the format's name (``custom`` for one given as a mapping).
        request_key: the body key that holds the prompt (or texts to embed).
        request_nesting_level: 0 sends the prompt as a string, 1 in a list,
            2 in a list of lists.
        request_parameters_key: the body key the parameters go under, or
            ``None`` to put them at the top level of the body.
        parameter_names: normalized option name -> the container's name
            (``max_tokens`` -> ``max_new_tokens``); options not listed here
            are not sent.
        parameters: parameters always sent (e.g. ``return_full_text: false``);
            a caller's option with the same native name wins, except that
            list values (stop sequences) are combined.
        response_path: where the generated text (or the embeddings) is.
        template: how a chat is rendered into the prompt string.
        content_type: the request's content type.
    """

    name: str
    request_key: str = "inputs"
    request_nesting_level: int = 0
    request_parameters_key: str | None = "parameters"
    parameter_names: Mapping[str, str] = field(default_factory=dict[str, str])
    parameters: Mapping[str, Any] = field(default_factory=dict[str, Any])
    response_path: str = "0.generated_text"
    template: Template = "plain"
    content_type: str = "application/json"

    @classmethod
    def from_config(
        cls, value: str | Mapping[str, Any], *, embedding: bool = False
    ) -> SageMakerFormat:
        """Build a format from a provider's ``format`` setting.

        Args:
            value: a named format (see ``docs/providers.md``), or a mapping of
                this class's field names; a mapping may name a ``base`` format
                whose fields it overrides.
            embedding: look names up among the embedding formats.

        Returns:
            The format.

        Raises:
            ProviderConfigError: unknown name, unknown key or invalid value.
        """
        named = EMBEDDING_FORMATS if embedding else GENERATION_FORMATS
        if isinstance(value, str):
            if value not in named:
                raise ProviderConfigError(
                    f"SageMaker format '{value}' is not known (known: {', '.join(sorted(named))})"
                )
            return named[value]
        config = dict(value)
        base_name = config.pop("base", None)
        if base_name is not None:
            base = cls.from_config(str(base_name), embedding=embedding)
        else:
            base = SageMakerFormat(name="custom")
        allowed = {f.name for f in fields(cls)} - {"name"}
        for key in config:
            if key not in allowed:
                raise ProviderConfigError(
                    f"SageMaker format key '{key}' is not known "
                    f"(known: {', '.join(sorted(allowed))})"
                )
        built = replace(base, name="custom", **config)
        built.validate()
        return built

    def validate(self) -> None:
        """Check the field values.

        Raises:
            ProviderConfigError: naming the field in error.
        """
        if self.request_nesting_level not in (0, 1, 2):
            raise ProviderConfigError(
                "SageMaker format 'request_nesting_level' must be 0, 1 or 2, "
                f"not {self.request_nesting_level!r}"
            )
        if self.template not in _TEMPLATES:
            raise ProviderConfigError(
                f"SageMaker format 'template' must be one of {', '.join(_TEMPLATES)}, "
                f"not {self.template!r}"
            )
        if not isinstance(self.response_path, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise ProviderConfigError("SageMaker format 'response_path' must be a string")

    def request_body(self, payload: str | Sequence[str], options: Mapping[str, Any]) -> bytes:
        """Serialize one request.

        Args:
            payload: the prompt, or for embeddings the texts (a list is put
                as-is at nesting level 1 and wrapped once more at level 2).
            options: normalized option values (``max_tokens``, ``stop``, ...).

        Returns:
            The JSON body.
        """
        body: dict[str, Any] = {self.request_key: _nest(payload, self.request_nesting_level)}
        params = self.native_parameters(options)
        if params:
            if self.request_parameters_key is None:
                body.update(params)
            else:
                body[self.request_parameters_key] = params
        return json.dumps(body, ensure_ascii=False).encode("utf-8")

    def native_parameters(self, options: Mapping[str, Any]) -> dict[str, Any]:
        """Rename normalized options to the container's names, over the fixed parameters.

        Args:
            options: normalized option values; ``None`` values are skipped.

        Returns:
            The parameters to send: the fixed ones first, then the options in
            the order of ``parameter_names``.
        """
        params: dict[str, Any] = dict(self.parameters)
        # Walk the format's names, not the options: the body's key order is
        # then fixed by the format, so the same call always sends the same bytes.
        for option, native in self.parameter_names.items():
            value = options.get(option)
            if value is None:
                continue
            existing = params.get(native)
            if isinstance(existing, list) and isinstance(value, list):
                merged = [*cast(list[Any], existing)]
                merged.extend(v for v in cast(list[Any], value) if v not in merged)
                params[native] = merged
            else:
                params[native] = value
        return params

    def parse_text(self, body: bytes) -> str:
        """Extract the generated text from a response body.

        Args:
            body: the raw response.

        Returns:
            The text at ``response_path``.

        Raises:
            UnparseableResponseError: the body is not JSON, the path does not
                exist, or the value there is not a string.
        """
        value = extract_path(_decode(body), self.response_path)
        if not isinstance(value, str):
            raise UnparseableResponseError(
                f"SageMaker response path '{self.response_path}' holds "
                f"{type(value).__name__}, not text"
            )
        return value

    def parse_vectors(self, body: bytes, count: int) -> list[list[float]]:
        """Extract embeddings from a response body.

        Args:
            body: the raw response.
            count: how many texts the request carried; one vector (a flat
                list of numbers) is accepted when it was one.

        Returns:
            One vector per text.

        Raises:
            UnparseableResponseError: wrong shape or count.
        """
        value = extract_path(_decode(body), self.response_path)
        if _is_vector(value) and count == 1:
            return [[float(x) for x in cast(list[float], value)]]
        if isinstance(value, list):
            items = cast(list[Any], value)
            if len(items) == count and all(_is_vector(v) for v in items):
                return [[float(x) for x in cast(list[float], v)] for v in items]
        raise UnparseableResponseError(
            f"SageMaker response path '{self.response_path}' does not hold {count} vector(s)"
        )


def _is_vector(value: object) -> bool:
    return isinstance(value, list) and all(
        isinstance(x, int | float) and not isinstance(x, bool) for x in cast(list[Any], value)
    )


def _nest(payload: str | Sequence[str], level: int) -> Any:
    value: Any = payload if isinstance(payload, str) else list(payload)
    if isinstance(payload, str):
        for _ in range(level):
            value = [value]
        return value
    # A batch is already one list deep.
    for _ in range(max(level - 1, 0)):
        value = [value]
    return value


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        raise UnparseableResponseError(f"SageMaker response is not JSON: {body[:200]!r}") from exc


_SEPARATORS = re.compile(r"[.,]")


def extract_path(document: Any, path: str) -> Any:
    """Follow a response path (see the module docstring) into a decoded body.

    Args:
        document: the decoded JSON.
        path: e.g. ``0.generated_text`` or ``generated_texts,0``.

    Returns:
        The value found.

    Raises:
        UnparseableResponseError: naming the path and the segment that failed.
    """
    if not path:
        return document
    current = document
    walked: list[str] = []
    for segment in _SEPARATORS.split(path):
        walked.append(segment)
        if isinstance(current, list) and segment.isdigit():
            items = cast(list[Any], current)
            index = int(segment)
            if index < len(items):
                current = items[index]
                continue
        elif isinstance(current, Mapping):
            mapping = cast(Mapping[str, Any], current)
            if segment in mapping:
                current = mapping[segment]
                continue
        found = type(cast(object, current)).__name__
        raise UnparseableResponseError(
            f"SageMaker response path '{path}' failed at '{'.'.join(walked)}': found {found}"
        )
    return current


def render_prompt(turns: Sequence[ChatTurn], template: Template) -> str:
    r"""Render a conversation into one prompt string for a text endpoint.

    Consecutive turns of the same role are joined with a blank line first.

    * ``plain``: a single user turn is sent as is (after the system text and a
      blank line); a longer chat becomes ``User: ...`` / ``Assistant: ...``
      lines ending with ``Assistant:`` for the model to continue.
    * ``llama2-chat``: ``<s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST]
      {assistant} </s><s>[INST] {user} [/INST]`` (Meta's Llama 2 chat format).
    * ``llama3-chat``: ``<|begin_of_text|>`` then per turn
      ``<|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>``,
      ending with an open assistant header.
    * ``mistral-instruct``: ``<s>[INST] {user} [/INST]{assistant}</s>[INST] ...``;
      Mistral has no system role, so the system text opens the first user turn.

    Args:
        turns: the conversation.
        template: the template name.

    Returns:
        The prompt.
    """
    merged = _merge_turns(turns)
    system = "\n\n".join(t.content for t in merged if t.role == "system")
    chat = [t for t in merged if t.role != "system"]
    if template == "llama3-chat":
        return _llama3(system, chat)
    if template == "llama2-chat":
        return _llama2(system, chat)
    if template == "mistral-instruct":
        return _mistral(system, chat)
    return _plain(system, chat)


def _merge_turns(turns: Sequence[ChatTurn]) -> list[ChatTurn]:
    merged: list[ChatTurn] = []
    for turn in turns:
        if merged and merged[-1].role == turn.role:
            merged[-1] = ChatTurn(turn.role, f"{merged[-1].content}\n\n{turn.content}")
        else:
            merged.append(turn)
    return merged


def _plain(system: str, chat: list[ChatTurn]) -> str:
    if len(chat) == 1 and chat[0].role == "user":
        return f"{system}\n\n{chat[0].content}" if system else chat[0].content
    lines = [system] if system else []
    lines += [f"{'User' if t.role == 'user' else 'Assistant'}: {t.content}" for t in chat]
    lines.append("Assistant:")
    return "\n".join(lines)


def _llama3(system: str, chat: list[ChatTurn]) -> str:
    out = ["<|begin_of_text|>"]
    if system:
        out.append(f"<|start_header_id|>system<|end_header_id|>\n\n{system}<|eot_id|>")
    for turn in chat:
        out.append(f"<|start_header_id|>{turn.role}<|end_header_id|>\n\n{turn.content}<|eot_id|>")
    out.append("<|start_header_id|>assistant<|end_header_id|>\n\n")
    return "".join(out)


def _inst_pairs(chat: list[ChatTurn]) -> list[tuple[str, str | None]]:
    # Pair each user turn with the assistant answer that followed it, if any.
    pairs: list[tuple[str, str | None]] = []
    for turn in chat:
        if turn.role == "user":
            pairs.append((turn.content, None))
        elif pairs and pairs[-1][1] is None:
            pairs[-1] = (pairs[-1][0], turn.content)
        else:
            # An assistant turn with no user turn before it: give it an empty one.
            pairs.append(("", turn.content))
    return pairs


def _llama2(system: str, chat: list[ChatTurn]) -> str:
    out: list[str] = []
    for i, (user, answer) in enumerate(_inst_pairs(chat)):
        if i == 0 and system:
            user = f"<<SYS>>\n{system}\n<</SYS>>\n\n{user}"
        out.append(f"<s>[INST] {user} [/INST]")
        if answer is not None:
            out.append(f" {answer} </s>")
    return "".join(out)


def _mistral(system: str, chat: list[ChatTurn]) -> str:
    out = ["<s>"]
    for i, (user, answer) in enumerate(_inst_pairs(chat)):
        if i == 0 and system:
            user = f"{system}\n\n{user}"
        out.append(f"[INST] {user} [/INST]")
        if answer is not None:
            out.append(f"{answer}</s>")
    return "".join(out)


# Text Generation Inference (TGI) containers: Hugging Face's LLM DLC, which
# JumpStart uses for Falcon, Mistral and Llama 3. Request
# {"inputs": "<prompt>", "parameters": {"max_new_tokens": ..}}, response
# [{"generated_text": "..."}].
_TGI_NAMES: Mapping[str, str] = {
    "max_tokens": "max_new_tokens",
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "stop": "stop",
}

_BASE_FORMATS: Mapping[str, SageMakerFormat] = {
    # Falcon on TGI: {"inputs": "<prompt>", "parameters": {...,
    # "return_full_text": false}} -> [{"generated_text": "..."}].
    "falcon": SageMakerFormat(
        name="falcon",
        parameter_names=_TGI_NAMES,
        parameters={"return_full_text": False},
        response_path="0.generated_text",
    ),
    # The Vantiq guide's named formats (seed 004), exactly as it shows them:
    # GPT-J: {"text_inputs": <input_value>, **model_kwargs}
    #        -> response_json[0][0]["generated_text"].
    "gptj": SageMakerFormat(
        name="gptj",
        request_key="text_inputs",
        request_parameters_key=None,
        parameter_names={
            "max_tokens": "max_length",
            "temperature": "temperature",
            "top_p": "top_p",
            "top_k": "top_k",
        },
        response_path="0,0.generated_text",
    ),
    # Bloom: {"text_inputs": <input_value>, **model_kwargs}
    #        -> response_json["generated_texts"][0].
    "bloom": SageMakerFormat(
        name="bloom",
        request_key="text_inputs",
        request_parameters_key=None,
        parameter_names={
            "max_tokens": "max_length",
            "temperature": "temperature",
            "top_p": "top_p",
            "top_k": "top_k",
        },
        response_path="generated_texts,0",
    ),
    # JumpStart Meta Llama 2 text models: {"inputs": "<prompt>",
    # "parameters": {"max_new_tokens", "temperature", "top_p"}}
    # -> [{"generation": "..."}].
    "llama2": SageMakerFormat(
        name="llama2",
        parameter_names={
            "max_tokens": "max_new_tokens",
            "temperature": "temperature",
            "top_p": "top_p",
        },
        response_path="0.generation",
    ),
    # JumpStart Meta Llama 3 (LMI/TGI container): {"inputs": "<prompt>",
    # "parameters": {...}} -> {"generated_text": "..."} (an object, not a list).
    "llama3": SageMakerFormat(
        name="llama3",
        parameter_names=_TGI_NAMES,
        response_path="generated_text",
    ),
    # Mistral on TGI: as falcon.
    "mistral": SageMakerFormat(
        name="mistral",
        parameter_names=_TGI_NAMES,
        parameters={"return_full_text": False},
        response_path="0.generated_text",
    ),
}
GENERATION_FORMATS: Mapping[str, SageMakerFormat] = {
    **_BASE_FORMATS,
    # The chat variants send the same bodies with the chat rendered through
    # the family's template; llama3-chat also stops at the end-of-turn token.
    "llama2-chat": replace(_BASE_FORMATS["llama2"], name="llama2-chat", template="llama2-chat"),
    "llama3-chat": replace(
        _BASE_FORMATS["llama3"],
        name="llama3-chat",
        template="llama3-chat",
        parameters={"stop": ["<|eot_id|>"]},
    ),
    "mistral-instruct": replace(
        _BASE_FORMATS["mistral"], name="mistral-instruct", template="mistral-instruct"
    ),
}

EMBEDDING_FORMATS: Mapping[str, SageMakerFormat] = {
    # JumpStart text-embedding models (GPT-J 6B embedding, E5, BGE):
    # {"text_inputs": ["a", "b"]} -> {"embedding": [[...], [...]]}.
    "jumpstart": SageMakerFormat(
        name="jumpstart",
        request_key="text_inputs",
        request_nesting_level=1,
        request_parameters_key=None,
        response_path="embedding",
    ),
    # Hugging Face feature-extraction / Text Embeddings Inference:
    # {"inputs": ["a", "b"]} -> [[...], [...]].
    "tei": SageMakerFormat(
        name="tei",
        request_key="inputs",
        request_nesting_level=1,
        request_parameters_key=None,
        response_path="",
    ),
}


MESSAGE_FORMAT_CONFIG_KEYS = (
    "request_key",
    "request_nesting_level",
    "request_parameters_key",
    "response_path",
)
"""The keys of the Vantiq guide's ``message_format_config`` (seed 004)."""


def format_setting(code: str, settings: Mapping[str, Any]) -> str | Mapping[str, Any] | None:
    """Return a SageMaker provider's format: ``format`` or Vantiq's ``message_format_config``.

    ``message_format_config`` is the guide's generic syntax: ``request:
    {"<request_key>": <input_value>, "<request_parameters_key>": model_kwargs}``,
    ``response: response_json<response_path>``; ``request_key`` and
    ``response_path`` are required, ``request_nesting_level`` defaults to 0,
    and without ``request_parameters_key`` the parameters go at the top of the
    body (``{"text_inputs": <input_value>, **model_kwargs}``). It becomes a
    custom format with exactly those fields.

    Args:
        code: the provider's code, for messages.
        settings: the provider's settings.

    Returns:
        A format name, a format mapping, or None when neither is set.

    Raises:
        ProviderConfigError: both are set, or the config has an unknown key,
            lacks a required one, or has a value of the wrong type.
    """
    config = settings.get("message_format_config")
    if config is None:
        return cast("str | Mapping[str, Any] | None", settings.get("format"))
    where = f"provider {code}: settings.message_format_config"
    if "format" in settings:
        raise ProviderConfigError(
            f"provider {code}: settings.format and settings.message_format_config both name "
            "the message format; keep one"
        )
    if not isinstance(config, Mapping):
        raise ProviderConfigError(f"{where} must be an object")
    fields_ = cast("Mapping[str, Any]", config)
    for key in fields_:
        if key not in MESSAGE_FORMAT_CONFIG_KEYS:
            raise ProviderConfigError(
                f"{where}.{key} is not a key of the guide's message format; write "
                f"{', '.join(MESSAGE_FORMAT_CONFIG_KEYS)} (or settings.format for more)"
            )
    for key in ("request_key", "response_path"):
        if not isinstance(fields_.get(key), str):
            raise ProviderConfigError(f"{where}.{key} is required (a string)")
    parameters_key = fields_.get("request_parameters_key")
    if parameters_key is not None and not isinstance(parameters_key, str):
        raise ProviderConfigError(f"{where}.request_parameters_key must be a string")
    level = fields_.get("request_nesting_level", 0)
    if not isinstance(level, int) or isinstance(level, bool):
        raise ProviderConfigError(f"{where}.request_nesting_level must be 0, 1 or 2")
    return {
        "request_key": fields_["request_key"],
        "request_nesting_level": level,
        "request_parameters_key": parameters_key,
        "response_path": fields_["response_path"],
    }
