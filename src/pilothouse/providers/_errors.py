"""Translation of provider failures into pilothouse's error hierarchy.

Every provider failure, whether pydantic-ai wrapped it or it escaped raw from
an SDK, an HTTP client or botocore, goes through :func:`translate_error`, so
the runtime's retry policy sees one family of exceptions (``retryable`` says
whether waiting helps). Messages carry the status, the provider's error code
and its message, with anything that looks like a credential masked.
"""

from __future__ import annotations

__all__ = [
    "EgressRefusedError",
    "MissingExtraError",
    "ProviderConfigError",
    "http_status_error",
    "redact",
    "translate_error",
]

import email.utils
import re
import sys
import time
from collections.abc import Collection, Mapping
from typing import Any, cast

from pilothouse.errors import (
    BadRequestError,
    ContentFilterError,
    PilothouseError,
    ProviderAuthError,
    ProviderConnectionError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    RateLimitError,
    UnparseableResponseError,
)
from pilothouse.providers._egress import EgressRefusal


class EgressRefusedError(ProviderError):
    """The egress policy refused the provider's address; nothing was sent (not retried)."""

    suggestions = (
        "ask the operator to allow the address for this tenant "
        "(PILOTHOUSE_EGRESS_TENANTS) or every tenant (PILOTHOUSE_EGRESS_ALLOW)",
    )


class ProviderConfigError(PilothouseError):
    """A provider or model spec cannot be turned into a model (missing setting, bad kind)."""


class MissingExtraError(ProviderConfigError):
    """A provider kind needs an optional dependency that is not installed."""

    def __init__(self, kind: str, extra: str) -> None:
        super().__init__(
            f"provider kind '{kind}' needs an optional dependency: "
            f"pip install 'pilothouse[{extra}]'"
        )
        self.extra = extra


# Shapes of credentials that providers sometimes echo back in error bodies
# ("Incorrect API key provided: sk-abc..."), plus bearer and basic headers.
_CREDENTIAL_PATTERNS = re.compile(
    r"(sk-[A-Za-z0-9_\-*]{6,}|(?:Bearer|Basic)\s+[A-Za-z0-9._~+/=\-]+|AKIA[0-9A-Z]{12,}"
    r"|AIza[0-9A-Za-z_\-]{20,}|(?<=key=)[^&\s\"']+)",
)
_CONTENT_FILTER_CODES = frozenset(
    {"content_filter", "content_policy_violation", "responsibleaipolicyviolation", "safety"}
)
_THROTTLING_CODES = frozenset(
    {
        "ThrottlingException",
        "Throttling",
        "TooManyRequestsException",
        "ProvisionedThroughputExceededException",
        "RequestLimitExceeded",
    }
)
_AUTH_CODES = frozenset(
    {
        "AccessDenied",
        "AccessDeniedException",
        "UnrecognizedClientException",
        "InvalidSignatureException",
        "SignatureDoesNotMatch",
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "MissingAuthenticationToken",
    }
)
_BAD_REQUEST_CODES = frozenset(
    {"ValidationException", "ResourceNotFoundException", "ModelNotReadyException"}
)
_SERVER_CODES = frozenset(
    {
        "ModelError",
        "InternalServerException",
        "InternalFailure",
        "ServiceUnavailable",
        "ServiceUnavailableException",
        "ModelStreamErrorException",
    }
)


def redact(text: str, secrets: Collection[str] = ()) -> str:
    """Mask credential-looking substrings and the given secret values in ``text``.

    Args:
        text: a message bound for an exception, a log or the audit timeline.
        secrets: exact values to mask as well (e.g. the provider's API key).

    Returns:
        The text with each match replaced by ``***``.
    """
    for secret in secrets:
        if secret:
            text = text.replace(secret, "***")
    return _CREDENTIAL_PATTERNS.sub("***", text)


def translate_error(exc: BaseException, *, secrets: Collection[str] = ()) -> ProviderError | None:
    """Translate a provider failure into a pilothouse :class:`ProviderError`.

    Args:
        exc: what the model call raised.
        secrets: values to mask in the message besides the patterns that look
            like credentials (pass the provider's resolved key and headers).

    Returns:
        The translated error (with ``__cause__`` left for the caller to set by
        ``raise ... from exc``), or ``None`` when ``exc`` is not a provider
        failure and should propagate unchanged.
    """
    if isinstance(exc, UnparseableResponseError):
        # Raised by the wire repair layer, quoting what the provider sent.
        return UnparseableResponseError(redact(str(exc), secrets))
    if isinstance(exc, ProviderError):
        return exc
    # The wire repair layer raises under the SDK, which wraps the error
    # (openai's APIConnectionError, then pydantic-ai's): the cause says
    # what happened and how to retry it.
    cause = exc.__cause__ or exc.__context__
    for _ in range(8):
        if cause is None:
            break
        if isinstance(cause, UnparseableResponseError):
            return UnparseableResponseError(redact(str(cause), secrets))
        if isinstance(cause, EgressRefusal):
            # The policy refused the address before anything was sent: no
            # retry can help, and the reason names what the operator can do.
            return EgressRefusedError(redact(str(cause), secrets))
        cause = cause.__cause__ or cause.__context__
    translated = _from_pydantic_ai(exc, secrets)
    if translated is None:
        translated = _from_transport(exc)
    if translated is None:
        translated = _from_botocore(exc, secrets)
    if translated is None:
        translated = _from_sdk_status(exc, secrets)
    return translated


