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
stack trace, as a last line of defence: nothing is meant to log them.
"""

from __future__ import annotations

__all__ = [
    "ContextFilter",
    "JsonFormatter",
    "bind_conversation",
    "bind_request",
    "logging_config",
    "mask_secrets",
]

import json
import logging
import re
import sys
from collections.abc import Callable
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any, Final

_REQUEST_ID: ContextVar[str | None] = ContextVar("pilothouse_request_id", default=None)
_CONVERSATION_ID: ContextVar[str | None] = ContextVar("pilothouse_conversation_id", default=None)

# Last line of defence; the code logs none of these on purpose.
_SECRETS: Final = (
    # pilothouse API keys: ph_<8 hex prefix>_<secret>; the prefix is public.
    (re.compile(r"\b(ph_[0-9a-f]{8}_)[A-Za-z0-9_\-]+"), r"\1***"),
    (re.compile(r"(?i)\b(bearer\s+)[A-Za-z0-9._~+/=\-]+"), r"\1***"),
    (
        re.compile(
            r"(?i)\b((?:authorization|x-api-key|api[_-]?key)[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]+"
        ),
        r"\1***",
    ),
    # Vendor keys (OpenAI-style sk-..., Anthropic sk-ant-...).
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), "sk-***"),
)


def mask_secrets(text: str) -> str:
    """``text`` with anything shaped like a key or credential masked."""
    for pattern, replacement in _SECRETS:
        text = pattern.sub(replacement, text)
    return text


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


def logging_config(level: str = "info") -> dict[str, Any]:
    """The ``dictConfig`` of the service's JSON logs: pilothouse's and uvicorn's.

    Args:
        level: the least severe level written (``info``, ``warning``, ...).
    """
    upper = level.upper()
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
