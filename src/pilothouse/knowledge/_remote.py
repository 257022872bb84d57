"""Embedding models behind a service: OpenAI-compatible, SageMaker, Bedrock.

- ``openai``, ``openai-compatible``, ``azure``, ``ollama`` and ``local``
  providers with a base URL (a llama.cpp server started with
  ``--embedding``): ``POST {base_url}/embeddings`` with
  ``{"model", "input": [texts], "encoding_format": "float"}``, over httpx.
  OpenAI's ``text-embedding-3-*`` also get ``dimensions`` (the catalog's,
  or the caller's ``embeddingDimension``), since those models shorten their
  vectors on request, at OpenAI, Azure or an OpenAI-compatible proxy; Azure posts to
  ``{endpoint}/openai/deployments/{model}/embeddings?api-version=...``.
- ``sagemaker``: ``invoke_endpoint`` with an embedding format
  (``settings.format``: ``jumpstart``, ``tei`` or a custom mapping).
- ``bedrock``: ``invoke_model`` with Amazon Titan Text Embeddings (v1, v2:
  one text per call; v2 takes ``dimensions`` and ``normalize``) or Cohere
  Embed v3 (96 texts per call, ``input_type`` ``search_query`` or
  ``search_document``).

AWS calls are tested here with botocore's Stubber only (no AWS account is
reachable from the test machines); the OpenAI wire format is tested against
real HTTP servers on loopback.
"""

from __future__ import annotations

__all__ = ["BedrockEmbedder", "OpenAIEmbedder", "SageMakerEmbeddingModel", "build_embedder"]

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, cast

import anyio.to_thread
import httpx
import numpy as np

from pilothouse.catalog._enums import ProviderKind
from pilothouse.knowledge._embedders import (
    MINILM,
    Embedder,
    EmbeddingModelInfo,
    LocalMiniLM,
    Purpose,
)
from pilothouse.knowledge._errors import KnowledgeSetupError
from pilothouse.knowledge._tokenizers import EstimateTokenizer, TiktokenTokenizer, Tokenizer
from pilothouse.providers._errors import http_status_error, translate_error

if TYPE_CHECKING:
    from pilothouse.providers import ModelFactory, ModelSpec, ProviderSpec

_OPENAI_URL = "https://api.openai.com/v1"
_OLLAMA_URL = "http://127.0.0.1:11434/v1"
_MINILM_NAMES = frozenset(
    {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "allminilml6v2"}
)
_HTTP_KINDS = frozenset(
    {
        ProviderKind.OPENAI,
        ProviderKind.OPENAI_COMPATIBLE,
        ProviderKind.AZURE,
        ProviderKind.OLLAMA,
        ProviderKind.LOCAL,
    }
)


# Kinds whose server may be OpenAI's or a proxy of it: a connector's baseUrl
# (seed 003) is an openai-compatible endpoint with no catalog kind to say so.
_DIMENSION_KINDS = frozenset(
    {ProviderKind.OPENAI, ProviderKind.AZURE, ProviderKind.OPENAI_COMPATIBLE}
)


def openai_shortens(model_name: str) -> bool:
    """Whether a model is OpenAI's ``text-embedding-3`` family, which shortens vectors on request.

    A router's vendor prefix (``openai/text-embedding-3-small``) names the same model.
    """
    return model_name.removeprefix("openai/").startswith("text-embedding-3")


def _secrets(provider: ProviderSpec) -> list[str]:
    values = [v for v in provider.headers.values() if v]
    return [provider.api_key, *values] if provider.api_key else values


def _tokenizer_for(spec: ModelSpec) -> Tokenizer:
    if spec.provider.kind in (ProviderKind.OPENAI, ProviderKind.AZURE):
        from pilothouse.memory._tokens import TiktokenCounter, counter_for

        counter = counter_for(spec.provider.kind, spec.model_name)
        if isinstance(counter, TiktokenCounter):
            return TiktokenTokenizer(counter.encoding)
    return EstimateTokenizer()


