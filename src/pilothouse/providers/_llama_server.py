"""The local model's server process: llama-cpp-python's server, adjusted.

:class:`~pilothouse.providers._local.LocalModelServers` runs this module
(``python -m pilothouse.providers._llama_server --model PATH ...``) instead
of ``llama_cpp.server``. It serves the same OpenAI-compatible app, with:

* the ``pilothouse`` chat format registered (:mod:`._llama_chat`), the default;
* :class:`RequestGate` in front of it, which turns the OpenAI request fields
  llama-cpp-python does not know into the ones it does, and refuses those it
  would silently ignore, with HTTP 400 naming the field:

  - ``max_completion_tokens`` (what pydantic-ai and the OpenAI SDK send now)
    becomes ``max_tokens``; llama-cpp-python ignores the new name, so a
    40-token request produced 1,476 tokens;
  - ``response_format`` ``json_schema`` becomes ``json_object`` with the
    schema, which the server turns into a grammar;
  - ``content: null`` or missing (an assistant message that only calls
    tools) becomes ``""``, which the server's request model insists on;
  - ``n`` above 1 is refused (the server ignores it and answers once), and so
    are log probabilities and logit bias under the ``pilothouse`` format.

This module runs in its own process; it imports llama-cpp-python at once.
"""

from __future__ import annotations

__all__ = ["RequestGate", "adapt_request", "main"]

import argparse
import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from pathlib import Path
from typing import Any, cast

from pilothouse.providers._llama_chat import HANDLER_NAME, register
from pilothouse.providers._toolcall_text import key_of

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

_GATED_PATHS = frozenset({"/v1/chat/completions", "/v1/completions"})


class BadRequest(ValueError):
    """A request field the server would ignore or cannot honour."""

    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def adapt_request(payload: dict[str, Any], *, chat: bool, own_handler: bool) -> None:
    """Rewrite an OpenAI request body, in place, into what llama-cpp-python honours.

    Args:
        payload: the decoded JSON body.
        chat: whether it is a chat completion (else a text completion).
        own_handler: whether the ``pilothouse`` chat format serves it.

    Raises:
        BadRequest: a field that would be ignored or cannot be honoured.
    """
    if "max_completion_tokens" in payload:
        new = payload.pop("max_completion_tokens")
        old = payload.get("max_tokens")
        if old is not None and new is not None and old != new:
            raise BadRequest(
                "max_completion_tokens",
                f"max_tokens ({old}) and max_completion_tokens ({new}) differ; send only "
                "max_completion_tokens",
            )
        if new is not None:
            payload["max_tokens"] = new
    n = payload.get("n")
    if isinstance(n, int) and n > 1:
        raise BadRequest("n", f"n={n}: the local model answers one choice per request; send n=1")
    response_format = payload.get("response_format")
    if isinstance(response_format, dict):
        payload["response_format"] = _response_format(cast("dict[str, Any]", response_format))
    if chat:
        _fill_null_contents(payload)
    if chat and own_handler:
        if payload.get("logprobs") or payload.get("top_logprobs"):
            raise BadRequest("logprobs", "the local model does not return log probabilities")
        if payload.get("logit_bias"):
            raise BadRequest("logit_bias", "the local model does not take logit_bias")
        _check_tool_choice(payload)


def _fill_null_contents(payload: dict[str, Any]) -> None:
    # OpenAI sends `content: null` (or none at all) on an assistant message that
    # only calls tools; llama-cpp-python's request model wants a string (HTTP 500).
    messages: Any = payload.get("messages")
    for message in cast("list[Any]", messages) if isinstance(messages, list) else []:
        if isinstance(message, dict):
            entry = cast("dict[str, Any]", message)
            if entry.get("content") is None:
                entry["content"] = ""


