"""JSON-RPC 2.0 at ``POST /jsonrpc``, and the legacy envelope at the same URL.

A request names one method of :data:`~pilothouse.server._jsonrpc_methods.METHODS`
(``pilothouse/<service>/<action>/<version>``) with params by name, or one the
application routed (:class:`~pilothouse.server.RpcRouter`:
``<host>/<service>/<action>/<version>`` to a Python callable or a catalog
action). Batches (a JSON array) are answered with an array in request order,
their calls run concurrently (they are independent by the specification);
notifications (no ``id``) run but get no entry, and a batch of notifications
only is answered ``204 No Content``. Every answer that has a
body is HTTP 200: errors travel inside it, with the spec codes

=======  ================================================================
code     meaning
=======  ================================================================
-32700   parse error: the body is not JSON
-32600   invalid request: not a request object, wrong ``jsonrpc``, empty batch
-32601   method not found
-32602   invalid params (``data`` is the problem detail, naming the field)
-32603   internal error (no stack trace leaves the process)
-32001   not found (a conversation or catalog entity)
-32002   invalid state (e.g. the conversation is running)
-32003   conflict
-32004   bad input the operation refused (runtime config, template, answers)
-32005   a model provider failed
-32006   unauthorized, -32007 forbidden, -32008 rate limited (for completeness:
         keys and rates are checked for the whole HTTP request, 401 and 429)
=======  ================================================================

and ``data`` carrying an RFC 9457 problem document whose ``status`` is the
REST service's for the same error. Application errors map by their
:class:`~pilothouse.errors.ErrorCategory`, in one table (``_ERRORS``).

The legacy envelope ``{host, service, action, version, data}`` is the same
call: method ``<host>/<service>/<action>/<version>`` when the application
routed it, else ``pilothouse/<service>/<action>/<version>``, params ``data``.
Its UI members ``title``, ``success`` and ``failure`` are accepted and
ignored (the migration plan keeps them client-side). It is answered
``{host, service, action, version, data}`` or ``{..., error: {code, message,
data}}``, or as JSON-RPC when it carries an ``id``; it may stand in a batch.
See ``docs/jsonrpc.md``.
"""

from __future__ import annotations

__all__ = ["router"]

import json
import logging
from typing import Any, cast

import anyio
from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from pilothouse.api import Pilothouse, loads_json
from pilothouse.errors import BudgetExceededError, ErrorCategory, ForbiddenError, PilothouseError
from pilothouse.server._deps import Authenticated, Facade, State, charge_batch
from pilothouse.server._jsonrpc_methods import METHODS, MODEL_OBJECT, MODEL_TEXT, to_json
from pilothouse.server._jsonrpc_params import Params
from pilothouse.server._problems import (
    HTTP_STATUS,
    budget_members,
    field_path,
    problem_body,
    problem_responses,
)
from pilothouse.server._rpc_router import RpcRoute, RpcRouter

logger = logging.getLogger(__name__)

router = APIRouter(tags=["json-rpc"])

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
NOT_FOUND = -32001
INVALID_STATE = -32002
CONFLICT = -32003
BAD_INPUT = -32004
PROVIDER_FAILED = -32005
UNAUTHORIZED = -32006
FORBIDDEN = -32007
RATE_LIMITED = -32008
UNAVAILABLE = -32009
BUDGET_EXCEEDED = -32010
DISCOVER = "rpc.discover"
"""OpenRPC's method for the server's own description."""

