"""SageMaker endpoints as a pydantic-ai model, and as an embedder.

pydantic-ai has no SageMaker adapter, so this is one: it renders the message
list into the endpoint's prompt (see :mod:`._sagemaker_formats`), calls
``sagemaker-runtime`` ``invoke_endpoint`` in a worker thread (boto3 is
blocking), and reads the answer back from the format's response path. Text
endpoints have no tool calling, so tool definitions are not sent; streaming
is not offered.
"""

from __future__ import annotations

__all__ = ["SageMakerEmbedder", "SageMakerModel", "messages_to_turns"]

import logging
from collections.abc import Mapping, Sequence
from typing import Any, cast

import anyio.to_thread
from pydantic_ai._instrumentation import get_instructions
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,  # pyright: ignore[reportDeprecated]
    SystemPromptPart,
    TextPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model, ModelRequestParameters
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import RequestUsage

from pilothouse.providers._sagemaker_formats import ChatTurn, SageMakerFormat, render_prompt

logger = logging.getLogger(__name__)

# ModelSettings keys -> the normalized option names formats are written in.
_SETTING_TO_OPTION = {
    "temperature": "temperature",
    "max_tokens": "max_tokens",
    "top_p": "top_p",
    "top_k": "top_k",
    "stop_sequences": "stop",
    "presence_penalty": "presence_penalty",
    "frequency_penalty": "frequency_penalty",
}


def messages_to_turns(
    messages: Sequence[ModelMessage], instructions: str | None = None
) -> list[ChatTurn]:
    """Reduce pydantic-ai messages to the text turns a text endpoint can take.

    Non-text user content (images, files) is left out, since these endpoints
    take a string; tool returns and retry prompts become user turns.

    Args:
        messages: the conversation.
        instructions: the request's instructions, sent as the first system turn.

    Returns:
        The turns, in order.
    """
    turns: list[ChatTurn] = []
    if instructions:
        turns.append(ChatTurn("system", instructions))
    for message in messages:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, SystemPromptPart):
                    turns.append(ChatTurn("system", part.content))
                elif isinstance(part, UserPromptPart):
                    text = _user_text(part)
                    if text:
                        turns.append(ChatTurn("user", text))
                elif isinstance(part, ToolReturnPart):
                    turns.append(
                        ChatTurn("user", f"Result of {part.tool_name}: {part.model_response_str()}")
                    )
                elif isinstance(part, RetryPromptPart):  # pyright: ignore[reportDeprecated]
                    turns.append(ChatTurn("user", part.model_response()))
        else:
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            if text:
                turns.append(ChatTurn("assistant", text))
    return turns


def _user_text(part: UserPromptPart) -> str:
    if isinstance(part.content, str):
        return part.content
    texts = [item for item in part.content if isinstance(item, str)]
    if len(texts) < len(part.content):
        logger.debug("SageMaker: non-text user content left out (text endpoints only)")
    return "\n".join(texts)


def _options_from_settings(settings: ModelSettings | None) -> dict[str, Any]:
    if not settings:
        return {}
    raw = cast(Mapping[str, Any], settings)
    return {
        option: raw[key] for key, option in _SETTING_TO_OPTION.items() if raw.get(key) is not None
    }


