"""One operation of an OpenAPI 3 document as an HTTP endpoint and a parameters schema.

A catalog REST tool names it as ``openapi:<url-or-path>#<operationId>``. The
operation's path, query and header parameters and its JSON request body
become one object schema for the model; when the body is an object its
fields sit beside the parameters (what a model fills in most reliably),
otherwise the whole body is one ``body`` argument. Component schemas the
operation uses travel along as ``$defs``, so recursive schemas stay finite.
"""

from __future__ import annotations

__all__ = [
    "FETCH_SECONDS",
    "MAX_DOCUMENT_BYTES",
    "OpenApiOperation",
    "load_document",
    "operation",
    "parse_reference",
]

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast
from urllib.parse import urljoin, urlsplit

import anyio
import httpx

from pilothouse.tools._base import ToolError
from pilothouse.tools._rest import DEFAULT_MAX_RESPONSE_BYTES, HttpEndpoint, url_fields

_METHODS = ("get", "put", "post", "delete", "options", "head", "patch", "trace")
_LOCATIONS = ("path", "query", "header")
_SCHEMA_REF = "#/components/schemas/"


@dataclass(frozen=True)
class OpenApiOperation:
    """An operation ready to become a tool.

    Attributes:
        endpoint: how to call it.
        parameters: the JSON schema of its arguments.
        description: the operation's summary and description.
    """

    endpoint: HttpEndpoint
    parameters: dict[str, Any]
    description: str


def parse_reference(implementation: str, tool_name: str) -> tuple[str, str]:
    """Split ``openapi:<url-or-path>#<operationId>`` into the source and the operation id.

    Args:
        implementation: the catalog row's implementation.
        tool_name: named in errors.

    Returns:
        ``(source, operation_id)``.

    Raises:
        ToolError: the reference is malformed.
    """
    body = implementation.removeprefix("openapi:")
    source, _, operation_id = body.rpartition("#")
    if not implementation.startswith("openapi:") or not source or not operation_id:
        raise ToolError(
            f"tool '{tool_name}': implementation '{implementation}' is not "
            "'openapi:<url-or-path>#<operationId>'"
        )
    return source, operation_id


FETCH_SECONDS = 60.0
"""The longest the fetch of an OpenAPI document from a URL may take, the whole body included.

The HTTP client's timeout bounds each read only, so a tenant's server sending
a byte a second would keep the fetch going for ever, and with it every other
catalog tool whose document waits behind it (the registry reads documents one at a
time). A minute carries the largest document read (:data:`MAX_DOCUMENT_BYTES`)
at about 0.2 MB/s, which any server meant to publish one exceeds by far.
"""

MAX_DOCUMENT_BYTES = 10 * 1024 * 1024
"""The most of an OpenAPI document read from a URL.

The URL is a tenant's; without a bound, a server answering without end
would fill the process's memory (REST answers and knowledge URLs are
bounded the same way).
"""


async def load_document(
    source: str, client: httpx.AsyncClient, *, fetch_seconds: float = FETCH_SECONDS
) -> dict[str, Any]:
    """Read an OpenAPI document (JSON or YAML) from a URL or a file.

    Args:
        source: an ``http(s)://`` URL or a file path.
        client: used for URLs.
        fetch_seconds: the longest a URL's fetch may take, all of it.

    Returns:
        The document.

    Raises:
        ToolError: it cannot be read, is not an OpenAPI 3 document, or is a
            URL that did not send the whole document within ``fetch_seconds``.
    """
    if source.startswith(("http://", "https://")):
        text: str | None = None
        try:
            # The block is left with text None only when the time ran out.
            with anyio.move_on_after(fetch_seconds):
                text = await _fetch_document(source, client)
        except httpx.HTTPError as exc:
            raise ToolError(f"OpenAPI document {source}: cannot fetch it: {exc}") from exc
        if text is None:
            raise ToolError(
                f"OpenAPI document {source}: not sent whole within {fetch_seconds:g} s, the "
                "most one document fetch may take; serve it faster (or a smaller document)"
            )
    else:
        try:
            text = Path(source).read_text(encoding="utf-8")
        except OSError as exc:
            raise ToolError(f"OpenAPI document {source}: cannot read it: {exc}") from exc
    document = _parse(text, source)
    version = document.get("openapi")
    if not isinstance(version, str) or not version.startswith("3."):
        raise ToolError(f"OpenAPI document {source}: not OpenAPI 3 (openapi: {version!r})")
    return document