def _from_pydantic_ai(exc: BaseException, secrets: Collection[str]) -> ProviderError | None:
    if "pydantic_ai" not in sys.modules:
        return None
    from pydantic_ai import exceptions as pe

    if isinstance(exc, pe.ContentFilterError):
        return ContentFilterError(redact(f"content filter: {exc.message}", secrets))
    if isinstance(exc, pe.ModelRequestTimeout | pe.ModelTimeoutError):
        return ProviderTimeoutError(f"model {exc.model_name}: timed out")
    if isinstance(exc, pe.ModelConnectionError):
        return ProviderConnectionError(
            redact(f"model {exc.model_name}: connection failed: {exc.message}", secrets)
        )
    if isinstance(exc, pe.ModelAPIError):
        status = exc.status_code if isinstance(exc, pe.ModelHTTPError) else None
        code = exc.provider_error_code or _body_code(exc.body)
        detail = _body_message(exc.body) or exc.message
        message = redact(_describe(exc.model_name, status, code, detail), secrets)
        if _is_content_filter(code, exc.body):
            return ContentFilterError(message)
        if isinstance(exc, pe.ModelRateLimitError):
            return RateLimitError(message, retry_after=exc.retry_after)
        if isinstance(exc, pe.ModelQuotaExceededError):
            # Waiting will not help (billing), so not a RateLimitError.
            return ProviderError(message)
        if isinstance(exc, pe.ModelAuthenticationError):
            return ProviderAuthError(message)
        if isinstance(exc, pe.ModelRequestRejectedError):
            return BadRequestError(message)
        if isinstance(exc, pe.ModelUnavailableError | pe.ModelServerError):
            return ProviderServerError(message)
        if status is not None:
            return _by_status(status, message, exc.retry_after)
        return ProviderError(message)
    if isinstance(exc, pe.UnexpectedModelBehavior):
        return UnparseableResponseError(
            redact(f"unexpected model behavior: {exc.message}", secrets)
        )
    return None


def _from_transport(exc: BaseException) -> ProviderError | None:
    # httpx (legacy) and httpx2 share class names; check whichever is loaded.
    for module_name in ("httpx", "httpx2"):
        module = sys.modules.get(module_name)
        if module is None:
            continue
        if isinstance(exc, module.TimeoutException):
            return ProviderTimeoutError(f"request timed out ({type(exc).__name__})")
        if isinstance(exc, module.TransportError):
            return ProviderConnectionError(f"could not reach the provider ({type(exc).__name__})")
    for module_name in ("openai", "anthropic"):
        module = sys.modules.get(module_name)
        if module is None:
            continue
        if isinstance(exc, module.APITimeoutError):
            return ProviderTimeoutError(f"request timed out ({module_name})")
        if isinstance(exc, module.APIConnectionError):
            return ProviderConnectionError(f"could not reach the provider ({module_name})")
    return None


def _from_botocore(exc: BaseException, secrets: Collection[str]) -> ProviderError | None:
    if "botocore" not in sys.modules:
        return None
    from botocore import exceptions as be  # pyright: ignore[reportMissingTypeStubs]

    if isinstance(exc, be.ReadTimeoutError | be.ConnectTimeoutError):
        return ProviderTimeoutError(f"AWS request timed out ({type(exc).__name__})")
    if isinstance(exc, be.EndpointConnectionError | be.ConnectionClosedError):
        return ProviderConnectionError(f"could not reach AWS ({type(exc).__name__})")
    if isinstance(exc, be.NoCredentialsError | be.PartialCredentialsError):
        return ProviderAuthError("no AWS credentials were found")
    if not isinstance(exc, be.ClientError):
        return None
    response = cast(Mapping[str, Any], cast(Any, exc).response)
    error = cast(Mapping[str, Any], response.get("Error", {}))
    code = str(error.get("Code", ""))
    detail = str(error.get("Message", ""))
    metadata = cast(Mapping[str, Any], response.get("ResponseMetadata", {}))
    status = metadata.get("HTTPStatusCode")
    operation = getattr(exc, "operation_name", "AWS call")
    message = redact(f"{operation}: {code or 'error'}: {detail}".rstrip(": "), secrets)
    if code in _THROTTLING_CODES:
        return RateLimitError(message)
    if code in _AUTH_CODES:
        return ProviderAuthError(message)
    if code == "ModelTimeoutException":
        return ProviderTimeoutError(message)
    if code == "ValidationException" and "guardrail" in detail.lower():
        return ContentFilterError(message)
    if code in _BAD_REQUEST_CODES:
        return BadRequestError(message)
    if code in _SERVER_CODES:
        return ProviderServerError(message)
    if isinstance(status, int):
        return _by_status(status, message, None)
    return ProviderError(message)