class OpenAIEmbedder(Embedder):
    """An OpenAI-compatible ``/embeddings`` endpoint.

    Args:
        spec: the model and its provider (secrets resolved).
        info: dimension, limit and prefixes from the catalog.
        client: the HTTP client to use (owned by the caller); one is made
            and owned otherwise.
        batch_size: texts per request.
        timeout: seconds per request.
    """

    def __init__(
        self,
        spec: ModelSpec,
        info: EmbeddingModelInfo,
        *,
        client: httpx.AsyncClient | None = None,
        batch_size: int = 128,
        timeout: float = 120.0,
    ) -> None:
        super().__init__(info, _tokenizer_for(spec), batch_size)
        self.spec = spec
        provider = spec.provider
        headers = dict(provider.headers)
        params: dict[str, str] = {}
        if provider.kind is ProviderKind.AZURE:
            self.url = _azure_url(provider, spec.model_name)
            params["api-version"] = str(provider.settings["api_version"])
            if provider.api_key:
                headers.setdefault("api-key", provider.api_key)
        else:
            base = provider.base_url or _default_url(provider)
            self.url = f"{base.rstrip('/')}/embeddings"
            if provider.api_key:
                headers.setdefault("Authorization", f"Bearer {provider.api_key}")
        self._headers = headers
        self._params = params
        self._owns_client = client is None
        self._client = client or httpx.AsyncClient(timeout=timeout)
        self._send_dimensions = provider.kind in _DIMENSION_KINDS and openai_shortens(
            spec.model_name
        )

    async def embed_batch(self, texts: list[str], purpose: Purpose) -> list[list[float]]:
        """POST one batch and read ``data[*].embedding`` back in ``index`` order."""
        del purpose
        body: dict[str, Any] = {
            "model": self.spec.model_name,
            "input": texts,
            "encoding_format": "float",
        }
        if self._send_dimensions:
            body["dimensions"] = self.info.dimension
        who = f"provider {self.spec.provider.code}"
        try:
            response = await self._client.post(
                self.url, json=body, headers=self._headers, params=self._params
            )
        except httpx.HTTPError as exc:
            translated = translate_error(exc, secrets=_secrets(self.spec.provider))
            if translated is None:
                raise
            raise translated from exc
        try:
            payload: Any = response.json()
        except ValueError:
            payload = response.text
        if response.status_code >= 400:
            raise http_status_error(
                who,
                response.status_code,
                payload,
                response.headers,
                secrets=_secrets(self.spec.provider),
            )
        return _openai_vectors(who, payload, len(texts))

    async def aclose(self) -> None:
        """Close the HTTP client if this embedder made it."""
        if self._owns_client:
            await self._client.aclose()


def _openai_vectors(who: str, payload: Any, count: int) -> list[list[float]]:
    from pilothouse.errors import UnparseableResponseError

    body: Mapping[str, Any] = (
        cast(Mapping[str, Any], payload) if isinstance(payload, Mapping) else {}
    )
    data: Any = body.get("data")
    if not isinstance(data, list) or len(cast(list[Any], data)) != count:
        raise UnparseableResponseError(f"{who}: the embeddings answer has no data for {count}")
    rows: list[tuple[int, list[float]]] = []
    for position, item in enumerate(cast(list[Any], data)):
        if not isinstance(item, Mapping):
            raise UnparseableResponseError(f"{who}: embeddings data item {position} is no object")
        entry = cast(Mapping[str, Any], item)
        vector = entry.get("embedding")
        if not isinstance(vector, list):
            raise UnparseableResponseError(f"{who}: embeddings data item {position} has no vector")
        index = entry.get("index", position)
        values = cast(list[Any], vector)
        if values and isinstance(values[0], list):
            # llama-cpp-python's server answers one vector per token for a
            # model without pooling (a causal LM): mean-pool them, as
            # sentence embedders do.
            values = np.asarray(values, dtype=np.float32).mean(axis=0).tolist()
        rows.append((int(index), [float(x) for x in values]))
    rows.sort(key=lambda r: r[0])
    return [v for _, v in rows]


def _default_url(provider: ProviderSpec) -> str:
    if provider.kind is ProviderKind.OPENAI:
        return _OPENAI_URL
    if provider.kind is ProviderKind.OLLAMA:
        return _OLLAMA_URL
    raise KnowledgeSetupError(
        f"provider {provider.code}: kind '{provider.kind.value}' needs base_url for embeddings"
    )


