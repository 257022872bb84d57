"""HTTP endpoints as tools: hand-declared in the catalog or taken from OpenAPI.

Both sources produce an :class:`HttpEndpoint` (method, URL template, fixed
headers, and where each argument goes: path, query, header or JSON body);
one :class:`RestTool` carries any of them out over the registry's shared,
pooled ``httpx.AsyncClient``.

Header values may embed ``@secrets(NAME)`` references. They are resolved at
call time, on every call, so a rotated secret is picked up without a restart;
resolved values go into the request only, never into a result or a log line.
"""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "HttpEndpoint", "RestTool", "endpoint_from_settings"]

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import quote

import anyio
import httpx

from pilothouse.catalog._enums import ExecutionPolicy, ToolKind
from pilothouse.catalog._url_templates import url_template_fields
from pilothouse.errors import SecretNotFoundError
from pilothouse.providers._secrets import SecretResolver
from pilothouse.tools._base import ToolContext, ToolDefinition, ToolError, ToolResult

DEFAULT_MAX_RESPONSE_BYTES = 64 * 1024
"""Responses longer than this are cut, with a note saying how much was dropped."""

_ERROR_EXCERPT = 500
"""Characters of an error response's body shown to the model."""

_BODYLESS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})
_METHODS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS", "POST", "PUT", "PATCH"})


@dataclass(frozen=True)
class HttpEndpoint:
    """How to turn a tool call's arguments into one HTTP request.

    Attributes:
        method: the HTTP method, upper case.
        url: the absolute URL template; ``{name}`` takes argument ``name``.
        headers: fixed headers; values may embed ``@secrets(NAME)``.
        path: arguments substituted into the URL template.
        query: query-string parameter name -> argument name.
        header_arguments: header name -> argument name.
        body: JSON body field -> argument name.
        body_argument: an argument whose value is the whole JSON body.
        timeout: seconds for the whole request; None uses the call's.
        max_response_bytes: longer responses are truncated.
    """

    method: str
    url: str
    headers: Mapping[str, str] = field(default_factory=lambda: {})
    path: tuple[str, ...] = ()
    query: Mapping[str, str] = field(default_factory=lambda: {})
    header_arguments: Mapping[str, str] = field(default_factory=lambda: {})
    body: Mapping[str, str] = field(default_factory=lambda: {})
    body_argument: str | None = None
    timeout: float | None = None
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES


def template_fields(url: str, tool_name: str) -> tuple[str, ...]:
    """Return the ``{name}`` fields of a REST tool's ``settings.url``, in order.

    Args:
        url: the template.
        tool_name: named in the error.

    Returns:
        The field names.

    Raises:
        ToolError: a field is not a plain name (``{a.b}``, ``{0}``, ``{}``,
            ``{id:>9}``, ``{id!r}``).
    """
    return url_fields(url, f"tool '{tool_name}': settings.url")


def url_fields(url: str, where: str) -> tuple[str, ...]:
    """Return the ``{name}`` fields of a URL template, in order.

    Args:
        url: the template.
        where: what holds it, the start of the error message.

    Returns:
        The field names.

    Raises:
        ToolError: a field is not a plain name (``{a.b}``, ``{0}``, ``{}``,
            ``{id:>9}``, ``{id!r}``).
    """
    try:
        return url_template_fields(url)
    except ValueError as exc:
        raise ToolError(f"{where}: {exc}") from exc


def _names(value: object, tool_name: str, setting: str) -> dict[str, str]:
    """Read a list of argument names or a ``{field: argument}`` mapping."""
    if isinstance(value, list) and all(isinstance(v, str) for v in cast(list[Any], value)):
        return {v: v for v in cast(list[str], value)}
    if isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in cast(dict[Any, Any], value).items()
    ):
        return dict(cast(dict[str, str], value))
    raise ToolError(
        f"tool '{tool_name}': settings.{setting}: expected a list of argument names "
        "or a mapping of field to argument name"
    )