def _from_sdk_status(exc: BaseException, secrets: Collection[str]) -> ProviderError | None:
    # openai/anthropic APIStatusError carry `status_code`; google-genai's
    # APIError carries `code`. Only trust them from those SDKs' own modules.
    module = type(exc).__module__.split(".")[0]
    if module not in {"openai", "anthropic", "google"}:
        return None
    status = getattr(exc, "status_code", None)
    if status is None and module == "google":
        status = getattr(exc, "code", None)
    if not isinstance(status, int):
        return None
    body = getattr(exc, "body", None)
    code = _body_code(body)
    detail = _body_message(body) or str(getattr(exc, "message", "")) or type(exc).__name__
    message = redact(_describe(module, status, code, detail), secrets)
    if _is_content_filter(code, body):
        return ContentFilterError(message)
    response = getattr(exc, "response", None)
    headers = cast(Mapping[str, str] | None, getattr(response, "headers", None))
    return _by_status(status, message, parse_retry_after(headers))


def http_status_error(
    who: str,
    status: int,
    body: object,
    headers: Mapping[str, str] | None = None,
    *,
    secrets: Collection[str] = (),
) -> ProviderError:
    """Translate an HTTP error answer of a provider called without an SDK.

    Args:
        who: names the provider in the message.
        status: the HTTP status.
        body: the decoded JSON body (or its text).
        headers: the response headers, for ``Retry-After``.
        secrets: values to mask in the message.

    Returns:
        The error matching the status, its message carrying the vendor's own.
    """
    code = _body_code(body)
    detail = _body_message(body) or (body if isinstance(body, str) else "") or f"HTTP {status}"
    message = redact(_describe(who, status, code, detail[:500]), secrets)
    if _is_content_filter(code, body):
        return ContentFilterError(message)
    return _by_status(status, message, parse_retry_after(headers))


def _by_status(status: int, message: str, retry_after: float | None) -> ProviderError:
    if status == 429:
        return RateLimitError(message, retry_after=retry_after)
    if status in (401, 403):
        return ProviderAuthError(message)
    if status in (408, 504):
        return ProviderTimeoutError(message)
    if status >= 500:
        return ProviderServerError(message)
    if 400 <= status < 500:
        return BadRequestError(message)
    return ProviderError(message)


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Read ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date) from headers.

    Args:
        headers: response headers, any key casing.

    Returns:
        Seconds to wait, or ``None`` when the headers do not say.
    """
    if not headers:
        return None
    lowered = {k.lower(): v for k, v in headers.items()}
    if (millis := lowered.get("retry-after-ms")) is not None:
        try:
            return float(millis) / 1000
        except ValueError:
            pass  # fall through to Retry-After, which providers send alongside
    value = lowered.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        parsed = email.utils.parsedate_to_datetime(value) if value else None
        if parsed is None:
            return None
        return max(parsed.timestamp() - time.time(), 0.0)


def _describe(who: str, status: int | None, code: str | None, detail: str) -> str:
    head = f"model {who}" if who and not who.startswith(("openai", "anthropic", "google")) else who
    parts = [head]
    if status is not None:
        parts.append(f"HTTP {status}")
    if code:
        parts.append(code)
    text = ": ".join(p for p in parts if p)
    return f"{text}: {detail}" if detail else text


def _body_error(body: object) -> Mapping[str, Any] | None:
    if not isinstance(body, Mapping):
        return None
    mapping = cast(Mapping[str, Any], body)
    inner = mapping.get("error")
    if isinstance(inner, Mapping):
        return cast(Mapping[str, Any], inner)
    return mapping


def _body_message(body: object) -> str | None:
    if isinstance(body, str):
        return body[:500]
    error = _body_error(body)
    if error is None:
        return None
    message = error.get("message")
    return str(message)[:500] if message is not None else None


def _body_code(body: object) -> str | None:
    error = _body_error(body)
    if error is None:
        return None
    code = error.get("code") or error.get("type")
    return str(code) if code is not None else None


def _is_content_filter(code: str | None, body: object) -> bool:
    if code is not None and code.lower() in _CONTENT_FILTER_CODES:
        return True
    # Azure puts the verdict in error.innererror.code.
    error = _body_error(body)
    if error is not None:
        inner = error.get("innererror")
        if isinstance(inner, Mapping):
            inner_code = cast(Mapping[str, Any], inner).get("code")
            if isinstance(inner_code, str) and inner_code.lower() in _CONTENT_FILTER_CODES:
                return True
    return False