def _azure_url(provider: ProviderSpec, deployment: str) -> str:
    endpoint = provider.base_url
    if endpoint is None and provider.settings.get("resource"):
        endpoint = f"https://{provider.settings['resource']}.openai.azure.com"
    if endpoint is None:
        raise KnowledgeSetupError(
            f"provider {provider.code}: kind 'azure' needs base_url or settings.resource"
        )
    if not provider.settings.get("api_version"):
        raise KnowledgeSetupError(f"provider {provider.code}: kind 'azure' needs api_version")
    return f"{endpoint.rstrip('/')}/openai/deployments/{deployment}/embeddings"


class SageMakerEmbeddingModel(Embedder):
    """A SageMaker embedding endpoint (see ``docs/providers.md`` for formats).

    Args:
        info: dimension, limit and prefixes from the catalog.
        embedder: the endpoint caller.
        batch_size: texts per request.
    """

    def __init__(self, info: EmbeddingModelInfo, embedder: Any, batch_size: int = 32) -> None:
        super().__init__(info, EstimateTokenizer(), batch_size)
        self._embedder = embedder

    async def embed_batch(self, texts: list[str], purpose: Purpose) -> list[list[float]]:
        """Invoke the endpoint for one batch."""
        del purpose
        try:
            vectors: list[list[float]] = await self._embedder.embed(texts)
        except Exception as exc:
            translated = translate_error(exc)
            if translated is None:
                raise
            raise translated from exc
        return vectors


class BedrockEmbedder(Embedder):
    """Amazon Titan Text Embeddings or Cohere Embed v3 on Bedrock.

    Args:
        info: dimension, limit and prefixes from the catalog.
        client: a boto3 ``bedrock-runtime`` client.
        model_id: the Bedrock model id (``amazon.titan-embed-text-v2:0``, ...).
    """

    def __init__(self, info: EmbeddingModelInfo, client: Any, model_id: str) -> None:
        family = _bedrock_family(model_id)
        super().__init__(info, EstimateTokenizer(), 96 if family == "cohere" else 1)
        self._client = client
        self._model_id = model_id
        self._family = family

    def _body(self, texts: list[str], purpose: Purpose) -> dict[str, Any]:
        if self._family == "cohere":
            kind = "search_query" if purpose == "query" else "search_document"
            return {"texts": texts, "input_type": kind, "truncate": "NONE"}
        body: dict[str, Any] = {"inputText": texts[0]}
        if self._family == "titan-v2":
            body["dimensions"] = self.info.dimension
            body["normalize"] = True
        return body

    async def embed_batch(self, texts: list[str], purpose: Purpose) -> list[list[float]]:
        """Invoke the model for one batch (one text for Titan)."""
        from pilothouse.errors import UnparseableResponseError

        body = json.dumps(self._body(texts, purpose))

        def call() -> Any:
            return self._client.invoke_model(
                modelId=self._model_id,
                body=body,
                contentType="application/json",
                accept="application/json",
            )

        try:
            response = await anyio.to_thread.run_sync(call)
        except Exception as exc:
            translated = translate_error(exc)
            if translated is None:
                raise
            raise translated from exc
        payload: Any = json.loads(response["body"].read())
        key = "embeddings" if self._family == "cohere" else "embedding"
        value: Any = cast(dict[str, Any], payload).get(key) if isinstance(payload, dict) else None
        if not isinstance(value, list):
            raise UnparseableResponseError(f"Bedrock {self._model_id}: no '{key}' in the answer")
        rows: list[Any] = cast(list[Any], value) if self._family == "cohere" else [value]
        return [[float(x) for x in cast(list[Any], row)] for row in rows]


