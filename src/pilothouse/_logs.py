"""Structured logs: every line of a request names its request, conversation and trace.

The ids live in context variables, so whatever logs while a request is
served (a route, the run loop, a tool, uvicorn's access line) carries them
without passing them along: the HTTP service binds the request id (and a
conversation id its path names) as a request arrives
(:func:`bind_request`), the run loop binds the conversation of the turn it
runs (:func:`bind_conversation`), and the trace id is the current
OpenTelemetry span's, when tracing is on.

:func:`logging_config` is the ``logging.config.dictConfig`` of
``pilothouse serve --log-format json``: one JSON object per line on
standard error, from pilothouse's loggers and uvicorn's alike. API keys,
provider keys and ``Authorization`` values are masked in every message and
stack trace, as a last line of defence: nothing is meant to log them. So are
the values of credential-like query parameters (:func:`sensitive_query_key`:
``?api_key=``, ``?token=``, ...), in the JSON lines and in uvicorn's text
access lines alike (:class:`MaskFilter`), and in exported spans
(``pilothouse._tracing``).
"""

from __future__ import annotations

__all__ = [
    "MASKED",
    "ContextFilter",
    "JsonFormatter",
    "MaskFilter",
    "bind_conversation",
    "bind_request",
    "logging_config",
    "mask_query",
    "mask_secrets",
    "mask_url",
    "sensitive_query_key",
]

import json
import logging
import re
import sys
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final, Literal
from urllib.parse import unquote_plus

MASKED: Final = "***"
"""What stands for a masked value in logs and spans."""

# Query parameters whose value is a credential: these names exactly, and any
# name holding one of the words below (case-insensitive, after
# percent-decoding). docs/security.md lists them for operators.
_SENSITIVE_KEYS: Final = frozenset(
    {"key", "sig", "auth", "authorization", "pwd", "pass", "session", "sessionid", "jwt"}
)
_SENSITIVE_WORDS: Final = (
    "token",
    "secret",
    "password",
    "passwd",
    "signature",
    "credential",
    "apikey",
    "api_key",
    "api-key",
)
# A query parameter inside free text (a URL or request line in a message).
_QUERY_PAIR: Final = re.compile(r"(?<=[?&;])([^=&;\s#\"'?]+)=([^&;\s#\"']*)")

_REQUEST_ID: ContextVar[str | None] = ContextVar("pilothouse_request_id", default=None)
_CONVERSATION_ID: ContextVar[str | None] = ContextVar("pilothouse_conversation_id", default=None)

# Last line of defence; the code logs none of these on purpose.
_SECRETS: Final = (
    # pilothouse API keys: ph_<8 hex prefix>_<secret>; the prefix is public.
    (re.compile(r"\b(ph_[0-9a-f]{8}_)[A-Za-z0-9_\-]+"), r"\1***"),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]+"), r"\1***"),
    (
        re.compile(
            r"(?i)\b((?:authorization|x-api-key|api[_-]?key)[\"']?\s*[:=]\s*[\"']?)[^\s\"',;&]+"
        ),
        r"\1***",
    ),
    # Vendor keys (OpenAI-style sk-..., Anthropic sk-ant-...).
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), "sk-***"),
)


def sensitive_query_key(name: str) -> bool:
    """Tell whether a query parameter's value is a credential, to be masked.

    Args:
        name: the parameter's name as sent (percent-encoded or not).

    Returns:
        True for ``key``, ``sig``, ``auth``, ``authorization``, ``pwd``,
        ``pass``, ``session``, ``sessionid``, ``jwt``, and any name holding
        ``token``, ``secret``, ``password``, ``passwd``, ``signature``,
        ``credential``, ``apikey``, ``api_key`` or ``api-key``; case-insensitive.
    """
    lowered = unquote_plus(name).strip().lower()
    return lowered in _SENSITIVE_KEYS or any(word in lowered for word in _SENSITIVE_WORDS)


def mask_query(query: str) -> str:
    """A query string with the value of each credential-like parameter masked.

    Args:
        query: the part after ``?`` (``a=1&api_key=s3cr3t``).

    Returns:
        The same parameters in the same order, byte for byte but for the
        masked values (``a=1&api_key=***``).
    """
    parts: list[str] = []
    for part in query.split("&"):
        name, separator, value = part.partition("=")
        if separator and value and sensitive_query_key(name):
            part = f"{name}={MASKED}"
        parts.append(part)
    return "&".join(parts)


def mask_url(url: str) -> str:
    """A URL, or a request target (``/v1/x?a=1``), with its query masked by :func:`mask_query`.

    Args:
        url: the URL or target.

    Returns:
        It with each credential-like parameter's value masked; the fragment kept.
    """
    head, separator, rest = url.partition("?")
    if not separator:
        return url
    query, hash_sign, fragment = rest.partition("#")
    return f"{head}?{mask_query(query)}{hash_sign}{fragment}"


