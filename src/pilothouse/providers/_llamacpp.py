"""The chat model for llama.cpp's OpenAI-compatible server.

llama-cpp-python 0.3.36 validates requests strictly: an assistant message
that carries only tool calls must still have a string ``content`` (OpenAI
accepts ``null``), or the server answers HTTP 500. This model sends ``""``.
"""

from __future__ import annotations

__all__ = ["llamacpp_chat_model"]

from collections.abc import Sequence
from typing import Any, cast

from pydantic_ai.messages import ModelMessage
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.settings import ModelSettings


def llamacpp_chat_model(model_name: str, provider: Any) -> Model:
    """Return an OpenAI chat model adjusted to what llama.cpp's server accepts."""
    from pydantic_ai.models.openai import OpenAIChatModel

    class LlamaCppChatModel(OpenAIChatModel):
        async def _map_messages(
            self,
            messages: Sequence[ModelMessage],
            model_request_parameters: ModelRequestParameters,
            *,
            model_settings: ModelSettings | None = None,
        ) -> list[Any]:
            mapped = await super()._map_messages(  # pyright: ignore[reportPrivateUsage]
                messages, model_request_parameters, model_settings=model_settings
            )
            for message in mapped:
                entry = cast("dict[str, Any]", message)
                if entry.get("role") == "assistant" and entry.get("content") is None:
                    entry["content"] = ""
            return mapped

    return LlamaCppChatModel(model_name, provider=provider)