def _response_format(value: dict[str, Any]) -> dict[str, Any]:
    kind = value.get("type")
    if kind != "json_schema":
        return value
    schema = key_of(value.get("json_schema"), "schema")
    if not isinstance(schema, dict):
        raise BadRequest("response_format", "response_format json_schema needs json_schema.schema")
    # The grammar makes the schema binding, which is what `strict` asks for.
    return {"type": "json_object", "schema": cast("dict[str, Any]", schema)}


def _check_tool_choice(payload: dict[str, Any]) -> None:
    choice: Any = payload.get("tool_choice")
    if not isinstance(choice, dict):
        return
    name = key_of(key_of(payload["tool_choice"], "function"), "name")
    tools: list[object] = payload.get("tools") or []
    names = [key_of(key_of(t, "function"), "name") for t in tools]
    if name not in names:
        raise BadRequest(
            "tool_choice", f"tool_choice names {name!r}, which is not among the tools {names}"
        )


class RequestGate:
    """ASGI middleware applying :func:`adapt_request` to completion requests.

    Args:
        app: the llama-cpp-python app.
        own_handler: whether the model uses the ``pilothouse`` chat format.
    """

    def __init__(self, app: App, *, own_handler: bool, model_id: str | None = None) -> None:
        self._app = app
        self._own_handler = own_handler
        self._model_id = model_id

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection."""
        if (
            scope["type"] != "http"
            or scope["method"] != "POST"
            or scope["path"] not in _GATED_PATHS
        ):
            await self._app(scope, receive, send)
            return
        body = await _read_body(receive)
        try:
            payload: Any = json.loads(body)
        except (json.JSONDecodeError, UnicodeDecodeError):
            payload = None  # the app answers malformed JSON itself
        if isinstance(payload, dict):
            try:
                adapt_request(
                    cast("dict[str, Any]", payload),
                    chat=scope["path"] == "/v1/chat/completions",
                    own_handler=self._own_handler,
                )
                if self._model_id is not None:
                    # llama-cpp-python echoes the request's model name in its
                    # answer whatever file it serves; the answer must name
                    # the model that ran.
                    payload["model"] = self._model_id
            except BadRequest as exc:
                await _send_error(send, exc)
                return
            body = json.dumps(payload).encode("utf-8")
        scope = dict(scope)
        scope["headers"] = [
            (k, v) for k, v in scope.get("headers", []) if k.lower() != b"content-length"
        ] + [(b"content-length", str(len(body)).encode("ascii"))]
        await self._app(scope, _replay(body, receive), send)


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # later messages: the client's disconnect

    return replayed


async def _send_error(send: Send, error: BadRequest) -> None:
    body = json.dumps(
        {
            "error": {
                "message": str(error),
                "type": "invalid_request_error",
                "param": error.param,
                "code": None,
            }
        }
    ).encode("utf-8")
    await send(
        {
            "type": "http.response.start",
            "status": 400,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode("ascii")),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def main(argv: Sequence[str] | None = None) -> None:
    """Start the server (the arguments are :class:`LocalModelServers`' own)."""
    parser = argparse.ArgumentParser(prog="pilothouse.providers._llama_server")
    parser.add_argument("--model", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chat_format", default=HANDLER_NAME)
    parser.add_argument("--n_ctx", type=int, default=4096)
    parser.add_argument("--n_threads", type=int, default=1)
    args = parser.parse_args(argv)

    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    own = args.chat_format == HANDLER_NAME
    if own:
        register()
    model_id = Path(args.model).stem
    model = ModelSettings(
        model=args.model,
        model_alias=model_id,
        chat_format=args.chat_format,
        n_ctx=args.n_ctx,
        n_threads=args.n_threads,
        # Prompt processing on the same cores: more threads than are free
        # slow it down as much as generation (docs/local-model.md).
        n_threads_batch=args.n_threads,
    )
    app: Any = create_app(
        server_settings=ServerSettings(host=args.host, port=args.port),
        model_settings=[model],
    )
    uvicorn.run(
        RequestGate(app, own_handler=own, model_id=model_id), host=args.host, port=args.port
    )


if __name__ == "__main__":
    main()