def _mask_pair(match: re.Match[str]) -> str:
    name, value = match.group(1), match.group(2)
    return f"{name}={MASKED}" if value and sensitive_query_key(name) else match.group(0)


def mask_secrets(text: str) -> str:
    """``text`` with anything shaped like a key or credential masked.

    Keys and ``Authorization`` values wherever they stand, and the value of
    every credential-like query parameter (:func:`sensitive_query_key`) of a
    URL or request line in it.
    """
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    if "=" in text:
        text = _QUERY_PAIR.sub(_mask_pair, text)
    return text


class MaskFilter(logging.Filter):
    """Masks credentials (:func:`mask_secrets`) in a record's message and arguments.

    For handlers whose formatter reads the arguments itself: uvicorn's text
    access line puts the request's path and query (``args[2]``) on the line.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        """Mask ``record`` in place (never drops it)."""
        if isinstance(record.args, tuple) and record.args:
            # Each argument alone: the format string keeps its placeholders.
            record.args = tuple(
                mask_secrets(arg) if isinstance(arg, str) else arg for arg in record.args
            )
        elif not record.args and isinstance(record.msg, str):
            record.msg = mask_secrets(record.msg)
        return True


def bind_request(request_id: str, conversation_id: str | None = None) -> Callable[[], None]:
    """Name the request (and conversation) every log line of this context carries.

    Returns:
        A function that restores the previous values (call it when the
        request ends).
    """
    request_token = _REQUEST_ID.set(request_id)
    conversation_token = _CONVERSATION_ID.set(conversation_id)

    def reset() -> None:
        _CONVERSATION_ID.reset(conversation_token)
        _REQUEST_ID.reset(request_token)

    return reset


def bind_conversation(conversation_id: str) -> None:
    """Name the conversation the rest of this context's log lines are about."""
    _CONVERSATION_ID.set(conversation_id)


def _trace_ids() -> tuple[str | None, str | None]:
    # Only when OpenTelemetry is loaded: importing it for a log line would
    # cost every process that does not trace.
    if "opentelemetry.trace" not in sys.modules:
        return None, None
    from opentelemetry import trace

    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None, None
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


class ContextFilter(logging.Filter):
    """Adds ``request_id``, ``conversation_id``, ``trace_id`` and ``span_id`` to each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        """Annotate ``record`` (never drops it)."""
        record.request_id = _REQUEST_ID.get()
        record.conversation_id = _CONVERSATION_ID.get()
        record.trace_id, record.span_id = _trace_ids()
        return True


class JsonFormatter(logging.Formatter):
    """One JSON object per record: time, level, logger, message, ids, exception."""

    def format(self, record: logging.LogRecord) -> str:
        """Render ``record`` as one line of JSON, secrets masked."""
        entry: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": mask_secrets(record.getMessage()),
            "request_id": getattr(record, "request_id", None),
            "conversation_id": getattr(record, "conversation_id", None),
            "trace_id": getattr(record, "trace_id", None),
            "span_id": getattr(record, "span_id", None),
        }
        if record.exc_info:
            entry["exception"] = mask_secrets(self.formatException(record.exc_info))
        return json.dumps(entry, ensure_ascii=False, default=str)


def logging_config(
    level: str = "info", log_format: Literal["json", "text"] = "json"
) -> dict[str, Any]:
    """The ``dictConfig`` of the service's logs: pilothouse's and uvicorn's.

    Args:
        level: the least severe level written (``info``, ``warning``, ...).
        log_format: ``json`` (one object per line, ids and masking included)
            or ``text`` (uvicorn's own lines, with credentials masked).
    """
    upper = level.upper()
    if log_format == "text":
        from uvicorn.config import LOGGING_CONFIG

        text: dict[str, Any] = {
            **LOGGING_CONFIG,
            "filters": {"mask": {"()": f"{__name__}.MaskFilter"}},
            "handlers": {
                name: {**handler, "filters": ["mask"]}
                for name, handler in LOGGING_CONFIG["handlers"].items()
            },
        }
        return text
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "filters": {"context": {"()": f"{__name__}.ContextFilter"}},
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {
            "default": {
                "class": "logging.StreamHandler",
                "stream": "ext://sys.stderr",
                "formatter": "json",
                "filters": ["context"],
            }
        },
        "root": {"handlers": ["default"], "level": upper},
        # uvicorn's loggers write through the root's handler, so its lines
        # carry the same ids in the same format.
        "loggers": {
            name: {"handlers": [], "propagate": True, "level": upper}
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access")
        },
    }