def _positive(value: object, tool_name: str, setting: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise ToolError(f"tool '{tool_name}': settings.{setting}: must be a positive number")
    return float(value)


def endpoint_from_settings(
    settings: Mapping[str, Any], parameters: Mapping[str, Any], tool_name: str
) -> HttpEndpoint:
    """Read a hand-declared endpoint from a catalog tool's ``settings``.

    Arguments not used by the URL template go to the JSON body for methods
    that carry one (POST, PUT, PATCH) and to the query string otherwise,
    unless ``settings.body`` / ``settings.query`` say which.

    Args:
        settings: ``method``, ``url``, ``headers``, ``body``, ``query``,
            ``timeout``, ``max_response_bytes``.
        parameters: the tool's input schema; its properties are the arguments.
        tool_name: named in errors.

    Returns:
        The endpoint.

    Raises:
        ToolError: a setting is missing or of the wrong shape.
    """
    url = settings.get("url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ToolError(f"tool '{tool_name}': settings.url: required, an http(s) URL template")
    method = str(settings.get("method", "GET")).upper()
    if method not in _METHODS:
        raise ToolError(f"tool '{tool_name}': settings.method: unknown HTTP method '{method}'")
    headers = settings.get("headers", {})
    if not isinstance(headers, dict):
        raise ToolError(f"tool '{tool_name}': settings.headers: must be a mapping")
    path = template_fields(url, tool_name)
    properties = cast(Mapping[str, Any], parameters.get("properties", {}))
    rest = [name for name in properties if name not in path]
    body = _names(settings["body"], tool_name, "body") if "body" in settings else None
    query = _names(settings["query"], tool_name, "query") if "query" in settings else None
    # Whatever one of body/query does not claim goes to the other, and with
    # neither declared the method decides: GET-like methods have no body.
    if body is None:
        claimed = set(query.values()) if query is not None else set[str]()
        leftover = {n: n for n in rest if n not in claimed}
        body = {} if method in _BODYLESS else leftover
        if query is None:
            query = leftover if method in _BODYLESS else {}
    elif query is None:
        claimed = set(body.values())
        query = {n: n for n in rest if n not in claimed}
    timeout = settings.get("timeout")
    return HttpEndpoint(
        method=method,
        url=url,
        headers={str(k): str(v) for k, v in cast(dict[Any, Any], headers).items()},
        path=path,
        query=query or {},
        body=body or {},
        timeout=_positive(timeout, tool_name, "timeout") if timeout is not None else None,
        max_response_bytes=int(
            _positive(
                settings.get("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES),
                tool_name,
                "max_response_bytes",
            )
        ),
    )


class RestTool:
    """An HTTP endpoint the run loop can call; satisfies ``ExecutableTool``.

    Args:
        definition: what the model sees.
        endpoint: how to build the request.
        policy: the execution policy.
        client: the shared client (its pool is reused across calls).
        secrets: resolves ``@secrets(NAME)`` in header values at call time.
    """

    def __init__(
        self,
        definition: ToolDefinition,
        endpoint: HttpEndpoint,
        policy: ExecutionPolicy,
        client: httpx.AsyncClient,
        secrets: SecretResolver,
    ) -> None:
        self._definition = definition
        self._endpoint = endpoint
        self._policy = policy
        self._client = client
        self._secrets = secrets

    @property
    def definition(self) -> ToolDefinition:
        """What the model sees."""
        return self._definition

    @property
    def kind(self) -> ToolKind:
        """Always :attr:`ToolKind.REST`."""
        return ToolKind.REST

    @property
    def policy(self) -> ExecutionPolicy:
        """Whether it may run without an authorizer's yes."""
        return self._policy

    @property
    def endpoint(self) -> HttpEndpoint:
        """How the request is built."""
        return self._endpoint

    def _request(self, arguments: Mapping[str, Any]) -> httpx.Request | ToolResult:
        """Build the request, or explain which argument is missing."""
        ep = self._endpoint
        missing = [name for name in ep.path if arguments.get(name) is None]
        if missing:
            return ToolResult(
                content=f"missing required argument(s) for the URL: {', '.join(missing)}",
                is_error=True,
                error_code="tool.args.invalid",
            )
        url = ep.url.format_map(
            {name: quote(_scalar(arguments[name]), safe="") for name in ep.path}
        )
        try:
            headers = {name: self._secrets.resolve(value) for name, value in ep.headers.items()}
        except SecretNotFoundError as exc:
            # The message names the secret, never a value.
            return ToolResult(
                content=str(exc), is_error=True, error_code="tool.exec.secret_missing"
            )
        for header, name in ep.header_arguments.items():
            if arguments.get(name) is not None:
                headers[header] = _scalar(arguments[name])
        params = {
            param: _query_value(arguments[name])
            for param, name in ep.query.items()
            if arguments.get(name) is not None
        }
        body: Any = None
        if ep.body_argument is not None:
            body = arguments.get(ep.body_argument)
        elif ep.body:
            body = {key: arguments[name] for key, name in ep.body.items() if name in arguments}
        return self._client.build_request(
            ep.method,
            url,
            headers=headers,
            params=params,
            json=body,
        )

    async def execute(self, arguments: Mapping[str, Any], context: ToolContext) -> ToolResult:
        """Send the request and report the response.

        Args:
            arguments: the model's (already validated) arguments.
            context: where the call happens; its timeout applies unless the
                endpoint sets its own.

        Returns:
            The response text (truncated past ``max_response_bytes``) with
            the parsed JSON as ``data``; a non-2xx status as
            ``tool.exec.http_<status>``, a timeout as ``tool.exec.timeout``,
            an unreachable server as ``tool.exec.connection``.
        """
        request = self._request(arguments)
        if isinstance(request, ToolResult):
            return request
        timeout = self._endpoint.timeout or context.timeout
        request.extensions["timeout"] = httpx.Timeout(timeout).as_dict()
        try:
            # One deadline for the whole exchange: httpx's own timeouts are
            # per read, so a slow trickle could otherwise run far longer.
            with anyio.fail_after(timeout):
                response = await self._client.send(request, stream=True)
                try:
                    kept, total = await _read_capped(response, self._endpoint.max_response_bytes)
                finally:
                    await response.aclose()
        except (TimeoutError, httpx.TimeoutException):
            return ToolResult(
                content=f"{request.method} {_safe_url(request)} timed out after {timeout:g} s",
                is_error=True,
                error_code="tool.exec.timeout",
            )
        except httpx.HTTPError as exc:
            return ToolResult(
                content=f"{request.method} {_safe_url(request)} failed: {type(exc).__name__}",
                is_error=True,
                error_code="tool.exec.connection",
            )
        return _result(response, kept, total)


async def _read_capped(response: httpx.Response, limit: int) -> tuple[bytes, int]:
    """Keep the first ``limit`` bytes; count (but drop) the rest."""
    kept = bytearray()
    total = 0
    async for chunk in response.aiter_bytes():
        total += len(chunk)
        room = limit - len(kept)
        if room > 0:
            kept += chunk[:room]
    return bytes(kept), total


def _result(response: httpx.Response, kept: bytes, total: int) -> ToolResult:
    truncated = total > len(kept)
    # A cut may split a multi-byte character; dropping the fragment beats a
    # replacement character at the end of every long answer.
    text = kept.decode(response.encoding or "utf-8", errors="ignore" if truncated else "replace")
    if not response.is_success:
        excerpt = text[:_ERROR_EXCERPT]
        more = "…" if len(text) > _ERROR_EXCERPT or truncated else ""
        return ToolResult(
            content=f"HTTP {response.status_code} {response.reason_phrase}: {excerpt}{more}",
            is_error=True,
            error_code=f"tool.exec.http_{response.status_code}",
            status_code=response.status_code,
        )
    if truncated:
        return ToolResult(
            content=f"{text}…[truncated: {len(kept)} of {total} bytes]",
            status_code=response.status_code,
        )
    data: Any = None
    if "json" in response.headers.get("content-type", "") and text:
        try:
            data = json.loads(text)
        except ValueError:
            data = None
    return ToolResult(content=text, data=data, status_code=response.status_code)


def _safe_url(request: httpx.Request) -> str:
    # Without the query: it may carry arguments the model should not see echoed.
    return str(request.url.copy_with(query=None))


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return (
        value
        if isinstance(value, str)
        else json.dumps(value)
        if isinstance(value, dict | list)
        else str(value)
    )


def _query_value(value: Any) -> str | list[str]:
    if isinstance(value, list):
        return [_scalar(v) for v in cast(list[Any], value)]
    return _scalar(value)