_ERRORS: dict[ErrorCategory, tuple[int, str]] = {
    ErrorCategory.INVALID_INPUT: (BAD_INPUT, "Bad input"),
    ErrorCategory.NOT_FOUND: (NOT_FOUND, "Not found"),
    ErrorCategory.INVALID_STATE: (INVALID_STATE, "Invalid state"),
    ErrorCategory.CONFLICT: (CONFLICT, "Conflict"),
    ErrorCategory.UNAUTHORIZED: (UNAUTHORIZED, "Unauthorized"),
    ErrorCategory.FORBIDDEN: (FORBIDDEN, "Forbidden"),
    ErrorCategory.RATE_LIMITED: (RATE_LIMITED, "Rate limited"),
    ErrorCategory.BUDGET_EXCEEDED: (BUDGET_EXCEEDED, "Budget exceeded"),
    ErrorCategory.UNAVAILABLE: (UNAVAILABLE, "Service unavailable"),
    ErrorCategory.UPSTREAM: (PROVIDER_FAILED, "Provider failed"),
    ErrorCategory.INTERNAL: (INTERNAL_ERROR, "Internal error"),
}
"""This face's one error map: the code and message of each category (the
problem document in ``data`` carries the service's HTTP status)."""

_LEGACY_KEYS = ("host", "service", "action", "version")
_LEGACY_UI = ("title", "success", "failure")
_MISSING = object()


class RpcError(Exception):
    """A JSON-RPC error object: code, message and a problem document as data."""

    def __init__(self, code: int, message: str, status: int, detail: str, **extra: Any) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = problem_body(status, message, detail, **extra)

    def as_json(self) -> dict[str, Any]:
        """Return the ``error`` member."""
        return {"code": self.code, "message": self.message, "data": self.data}


def _invalid_params(exc: ValidationError, params: type[Params]) -> RpcError:
    errors = [
        {
            # The two forms' tags say which form was checked: no field of the wire.
            "field": field_path(e["loc"], params, skip=(MODEL_TEXT, MODEL_OBJECT), empty="params"),
            "rule": e["msg"].removeprefix("Value error, "),
        }
        for e in exc.errors(include_url=False, include_input=False)
    ]
    detail = "; ".join(f"{e['field']}: {e['rule']}" for e in errors)
    return RpcError(INVALID_PARAMS, "Invalid params", 400, detail, errors=errors)


def _from_pilothouse(exc: PilothouseError) -> RpcError:
    code, message = _ERRORS[exc.category]
    extra = budget_members(exc) if isinstance(exc, BudgetExceededError) else None
    return RpcError(code, message, HTTP_STATUS[exc.category], exc.public_message, extra=extra)


async def _routed(ph: Pilothouse, route: RpcRoute, params: Any) -> Any:
    """Run an application's method (a Python callable or a catalog target)."""
    if params is _MISSING or params is None:
        params = {}
    if route.handler is None and not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params", 400, "params must be an object (by name)")
    if route.handler is not None:
        if not isinstance(params, dict | list):
            raise RpcError(
                INVALID_PARAMS, "Invalid params", 400, "params must be an object or an array"
            )
        try:
            route.bind(params)
        except TypeError as exc:
            raise RpcError(INVALID_PARAMS, "Invalid params", 400, str(exc)) from None
    try:
        return to_jsonable_python(await route.call(ph, params))
    except PilothouseError as exc:
        raise _from_pilothouse(exc) from None
    except Exception:
        logger.exception("JSON-RPC method %s failed unexpectedly", route.method)
        raise RpcError(
            INTERNAL_ERROR,
            "Internal error",
            500,
            "an unexpected error occurred; it has been logged",
        ) from None


