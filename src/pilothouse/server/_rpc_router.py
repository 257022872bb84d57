"""Handlers an application registers at ``POST /jsonrpc``: Python callables and catalog actions.

Beside the built-in ``pilothouse/<service>/<action>/<version>`` methods,
a deployment routes its own methods, named as light-hybrid-4j names its
handlers, ``<host>/<service>/<action>/<version>``
(``lightapi.net/service/createApiVersion/0.1.0``):

- a **Python callable** (sync or async; a sync one runs in a worker thread,
  so a slow one never holds up the event loop) is called with the params, by name
  (an object) or by position (an array), as its signature takes them; a
  call its signature cannot bind is ``-32602``. What it returns is the
  result (JSON-ready: it goes through pydantic's ``to_jsonable_python``);
  a :class:`~pilothouse.errors.PilothouseError` it raises is an error by its
  category, anything else ``-32603`` (logged, never shown).
- a **catalog action** (``action:<CODE>`` or ``agent:<CODE>``) runs one
  governed, audited turn: params ``{"message": ..., <placeholder>: ...}``
  (``message`` defaults to the params as JSON), the result is the turn's
  result as ``TurnResult.as_json()``.

Example:
    ```python
    from pilothouse.server import RpcRouter, ServerState, create_app

    rpc = RpcRouter()
    rpc.add("lightapi.net/service/createApiVersion/0.1.0", create_api_version)
    rpc.add_action("erp-1/llm/summarize/1.0.0", "action:SUMBRAND")
    app = create_app(state=ServerState(settings, rpc=rpc))
    ```

Catalog actions can also be routed by the setting
``PILOTHOUSE_SERVER_JSONRPC_ACTIONS`` (a JSON object, method → target id).
"""

from __future__ import annotations

__all__ = ["RpcRoute", "RpcRouter"]

import functools
import inspect
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import anyio

from pilothouse.errors import InvalidFieldError

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse

_RESERVED = ("rpc.", "pilothouse/")


@dataclass(frozen=True)
class RpcRoute:
    """One registered method: a Python callable, or a catalog target.

    Attributes:
        method: the method name.
        handler: the callable, or None for a catalog target.
        target: ``action:<CODE>`` or ``agent:<CODE>``, or None.
    """

    method: str
    handler: Callable[..., Any] | None = None
    target: str | None = None

    def bind(self, params: Any) -> inspect.BoundArguments:
        """Bind the params to the callable's signature.

        Raises:
            TypeError: they do not fit it.
        """
        assert self.handler is not None
        signature = inspect.signature(self.handler)
        if isinstance(params, list):
            return signature.bind(*cast("list[Any]", params))
        return signature.bind(**cast("dict[str, Any]", params))

    async def call(self, ph: Pilothouse, params: Any) -> Any:
        """Run the route with params already checked to bind (callables) or be an object."""
        if self.handler is not None:
            bound = self.bind(params)
            handler = self.handler
            if _is_async(handler):
                return await handler(*bound.args, **bound.kwargs)
            # A sync handler (a blocking client, a CPU-bound step) runs in a
            # worker thread: on the loop it would stall every other request.
            value = await anyio.to_thread.run_sync(
                functools.partial(handler, *bound.args, **bound.kwargs)
            )
            if inspect.isawaitable(value):
                value = await value
            return value
        assert self.target is not None
        kind, _, code = self.target.partition(":")
        values = dict(cast("dict[str, Any]", params))
        message = values.pop("message", None)
        text = str(message) if message else json.dumps(values, ensure_ascii=False, default=str)
        action, agent = code, None
        if kind == "agent":
            found = await ph.query.find_target(self.target)
            if found is None:
                from pilothouse.errors import NotFoundError

                raise NotFoundError(f"agent '{code}' not found")
            action, agent = found.action_code, code
        input_data = {name: str(value) for name, value in values.items()}
        if message:
            input_data.setdefault("message", str(message))
        turn = await ph.command.start_and_send(
            text, action=action, agent=agent, input_data=input_data
        )
        return turn.as_json()


def _is_async(handler: Callable[..., Any]) -> bool:
    """Whether calling ``handler`` gives a coroutine (a function or an async ``__call__``)."""
    call = handler.__call__ if not inspect.isroutine(handler) else None
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(call)


def _check_name(method: str, *, routed: bool) -> None:
    if not method or method != method.strip():
        raise InvalidFieldError(
            "method", "a method name must be a non-empty string without spaces around it"
        )
    if method.startswith(_RESERVED):
        raise InvalidFieldError(
            "method", f"'{method}' is reserved (rpc.* by JSON-RPC, pilothouse/* by the built-ins)"
        )
    parts = method.split("/")
    if routed and (len(parts) != 4 or not all(parts)):
        raise InvalidFieldError(
            "method",
            f"'{method}' is not <host>/<service>/<action>/<version>, e.g. "
            "'erp-1/llm/summarize/1.0.0'",
        )


class RpcRouter:
    """The methods an application added to ``POST /jsonrpc``."""

    def __init__(self) -> None:
        self._routes: dict[str, RpcRoute] = {}

    def add(self, method: str, handler: Callable[..., Any]) -> None:
        """Route ``method`` to a Python callable.

        ``<host>/<service>/<action>/<version>`` is the recommended shape; any
        name outside the reserved ``rpc.*`` and ``pilothouse/*`` is accepted.

        Raises:
            InvalidFieldError: a reserved or empty name, or one already routed.
        """
        _check_name(method, routed=False)
        self._put(RpcRoute(method, handler=handler))

    def add_action(self, method: str, target: str) -> None:
        """Route ``method`` (``<host>/<service>/<action>/<version>``) to a catalog target.

        Args:
            method: the method name.
            target: ``action:<CODE>``, ``agent:<CODE>`` or a plain action code.

        Raises:
            InvalidFieldError: a badly shaped name or target, or a name already routed.
        """
        _check_name(method, routed=True)
        kind, colon, code = target.partition(":")
        if not colon:
            kind, code = "action", target
        if kind not in ("action", "agent") or not code:
            raise InvalidFieldError(
                "target", f"'{target}' is not 'action:<CODE>' or 'agent:<CODE>'"
            )
        self._put(RpcRoute(method, target=f"{kind}:{code}"))

    def _put(self, route: RpcRoute) -> None:
        if route.method in self._routes:
            raise InvalidFieldError("method", f"'{route.method}' is routed already")
        self._routes[route.method] = route

    def get(self, method: str) -> RpcRoute | None:
        """Return the route of ``method``, or None."""
        return self._routes.get(method)

    def routes(self) -> list[RpcRoute]:
        """Every routed method, by name."""
        return [self._routes[name] for name in sorted(self._routes)]

    @classmethod
    def from_actions(cls, actions: Mapping[str, str]) -> RpcRouter:
        """A router of catalog targets only (``PILOTHOUSE_SERVER_JSONRPC_ACTIONS``)."""
        router = cls()
        for method, target in actions.items():
            router.add_action(method, target)
        return router