def _bedrock_family(model_id: str) -> str:
    # Cross-region inference profiles prefix the id ("us.amazon.titan-...").
    name = model_id.split(".", 1)[1] if model_id[:3] in ("us.", "eu.") else model_id
    if name.startswith("amazon.titan-embed-text-v2"):
        return "titan-v2"
    if name.startswith(("amazon.titan-embed-text-v1", "amazon.titan-embed-g1-text")):
        return "titan-v1"
    if name.startswith("cohere.embed-"):
        return "cohere"
    raise KnowledgeSetupError(
        f"Bedrock model '{model_id}' is not a supported embedding model: use "
        "amazon.titan-embed-text-v1, amazon.titan-embed-text-v2:0 or cohere.embed-*-v3"
    )


async def build_embedder(
    spec: ModelSpec,
    info: EmbeddingModelInfo,
    *,
    models: ModelFactory | None = None,
    http: httpx.AsyncClient | None = None,
) -> Embedder:
    """Build the embedder for a catalog embedding model.

    Args:
        spec: the model and its provider, secrets resolved.
        info: dimension, limit and prefixes from the catalog.
        models: makes AWS clients (needed for ``bedrock`` and ``sagemaker``).
        http: a shared HTTP client for the OpenAI-compatible kinds.

    Returns:
        The embedder.

    Raises:
        KnowledgeSetupError: the provider kind cannot embed, or the catalog's
            figures contradict the packaged model's.
    """
    kind = spec.provider.kind
    if kind is ProviderKind.LOCAL and spec.provider.base_url is None:
        return _local(spec, info)
    if kind in _HTTP_KINDS:
        return OpenAIEmbedder(spec, info, client=http)
    if kind in (ProviderKind.BEDROCK, ProviderKind.SAGEMAKER):
        if models is None:
            raise KnowledgeSetupError(f"model {spec.code}: AWS embedders need a ModelFactory")
        if kind is ProviderKind.BEDROCK:
            client = await models.aws_client(spec.provider, "bedrock-runtime")
            return BedrockEmbedder(info, client, spec.model_name)
        return await _sagemaker(spec, info, models)
    raise KnowledgeSetupError(
        f"model {spec.code}: provider kind '{kind.value}' has no embeddings API here "
        "(use openai, openai-compatible, azure, ollama, local, sagemaker or bedrock)"
    )


def _local(spec: ModelSpec, info: EmbeddingModelInfo) -> Embedder:
    if spec.model_name.lower() not in _MINILM_NAMES:
        raise KnowledgeSetupError(
            f"model {spec.code}: the packaged local embedding model is all-MiniLM-L6-v2, not "
            f"'{spec.model_name}'; for a GGUF, run llama.cpp's server with --embedding and "
            "give the provider its base_url"
        )
    if info.dimension != MINILM.dimension:
        raise KnowledgeSetupError(
            f"model {spec.code}: all-MiniLM-L6-v2 gives {MINILM.dimension} dimensions, "
            f"the catalog says {info.dimension}"
        )
    if info.max_input_tokens > MINILM.max_input_tokens:
        raise KnowledgeSetupError(
            f"model {spec.code}: all-MiniLM-L6-v2 reads at most {MINILM.max_input_tokens} "
            f"word pieces, the catalog says {info.max_input_tokens}"
        )
    threads = spec.provider.settings.get("threads", 1)
    embedder = LocalMiniLM(threads=int(threads))
    embedder.info = info
    return embedder


async def _sagemaker(spec: ModelSpec, info: EmbeddingModelInfo, models: ModelFactory) -> Embedder:
    from pilothouse.providers import SageMakerEmbedder, SageMakerFormat
    from pilothouse.providers._sagemaker_formats import format_setting

    settings = spec.provider.settings
    fmt_value = format_setting(spec.provider.code, settings)
    if fmt_value is None:
        raise KnowledgeSetupError(
            f"provider {spec.provider.code}: kind 'sagemaker' needs settings.format "
            "(jumpstart, tei or a mapping) or settings.message_format_config for an "
            "embedding model"
        )
    fmt = SageMakerFormat.from_config(fmt_value, embedding=True)
    client = await models.aws_client(spec.provider, "sagemaker-runtime")
    endpoint = str(settings.get("endpoint_name") or spec.model_name)
    caller = SageMakerEmbedder(client=client, endpoint_name=endpoint, message_format=fmt)
    return SageMakerEmbeddingModel(info, caller)
