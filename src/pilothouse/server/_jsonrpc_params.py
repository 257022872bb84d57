"""What every JSON-RPC method is made of: its name, its params model, its handler.

Shared by the method tables (``_jsonrpc_methods.py``, ``_jsonrpc_evaluation.py``)
so that each table stays a module of its own.
"""

from __future__ import annotations

__all__ = ["Handler", "Method", "NoParams", "Params", "method_name"]

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

if TYPE_CHECKING:
    from pilothouse.api import Pilothouse


def method_name(service: str, action: str, version: str = "v1") -> str:
    """Return the JSON-RPC method name of one operation."""
    return f"pilothouse/{service}/{action}/{version}"


class Params(BaseModel):
    """Base of every method's params: camelCase names, unknown names refused."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")


class NoParams(Params):
    """A method without params."""


Handler = Callable[["Pilothouse", Any], Awaitable[Any]]


@dataclass(frozen=True)
class Method:
    """One JSON-RPC method: its params model and what it calls.

    Attributes:
        params: the params model.
        call: runs the method on the caller's facade.
        summary: one line for ``rpc.discover``.
        admin: only keys with the admin scope may call it (as its REST route).
    """

    params: type[Params]
    call: Handler
    summary: str
    admin: bool = False
