"""translate_error: every provider failure lands in the right pilothouse error class."""

from __future__ import annotations

import anthropic
import httpx
import httpx2
import openai
import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, ReadTimeoutError
from google.genai import errors as genai_errors
from pydantic_ai import exceptions as pe

from pilothouse.errors import (
    BadRequestError,
    ContentFilterError,
    ProviderAuthError,
    ProviderConnectionError,
    ProviderError,
    ProviderServerError,
    ProviderTimeoutError,
    RateLimitError,
    UnparseableResponseError,
)
from pilothouse.providers import redact, translate_error


def http_error(
    category: type[pe.ModelAPIError] | None,
    status: int,
    body: object = None,
    headers: dict[str, str] | None = None,
    code: str | None = None,
) -> pe.ModelHTTPError:
    return pe.ModelHTTPError.for_category(
        category,  # type: ignore[arg-type]
        status_code=status,
        model_name="gpt-4o-mini",
        body=body,
        headers=headers,
        provider_error_code=code,
    )


def test_rate_limit_keeps_retry_after_seconds() -> None:
    exc = http_error(pe.ModelRateLimitError, 429, headers={"Retry-After": "12"})
    translated = translate_error(exc)
    assert isinstance(translated, RateLimitError)
    assert translated.retry_after == 12.0
    assert translated.retryable


def test_auth_error_message_never_contains_the_key() -> None:
    body = {
        "error": {
            "message": "Incorrect API key provided: sk-proj-abcdef123456789.",
            "code": "invalid_api_key",
        }
    }
    translated = translate_error(http_error(pe.ModelAuthenticationError, 401, body))
    assert isinstance(translated, ProviderAuthError)
    assert "sk-proj-abcdef123456789" not in str(translated)
    assert "Incorrect API key provided" in str(translated)
    assert "401" in str(translated)
    assert not translated.retryable


def test_known_secret_values_are_masked() -> None:
    body = {"error": {"message": "header X-Team=blue-secret rejected"}}
    translated = translate_error(
        http_error(pe.ModelRequestRejectedError, 400, body), secrets=["blue-secret"]
    )
    assert isinstance(translated, BadRequestError)
    assert "blue-secret" not in str(translated)


@pytest.mark.parametrize(
    ("category", "status", "expected"),
    [
        (pe.ModelRequestRejectedError, 400, BadRequestError),
        (pe.ModelNotFoundError, 404, BadRequestError),
        (pe.ModelContextWindowExceededError, 400, BadRequestError),
        (pe.ModelServerError, 500, ProviderServerError),
        (pe.ModelUnavailableError, 503, ProviderServerError),
        (pe.ModelOverloadedError, 529, ProviderServerError),
        (None, 502, ProviderServerError),
        (None, 422, BadRequestError),
        (None, 403, ProviderAuthError),
    ],
)
def test_http_categories(
    category: type[pe.ModelAPIError] | None, status: int, expected: type[ProviderError]
) -> None:
    translated = translate_error(http_error(category, status, {"error": {"message": "m"}}))
    assert type(translated) is expected


def test_quota_exhausted_is_not_retryable_rate_limit() -> None:
    translated = translate_error(http_error(pe.ModelQuotaExceededError, 429))
    assert type(translated) is ProviderError
    assert not translated.retryable


def test_content_filter_signals() -> None:
    assert isinstance(
        translate_error(pe.ContentFilterError("blocked by filter")), ContentFilterError
    )
    openai_style = {"error": {"message": "filtered", "code": "content_filter"}}
    assert isinstance(
        translate_error(http_error(pe.ModelRequestRejectedError, 400, openai_style)),
        ContentFilterError,
    )
    azure_style = {
        "error": {
            "message": "The response was filtered",
            "code": "content_filter",
            "innererror": {"code": "ResponsibleAIPolicyViolation"},
        }
    }
    assert isinstance(
        translate_error(http_error(pe.ModelRequestRejectedError, 400, azure_style)),
        ContentFilterError,
    )


def test_unexpected_model_behavior_is_unparseable() -> None:
    translated = translate_error(pe.UnexpectedModelBehavior("Received empty model response"))
    assert isinstance(translated, UnparseableResponseError)


def test_pydantic_ai_transport_errors() -> None:
    assert isinstance(
        translate_error(pe.ModelTimeoutError("m", "timed out", phase="read")), ProviderTimeoutError
    )
    assert isinstance(translate_error(pe.ModelRequestTimeout("m", 5.0)), ProviderTimeoutError)
    assert isinstance(
        translate_error(pe.ModelConnectionError("m", "refused", phase="connect")),
        ProviderConnectionError,
    )