async def _call(
    ph: Pilothouse,
    method: str,
    params: Any,
    rpc: RpcRouter | None = None,
    sent: str | None = None,
    *,
    admin: bool = False,
) -> Any:
    """Run one method and return its JSON result.

    ``sent`` names the method as the caller wrote it, when that is not
    ``method`` (a legacy envelope's ``host/service/action/version``).
    ``admin`` says the caller's key has the admin scope, which a method
    marked ``admin`` needs.

    Raises:
        RpcError: anything that went wrong, as a JSON-RPC error.
    """
    entry = METHODS.get(method)
    if entry is None:
        route = rpc.get(method) if rpc is not None else None
        if route is not None:
            return await _routed(ph, route, params)
        if method == DISCOVER:
            from pilothouse.server._openrpc import discover

            return discover(rpc)
        raise RpcError(
            METHOD_NOT_FOUND,
            "Method not found",
            404,
            f"no method '{sent or method}' (rpc.discover lists the methods)",
        )
    if entry.admin and not admin:
        raise _from_pilothouse(ForbiddenError("this method needs an API key with admin scope"))
    if params is _MISSING or params is None:
        params = {}
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "Invalid params", 400, "params must be an object (by name)")
    try:
        parsed = entry.params.model_validate(params)
    except ValidationError as exc:
        raise _invalid_params(exc, entry.params) from None
    try:
        return to_json(ph, await entry.call(ph, parsed))
    except PilothouseError as exc:
        raise _from_pilothouse(exc) from None
    except ValueError as exc:
        raise RpcError(BAD_INPUT, "Bad input", 422, str(exc)) from None
    except Exception:
        logger.exception("JSON-RPC method %s failed unexpectedly", method)
        raise RpcError(
            INTERNAL_ERROR,
            "Internal error",
            500,
            "an unexpected error occurred; it has been logged",
        ) from None


def _valid_id(value: Any) -> bool:
    return value is None or (isinstance(value, str | int) and not isinstance(value, bool))


def _error(request_id: Any, error: RpcError) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "error": error.as_json()}


def _invalid(detail: str) -> RpcError:
    return RpcError(INVALID_REQUEST, "Invalid Request", 400, detail)


async def _one(
    ph: Pilothouse, item: Any, rpc: RpcRouter, *, admin: bool = False
) -> dict[str, Any] | None:
    """Answer one request object or legacy envelope; None for a notification."""
    if isinstance(item, dict) and _is_legacy(cast("dict[str, Any]", item)):
        return await _legacy(ph, cast("dict[str, Any]", item), rpc, admin=admin)
    if not isinstance(item, dict):
        return _error(None, _invalid("a request must be a JSON object"))
    request = cast("dict[str, Any]", item)
    request_id = request.get("id", _MISSING)
    if request_id is not _MISSING and not _valid_id(request_id):
        return _error(None, _invalid("id must be a string, an integer or null"))
    answer_id = None if request_id is _MISSING else request_id
    if request.get("jsonrpc") != "2.0":
        return _error(answer_id, _invalid('jsonrpc must be exactly "2.0"'))
    method = request.get("method")
    if not isinstance(method, str):
        return _error(answer_id, _invalid("method must be a string"))
    unknown = sorted(set(request) - {"jsonrpc", "method", "params", "id"})
    if unknown:
        return _error(answer_id, _invalid(f"unknown member(s): {', '.join(unknown)}"))
    try:
        result = await _call(ph, method, request.get("params", _MISSING), rpc, admin=admin)
    except RpcError as error:
        return None if request_id is _MISSING else _error(answer_id, error)
    if request_id is _MISSING:
        return None
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