async def _fetch_document(source: str, client: httpx.AsyncClient) -> str:
    """The document's text, read up to :data:`MAX_DOCUMENT_BYTES`.

    Raises:
        ToolError: the document is longer.
        httpx.HTTPError: it cannot be fetched.
    """
    async with client.stream("GET", source, follow_redirects=True) as response:
        response.raise_for_status()
        chunks: list[bytes] = []
        size = 0
        async for chunk in response.aiter_bytes():
            size += len(chunk)
            if size > MAX_DOCUMENT_BYTES:
                raise ToolError(
                    f"OpenAPI document {source}: more than {MAX_DOCUMENT_BYTES} bytes, the most "
                    "read; serve a smaller document (only the operations the tools use)"
                )
            chunks.append(chunk)
        return b"".join(chunks).decode(response.encoding or "utf-8", errors="replace")


def _parse(text: str, source: str) -> dict[str, Any]:
    try:
        loaded: object = json.loads(text)
    except ValueError:
        # Imported here: only YAML documents need the YAML parser.
        from ruamel.yaml import YAML, YAMLError

        try:
            loaded = cast(object, YAML(typ="safe", pure=True).load(text))  # pyright: ignore[reportUnknownMemberType]
        except YAMLError as exc:
            raise ToolError(f"OpenAPI document {source}: neither JSON nor YAML: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ToolError(f"OpenAPI document {source}: not a mapping")
    return cast(dict[str, Any], loaded)


def _find(document: Mapping[str, Any], operation_id: str) -> tuple[str, str, dict[str, Any]]:
    paths = cast(Mapping[str, Any], document.get("paths") or {})
    for path, item in paths.items():
        if not isinstance(item, dict):
            continue
        item = cast(dict[str, Any], item)
        for method in _METHODS:
            op = item.get(method)
            if isinstance(op, dict) and cast(dict[str, Any], op).get("operationId") == operation_id:
                return path, method, cast(dict[str, Any], op)
    raise ToolError(f"OpenAPI operation '{operation_id}' is not in the document")


class _Refs:
    """Resolves local ``$ref``s; collects the component schemas used as ``$defs``."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self._document = document
        self.defs: dict[str, Any] = {}

    def lookup(self, ref: str) -> Any:
        if not ref.startswith("#/"):
            raise ToolError(f"OpenAPI $ref '{ref}': only local references are supported")
        node: Any = self._document
        for part in ref[2:].split("/"):
            part = part.replace("~1", "/").replace("~0", "~")
            if not isinstance(node, dict) or part not in node:
                raise ToolError(f"OpenAPI $ref '{ref}' points nowhere")
            node = cast(dict[str, Any], node)[part]
        return node

    def deref(self, node: object) -> object:
        """Follow ``$ref`` chains of a non-schema object (parameter, request body)."""
        seen: set[str] = set()
        current = node
        while isinstance(current, dict):
            ref = cast(dict[str, Any], current).get("$ref")
            if ref is None:
                break
            if str(ref) in seen:
                raise ToolError(f"OpenAPI $ref '{ref}' refers to itself")
            seen.add(str(ref))
            current = cast(object, self.lookup(str(ref)))
        return cast(object, current)

    def schema(self, node: Any) -> Any:
        """Copy a schema, turning component refs into ``$defs`` refs."""
        if isinstance(node, list):
            return [self.schema(item) for item in cast(list[Any], node)]
        if not isinstance(node, dict):
            return node
        node = cast(dict[str, Any], node)
        copied: dict[str, Any] = {}
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str) and value.startswith(_SCHEMA_REF):
                name = value.removeprefix(_SCHEMA_REF)
                if name not in self.defs:
                    # Placeholder first: a schema that refers to itself ends here.
                    self.defs[name] = {}
                    self.defs[name] = self.schema(self.lookup(value))
                copied[key] = f"#/$defs/{name}"
            elif key == "$ref" and isinstance(value, str):
                copied.update(self.schema(self.lookup(value)))
            else:
                copied[key] = self.schema(value)
        return copied

    def resolved(self, schema: Any) -> dict[str, Any]:
        """The schema a (copied) ``$defs`` ref points at, for looking inside it."""
        seen: set[str] = set()
        while isinstance(schema, dict) and "$ref" in schema:
            ref = str(cast(dict[str, Any], schema)["$ref"])
            if ref in seen or not ref.startswith("#/$defs/"):
                break
            seen.add(ref)
            schema = self.defs.get(ref.removeprefix("#/$defs/"), {})
        return cast(dict[str, Any], schema) if isinstance(schema, dict) else {}


def _base_url(document: Mapping[str, Any], base_url: str | None, source: str) -> str:
    if base_url:
        return base_url
    servers = document.get("servers")
    server_url = ""
    if isinstance(servers, list) and servers and isinstance(servers[0], dict):
        server_url = str(cast(dict[str, Any], servers[0]).get("url", ""))
    if server_url.startswith(("http://", "https://")):
        return server_url
    if source.startswith(("http://", "https://")):
        # A relative (or absent) server URL is relative to where the document came from.
        origin = urlsplit(source)
        return urljoin(f"{origin.scheme}://{origin.netloc}/", server_url or "/")
    raise ToolError(
        f"OpenAPI document {source}: no absolute server URL; set settings.base_url on the tool"
    )


def _merged_parameters(
    refs: _Refs, path_item: Mapping[str, Any], op: Mapping[str, Any]
) -> list[dict[str, Any]]:
    # Operation parameters override path-level ones with the same name and location.
    merged: dict[tuple[str, str], dict[str, Any]] = {}
    for raw in [*path_item.get("parameters", []), *op.get("parameters", [])]:
        param = refs.deref(raw)
        if isinstance(param, dict):
            param = cast(dict[str, Any], param)
            merged[(str(param.get("name")), str(param.get("in")))] = param
    return list(merged.values())


def operation(
    document: Mapping[str, Any],
    operation_id: str,
    *,
    source: str,
    base_url: str | None = None,
    headers: Mapping[str, str] | None = None,
    timeout: float | None = None,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> OpenApiOperation:
    """Build the endpoint and parameters schema of one operation.

    Args:
        document: the OpenAPI 3 document.
        operation_id: the operation's ``operationId``.
        source: where the document came from (URL or path), for relative
            server URLs and error messages.
        base_url: overrides the document's server URL.
        headers: fixed headers sent with every call (may embed secrets).
        timeout: seconds per call; None uses the call's.
        max_response_bytes: longer responses are truncated.

    Returns:
        The operation.

    Raises:
        ToolError: the operation is missing or uses what cannot be mapped
            (a cookie parameter that is required, a non-local ``$ref``).
    """
    template, method, op = _find(document, operation_id)
    path_item = cast(Mapping[str, Any], cast(Mapping[str, Any], document["paths"])[template])
    refs = _Refs(document)
    properties: dict[str, Any] = {}
    required: list[str] = []
    path: list[str] = []
    query: dict[str, str] = {}
    header_arguments: dict[str, str] = {}
    for param in _merged_parameters(refs, path_item, op):
        name, location = str(param.get("name")), str(param.get("in"))
        if location not in _LOCATIONS:
            if param.get("required"):
                raise ToolError(
                    f"OpenAPI operation '{operation_id}': required {location} parameter "
                    f"'{name}' is not supported"
                )
            continue
        argument = name if name not in properties else f"{location}_{name}"
        schema = refs.schema(param.get("schema", {}))
        if param.get("description") and isinstance(schema, dict):
            schema = {**cast(dict[str, Any], schema), "description": param["description"]}
        properties[argument] = schema
        if param.get("required") or location == "path":
            required.append(argument)
        if location == "path":
            path.append(argument)
            template = template.replace("{" + name + "}", "{" + argument + "}")
        elif location == "query":
            query[name] = argument
        else:
            header_arguments[name] = argument
    body, body_argument = _request_body(refs, op, properties, required)
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    used = _used_defs(properties, refs.defs)
    if used:
        # Only what the arguments reach: a merged body's own schema is not.
        parameters["$defs"] = {name: refs.defs[name] for name in refs.defs if name in used}
    summary = [str(op[key]).strip() for key in ("summary", "description") if op.get(key)]
    url = _base_url(document, base_url, source).rstrip("/") + template
    # The call fills the URL with str.format: only plain fields the
    # operation's path parameters fill may be left in it.
    where = f"OpenAPI operation '{operation_id}': URL '{url}'"
    stray = [name for name in url_fields(url, where) if name not in path]
    if stray:
        raise ToolError(
            f"{where}: '{{{stray[0]}}}' is not a path parameter of the operation; "
            "declare it under the operation's parameters with 'in: path'"
        )
    endpoint = HttpEndpoint(
        method=method.upper(),
        url=url,
        headers=dict(headers or {}),
        path=tuple(path),
        query=query,
        header_arguments=header_arguments,
        body=body,
        body_argument=body_argument,
        timeout=timeout,
        max_response_bytes=max_response_bytes,
    )
    return OpenApiOperation(endpoint, parameters, "\n\n".join(summary))


def _used_defs(node: object, defs: Mapping[str, Any]) -> set[str]:
    """Names of the ``$defs`` that ``node`` reaches, directly or through other defs."""
    used: set[str] = set()
    pending: list[object] = [node]
    while pending:
        current = pending.pop()
        if isinstance(current, dict):
            for key, value in cast(dict[str, Any], current).items():
                if key == "$ref" and isinstance(value, str) and value.startswith("#/$defs/"):
                    name = value.removeprefix("#/$defs/")
                    if name not in used:
                        used.add(name)
                        pending.append(defs.get(name))
                else:
                    pending.append(value)
        elif isinstance(current, list):
            pending.extend(cast(list[object], current))
    return used


def _request_body(
    refs: _Refs, op: Mapping[str, Any], properties: dict[str, Any], required: list[str]
) -> tuple[dict[str, str], str | None]:
    """Add the JSON body's arguments; return (field -> argument, whole-body argument)."""
    request_body = refs.deref(op.get("requestBody"))
    if not isinstance(request_body, dict):
        return {}, None
    request_body = cast(dict[str, Any], request_body)
    content = cast(Mapping[str, Any], request_body.get("content") or {})
    media = next((m for m in content if m == "application/json" or m.endswith("+json")), None)
    if media is None:
        return {}, None
    schema = refs.schema(cast(Mapping[str, Any], content[media]).get("schema", {}))
    body_required = bool(request_body.get("required"))
    inner = refs.resolved(schema)
    fields = cast(Mapping[str, Any], inner.get("properties") or {})
    if inner.get("type") == "object" and fields and not set(fields) & set(properties):
        properties.update(fields)
        if body_required:
            required.extend(str(n) for n in cast(list[Any], inner.get("required", [])))
        return {name: name for name in fields}, None
    argument = "body" if "body" not in properties else "request_body"
    properties[argument] = schema
    if body_required:
        required.append(argument)
    return {}, argument