@pytest.mark.parametrize("module", [httpx, httpx2])
def test_raw_http_client_errors(module: object) -> None:
    request = module.Request("POST", "http://127.0.0.1:9/v1")  # type: ignore[attr-defined]
    connect = module.ConnectError("refused", request=request)  # type: ignore[attr-defined]
    timeout = module.ReadTimeout("slow", request=request)  # type: ignore[attr-defined]
    assert isinstance(translate_error(connect), ProviderConnectionError)
    assert isinstance(translate_error(timeout), ProviderTimeoutError)


def test_openai_sdk_errors() -> None:
    request = httpx2.Request("POST", "https://api.openai.com/v1/chat/completions")
    response = httpx2.Response(429, headers={"retry-after-ms": "1500"}, request=request)
    limited = openai.RateLimitError(
        "slow down", response=response, body={"error": {"message": "slow down"}}
    )
    translated = translate_error(limited)
    assert isinstance(translated, RateLimitError)
    assert translated.retry_after == 1.5
    assert isinstance(
        translate_error(openai.APITimeoutError(request=request)), ProviderTimeoutError
    )
    assert isinstance(
        translate_error(openai.APIConnectionError(request=request)), ProviderConnectionError
    )


def test_anthropic_sdk_errors() -> None:
    request = httpx2.Request("POST", "https://api.anthropic.com/v1/messages")
    response = httpx2.Response(401, request=request)
    denied = anthropic.AuthenticationError(
        "invalid x-api-key", response=response, body={"error": {"message": "invalid x-api-key"}}
    )
    assert isinstance(translate_error(denied), ProviderAuthError)
    server = anthropic.InternalServerError(
        "boom", response=httpx2.Response(500, request=request), body=None
    )
    assert isinstance(translate_error(server), ProviderServerError)


def test_google_sdk_error_by_code() -> None:
    error = genai_errors.ClientError(
        400, {"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}
    )
    assert isinstance(translate_error(error), BadRequestError)


def client_error(code: str, status: int, message: str = "detail") -> ClientError:
    return ClientError(
        {
            "Error": {"Code": code, "Message": message},
            "ResponseMetadata": {"HTTPStatusCode": status},
        },
        "Converse",
    )


@pytest.mark.parametrize(
    ("code", "status", "expected"),
    [
        ("ThrottlingException", 429, RateLimitError),
        ("AccessDeniedException", 403, ProviderAuthError),
        ("UnrecognizedClientException", 403, ProviderAuthError),
        ("ValidationException", 400, BadRequestError),
        ("ResourceNotFoundException", 404, BadRequestError),
        ("ModelError", 424, ProviderServerError),
        ("InternalServerException", 500, ProviderServerError),
        ("ModelTimeoutException", 408, ProviderTimeoutError),
        ("SomethingNew", 503, ProviderServerError),
        ("SomethingElse", 400, BadRequestError),
    ],
)
def test_botocore_client_errors(code: str, status: int, expected: type[ProviderError]) -> None:
    translated = translate_error(client_error(code, status))
    assert type(translated) is expected
    assert code in str(translated)


def test_botocore_transport_errors() -> None:
    assert isinstance(
        translate_error(EndpointConnectionError(endpoint_url="https://bedrock")),
        ProviderConnectionError,
    )
    assert isinstance(
        translate_error(ReadTimeoutError(endpoint_url="https://bedrock")), ProviderTimeoutError
    )


def test_guardrail_intervention_is_content_filter() -> None:
    error = client_error("ValidationException", 400, "Guardrail blocked the input")
    assert isinstance(translate_error(error), ContentFilterError)


def test_non_provider_errors_pass_through_untranslated() -> None:
    assert translate_error(ValueError("bug")) is None
    assert translate_error(KeyError("k")) is None
    already = RateLimitError("x", retry_after=1)
    assert translate_error(already) is already


def test_redact_masks_credential_shapes() -> None:
    text = (
        "key sk-abcdef1234567 and Bearer eyJhbGciOi.x.y "
        "and AKIAABCDEFGHIJKLMNOP and ?key=AIzaSECRET"
    )
    masked = redact(text)
    for secret in ("sk-abcdef1234567", "eyJhbGciOi", "AKIAABCDEFGHIJKLMNOP", "AIzaSECRET"):
        assert secret not in masked
