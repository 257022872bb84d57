"""``rpc.discover`` at ``POST /jsonrpc``: the methods as an OpenRPC document.

The OpenRPC specification (1.3.2) reserves ``rpc.discover`` for a server's
description of itself. The document lists the built-in
``pilothouse/<service>/<action>/<version>`` methods (params by name, each
with the JSON schema of its pydantic model's field) and the methods the
application routed (a Python callable's parameters from its signature; a
catalog action's ``message``). Shared schemas are in
``components.schemas``. Results are described only by name: each method's
result shape is documented in ``docs/jsonrpc.md``.
"""

from __future__ import annotations

__all__ = ["OPENRPC_VERSION", "discover"]

import inspect
from typing import TYPE_CHECKING, Any, cast

from pydantic import PydanticSchemaGenerationError, TypeAdapter

from pilothouse.server._jsonrpc_methods import METHODS

if TYPE_CHECKING:
    from pilothouse.server._rpc_router import RpcRoute, RpcRouter

OPENRPC_VERSION = "1.3.2"
"""The OpenRPC specification version the document follows."""

_REFS = "#/components/schemas/{model}"


def _release() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("pilothouse")
    except PackageNotFoundError:
        return "0.0.0"


def _builtin(name: str, schemas: dict[str, Any]) -> dict[str, Any]:
    method = METHODS[name]
    schema = method.params.model_json_schema(by_alias=True, ref_template=_REFS)
    schemas.update(cast("dict[str, Any]", schema.pop("$defs", {})))
    required = set(cast("list[str]", schema.get("required", [])))
    properties = cast("dict[str, Any]", schema.get("properties", {}))
    return {
        "name": name,
        "summary": method.summary,
        "paramStructure": "by-name",
        "params": [
            {"name": field, "required": field in required, "schema": properties[field]}
            for field in properties
        ],
        "result": {"name": "result", "schema": {}},
    }


def _annotation_schema(annotation: Any) -> dict[str, Any]:
    if annotation is inspect.Parameter.empty or isinstance(annotation, str):
        # No annotation, or one left as text (postponed): any JSON value.
        return {}
    try:
        return TypeAdapter(annotation).json_schema(ref_template=_REFS)
    except PydanticSchemaGenerationError:
        # A type pydantic cannot describe (an arbitrary class): the call
        # still binds it by name or position; the document says "any".
        return {}


def _routed(route: RpcRoute) -> dict[str, Any]:
    if route.handler is None:
        return {
            "name": route.method,
            "summary": f"runs catalog {route.target} as one governed, audited turn",
            "paramStructure": "by-name",
            "params": [
                {
                    "name": "message",
                    "required": False,
                    "schema": {"type": "string"},
                    "description": "the user turn (default: the other params as JSON); "
                    "every other param fills the prompt's placeholder of its name",
                }
            ],
            "result": {"name": "result", "schema": {"type": "object"}},
        }
    params: list[dict[str, Any]] = []
    try:
        signature = inspect.signature(route.handler, eval_str=True)
    except (NameError, SyntaxError, TypeError):
        # Annotations written as text that name what the handler's module
        # cannot resolve: the names and defaults still describe the call.
        signature = inspect.signature(route.handler)
    for parameter in signature.parameters.values():
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        params.append(
            {
                "name": parameter.name,
                "required": parameter.default is inspect.Parameter.empty,
                "schema": _annotation_schema(parameter.annotation),
            }
        )
    summary = (inspect.getdoc(route.handler) or route.method).splitlines()[0]
    return {
        "name": route.method,
        "summary": summary,
        "paramStructure": "either",
        "params": params,
        "result": {"name": "result", "schema": {}},
    }


def discover(rpc: RpcRouter | None) -> dict[str, Any]:
    """The OpenRPC document of the built-in methods and the routed ones, by name."""
    schemas: dict[str, Any] = {}
    methods = [_builtin(name, schemas) for name in sorted(METHODS)]
    if rpc is not None:
        methods += [_routed(route) for route in rpc.routes()]
    return {
        "openrpc": OPENRPC_VERSION,
        "info": {
            "title": "pilothouse JSON-RPC",
            "version": _release(),
            "description": "POST /jsonrpc; see docs/jsonrpc.md",
        },
        "methods": methods,
        "components": {"schemas": schemas},
    }