class SageMakerModel(Model[Any]):
    """A pydantic-ai model backed by a SageMaker real-time endpoint.

    Args:
        model_name: the catalog's model name (recorded on responses).
        client: a boto3 ``sagemaker-runtime`` client.
        endpoint_name: the endpoint to invoke.
        message_format: how requests and responses are shaped.
        settings: default model settings.
        endpoint_kwargs: more ``invoke_endpoint`` arguments (``CustomAttributes``...).
    """

    def __init__(
        self,
        model_name: str,
        *,
        client: Any,
        endpoint_name: str,
        message_format: SageMakerFormat,
        settings: ModelSettings | None = None,
        endpoint_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(settings=settings)
        self._model_name = model_name
        self.client = client
        self.endpoint_name = endpoint_name
        self.message_format = message_format
        self.endpoint_kwargs = dict(endpoint_kwargs or {})

    @property
    def model_name(self) -> str:
        """The model name given at construction."""
        return self._model_name

    @property
    def system(self) -> str:
        """The provider system name, ``sagemaker``."""
        return "sagemaker"

    @property
    def base_url(self) -> str | None:
        """The endpoint's address, for telemetry."""
        return f"sagemaker://{self.endpoint_name}"

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        """Render the conversation, invoke the endpoint and parse the answer.

        Args:
            messages: the conversation.
            model_settings: per-request settings (normalized option names).
            model_request_parameters: tools and output mode; tools are not sent.

        Returns:
            The response with one text part.

        Raises:
            UnparseableResponseError: the answer is not where the format says.
        """
        model_settings, model_request_parameters = self.prepare_request(
            model_settings, model_request_parameters
        )
        if model_request_parameters.function_tools:
            logger.debug(
                "SageMaker endpoint %s: %d tool definition(s) not sent (no tool calling)",
                self.endpoint_name,
                len(model_request_parameters.function_tools),
            )
        turns = messages_to_turns(messages, get_instructions(messages, model_request_parameters))
        prompt = render_prompt(turns, self.message_format.template)
        body = self.message_format.request_body(prompt, _options_from_settings(model_settings))
        raw = await invoke_endpoint(
            self.client,
            self.endpoint_name,
            body,
            self.message_format.content_type,
            **self.endpoint_kwargs,
        )
        text = self.message_format.parse_text(raw)
        return ModelResponse(
            parts=[TextPart(content=text)],
            usage=RequestUsage(),
            model_name=self._model_name,
            provider_name="sagemaker",
            provider_url=self.base_url,
        )


async def invoke_endpoint(
    client: Any, endpoint_name: str, body: bytes, content_type: str, **extra: Any
) -> bytes:
    """Call ``invoke_endpoint`` in a worker thread and read the whole body.

    Args:
        client: a boto3 ``sagemaker-runtime`` client.
        endpoint_name: the endpoint.
        body: the request body.
        content_type: its content type.
        **extra: more ``invoke_endpoint`` arguments (Vantiq's ``endpoint_kwargs``).

    Returns:
        The response body bytes.
    """

    def call() -> bytes:
        response = client.invoke_endpoint(
            EndpointName=endpoint_name,
            Body=body,
            ContentType=content_type,
            Accept="application/json",
            **extra,
        )
        return cast(bytes, response["Body"].read())

    # abandon_on_cancel: a cancelled turn must not wait for a slow endpoint.
    return await anyio.to_thread.run_sync(call, abandon_on_cancel=True)


class SageMakerEmbedder:
    """Embeds texts with a SageMaker embedding endpoint.

    Args:
        client: a boto3 ``sagemaker-runtime`` client.
        endpoint_name: the endpoint to invoke.
        message_format: the embedding format; at nesting level 0 each text is
            sent in its own request, otherwise all in one.
    """

    def __init__(self, *, client: Any, endpoint_name: str, message_format: SageMakerFormat) -> None:
        self.client = client
        self.endpoint_name = endpoint_name
        self.message_format = message_format

    async def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """Return one vector per text, in order.

        Args:
            texts: the texts to embed.

        Returns:
            The vectors.

        Raises:
            UnparseableResponseError: the response does not hold the vectors.
        """
        fmt = self.message_format
        if not texts:
            return []
        if fmt.request_nesting_level == 0:
            vectors: list[list[float]] = []
            for text in texts:
                raw = await invoke_endpoint(
                    self.client, self.endpoint_name, fmt.request_body(text, {}), fmt.content_type
                )
                vectors.extend(fmt.parse_vectors(raw, 1))
            return vectors
        raw = await invoke_endpoint(
            self.client, self.endpoint_name, fmt.request_body(list(texts), {}), fmt.content_type
        )
        return fmt.parse_vectors(raw, len(texts))