async def _legacy(
    ph: Pilothouse, envelope: dict[str, Any], rpc: RpcRouter, *, admin: bool = False
) -> dict[str, Any]:
    """Answer a legacy envelope: in its own shape, or as JSON-RPC when it carries an ``id``."""
    head = {key: envelope.get(key) for key in _LEGACY_KEYS}
    request_id = envelope.get("id", _MISSING)
    unknown = sorted(set(envelope) - {*_LEGACY_KEYS, *_LEGACY_UI, "data", "id"})
    if request_id is not _MISSING and not _valid_id(request_id):
        unknown = ["id (must be a string, an integer or null)", *unknown]

    def answer(result: Any = _MISSING, error: RpcError | None = None) -> dict[str, Any]:
        if request_id is not _MISSING:
            # The migration plan: a request with an id gets a JSON-RPC answer.
            rid = request_id if _valid_id(request_id) else None
            if error is not None:
                return _error(rid, error)
            return {"jsonrpc": "2.0", "id": rid, "result": result}
        if error is not None:
            return {**head, "error": error.as_json()}
        return {**head, "data": result}

    if unknown or not all(isinstance(head[key], str) for key in ("service", "action")):
        detail = (
            f"unknown member(s): {', '.join(unknown)}"
            if unknown
            else "service and action must be strings"
        )
        return answer(error=_invalid(detail))
    # UI members (title, success, failure) are the form's, not the call's:
    # accepted and ignored, as the JSON-RPC migration plan says.
    routed = "/".join(str(head[key]) for key in _LEGACY_KEYS)
    if rpc.get(routed) is not None:
        method = routed
    else:
        version = str(head["version"] or "v1")
        if not version.startswith("v"):
            version = f"v{version}"
        method = f"pilothouse/{head['service']}/{head['action']}/{version}"
    try:
        result = await _call(
            ph, method, envelope.get("data", _MISSING), rpc, sent=routed, admin=admin
        )
    except RpcError as error:
        return answer(error=error)
    return answer(result)


def _is_legacy(body: dict[str, Any]) -> bool:
    return "jsonrpc" not in body and "service" in body and "action" in body


@router.post(
    "/jsonrpc",
    summary="JSON-RPC 2.0 (single, batch, notifications) and the legacy envelope",
    responses={
        204: {"description": "Only notifications: nothing to answer"},
        **problem_responses(401, 413, 429),
    },
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {
                "application/json": {
                    "schema": {
                        "oneOf": [
                            {"type": "object"},
                            {"type": "array", "items": {"type": "object"}},
                        ]
                    }
                }
            },
        }
    },
    response_model=None,
)
async def jsonrpc(request: Request, ph: Facade, state: State, principal: Authenticated) -> Response:
    """Dispatch a request, a batch or a legacy envelope."""
    admin = principal.is_admin
    try:
        # Every call's params are held to the input rules by their model and the facade.
        body: Any = loads_json(await request.body(), check=False, constants=False)
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError) as exc:
        error = RpcError(PARSE_ERROR, "Parse error", 400, f"the body is not valid JSON: {exc}")
        return JSONResponse(_error(None, error))
    except RecursionError:
        error = RpcError(PARSE_ERROR, "Parse error", 400, "the body nests too deeply")
        return JSONResponse(_error(None, error))
    if isinstance(body, list):
        items = cast("list[Any]", body)
        if not items:
            return JSONResponse(_error(None, _invalid("a batch must not be empty")))
        limit = state.server.jsonrpc_max_batch
        if len(items) > limit:
            return JSONResponse(
                _error(None, _invalid(f"a batch holds at most {limit} calls, not {len(items)}"))
            )
        # The request itself took one token of the key's rate limit; each
        # further call of the batch takes one more, all before any runs.
        await charge_batch(request, len(items) - 1)
        answers = await _batch(ph, items, state.rpc, admin=admin)
        return JSONResponse(answers) if answers else Response(status_code=204)
    answer = await _one(ph, body, state.rpc, admin=admin)
    return JSONResponse(answer) if answer is not None else Response(status_code=204)


async def _batch(
    ph: Pilothouse, items: list[Any], rpc: RpcRouter, *, admin: bool = False
) -> list[dict[str, Any]]:
    """Answer a batch's calls concurrently; the answers keep the request order.

    The calls of a batch are independent by the specification (a server may
    run them in any order), so none waits for another; a call that needs
    another's result belongs in a later request.
    """
    answers: list[dict[str, Any] | None] = [None] * len(items)

    async def answer(index: int, item: Any) -> None:
        answers[index] = await _one(ph, item, rpc, admin=admin)

    async with anyio.create_task_group() as group:
        for index, item in enumerate(items):
            group.start_soon(answer, index, item)
    return [a for a in answers if a is not None]
