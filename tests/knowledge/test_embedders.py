"""Embedders: the packaged MiniLM, an OpenAI-compatible server on loopback, AWS via Stubber.

No AWS account is reachable here: Bedrock and SageMaker are tested with
botocore's Stubber, which checks each request against the service model.
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import pytest

from pilothouse.catalog import ProviderKind
from pilothouse.errors import ProviderAuthError, RateLimitError
from pilothouse.knowledge import (
    DimensionMismatchError,
    EmbeddingModelInfo,
    InputTooLongError,
    LocalMiniLM,
)
from pilothouse.knowledge._remote import BedrockEmbedder, SageMakerEmbeddingModel, build_embedder
from pilothouse.providers import ModelSpec, ProviderSpec

pytestmark = pytest.mark.anyio


async def test_minilm_ranks_by_meaning_and_normalises(minilm: LocalMiniLM) -> None:
    vectors = await minilm.embed(
        ["The cat sits on the mat.", "A kitten rests on a rug.", "Revenue grew by 12 percent."]
    )
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > 0.4 > vectors[0] @ vectors[2]


async def test_minilm_refuses_long_documents_and_cuts_long_queries(minilm: LocalMiniLM) -> None:
    long = "word " * 400
    with pytest.raises(InputTooLongError, match=r"reads at most 256 tokens \(254 of text\)"):
        await minilm.embed([long], "document")
    texts, cut = minilm.prepare([long], "query")
    assert cut and minilm.tokenizer.count(texts[0]) == 254


class _Embeddings(BaseHTTPRequestHandler):
    """A minimal OpenAI-compatible /v1/embeddings endpoint."""

    requests: list[dict[str, Any]] = []
    status = 200
    dimension = 8

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).requests.append({"path": self.path, "body": body, "headers": dict(self.headers)})
        if self.status != 200:
            payload: dict[str, Any] = {"error": {"message": "slow down", "code": "rate_limit"}}
        else:
            data = [
                {"object": "embedding", "index": i, "embedding": [float(len(t))] * self.dimension}
                for i, t in reversed(list(enumerate(body["input"])))
            ]
            payload = {"object": "list", "data": data, "model": body["model"]}
        raw = json.dumps(payload).encode()
        self.send_response(self.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, format: str, *args: Any) -> None:
        del format, args


@pytest.fixture
def embeddings_server() -> Iterator[str]:
    _Embeddings.requests = []
    _Embeddings.status = 200
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Embeddings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _spec(kind: ProviderKind, base_url: str | None, name: str, **settings: Any) -> ModelSpec:
    provider = ProviderSpec(
        code="P", kind=kind, base_url=base_url, api_key="sk-test-secret", settings=settings
    )
    return ModelSpec(code="E", provider=provider, model_name=name)


INFO = EmbeddingModelInfo(
    name="openai-compatible:e5", dimension=8, max_input_tokens=512, query_prefix="query: "
)


async def test_openai_compatible_server_batches_orders_and_prefixes(embeddings_server: str) -> None:
    spec = _spec(ProviderKind.OPENAI_COMPATIBLE, embeddings_server, "e5")
    embedder = await build_embedder(spec, INFO)
    embedder.batch_size = 2
    vectors = await embedder.embed(["a", "bb", "ccc"], "document")
    query = await embedder.embed(["x"], "query")
    await embedder.aclose()
    assert vectors.shape == (3, 8)
    sent = [r["body"]["input"] for r in _Embeddings.requests]
    assert sent == [["a", "bb"], ["ccc"], ["query: x"]]
    first = _Embeddings.requests[0]
    assert first["path"] == "/v1/embeddings"
    assert first["headers"]["Authorization"] == "Bearer sk-test-secret"
    assert first["body"]["encoding_format"] == "float" and "dimensions" not in first["body"]
    assert np.allclose(query, np.full((1, 8), 8**-0.5))


async def test_a_wrong_dimension_names_both(embeddings_server: str) -> None:
    _Embeddings.dimension = 12
    try:
        embedder = await build_embedder(
            _spec(ProviderKind.OPENAI_COMPATIBLE, embeddings_server, "e5"), INFO
        )
        with pytest.raises(DimensionMismatchError, match="dimension 12, but the catalog says 8"):
            await embedder.embed(["a"])
        await embedder.aclose()
    finally:
        _Embeddings.dimension = 8


async def test_http_errors_are_translated_without_the_key(embeddings_server: str) -> None:
    embedder = await build_embedder(
        _spec(ProviderKind.OPENAI_COMPATIBLE, embeddings_server, "e5"), INFO
    )
    _Embeddings.status = 429
    with pytest.raises(RateLimitError, match="slow down") as caught:
        await embedder.embed(["a"])
    assert "sk-test-secret" not in str(caught.value)
    _Embeddings.status = 401
    with pytest.raises(ProviderAuthError):
        await embedder.embed(["a"])
    await embedder.aclose()


async def test_azure_posts_to_the_deployment(embeddings_server: str) -> None:
    base = embeddings_server.removesuffix("/v1")
    spec = _spec(ProviderKind.AZURE, base, "text-embedding-3-small", api_version="2024-10-21")
    embedder = await build_embedder(spec, INFO)
    await embedder.embed(["a"])
    await embedder.aclose()
    request = _Embeddings.requests[0]
    assert request["path"] == (
        "/openai/deployments/text-embedding-3-small/embeddings?api-version=2024-10-21"
    )
    assert request["headers"]["api-key"] == "sk-test-secret"
    assert request["body"]["dimensions"] == 8


def _stubbed(service: str) -> tuple[Any, Any]:
    import boto3.session
    from botocore.stub import Stubber

    client = boto3.session.Session().client(
        service,
        region_name="us-east-1",
        aws_access_key_id="AKIDEXAMPLE",
        aws_secret_access_key="example",
    )
    return client, Stubber(client)


def _streaming(payload: Any) -> Any:
    from botocore.response import StreamingBody

    raw = json.dumps(payload).encode()
    return StreamingBody(io.BytesIO(raw), len(raw))


async def test_bedrock_titan_v2_one_text_per_call() -> None:
    client, stubber = _stubbed("bedrock-runtime")
    info = EmbeddingModelInfo(name="bedrock:titan", dimension=4, max_input_tokens=8192)
    for text in ("alpha", "beta"):
        body = json.dumps({"inputText": text, "dimensions": 4, "normalize": True})
        stubber.add_response(
            "invoke_model",
            {"body": _streaming({"embedding": [1.0, 0, 0, 0], "inputTextTokenCount": 1}),
             "contentType": "application/json"},
            {"modelId": "amazon.titan-embed-text-v2:0", "body": body,
             "contentType": "application/json", "accept": "application/json"},
        )  # fmt: skip
    with stubber:
        vectors = await BedrockEmbedder(info, client, "amazon.titan-embed-text-v2:0").embed(
            ["alpha", "beta"]
        )
    stubber.assert_no_pending_responses()
    assert vectors.tolist() == [[1.0, 0, 0, 0], [1.0, 0, 0, 0]]


async def test_bedrock_cohere_batches_with_the_input_type() -> None:
    client, stubber = _stubbed("bedrock-runtime")
    info = EmbeddingModelInfo(name="bedrock:cohere", dimension=2, max_input_tokens=512)
    body = json.dumps({"texts": ["q"], "input_type": "search_query", "truncate": "NONE"})
    stubber.add_response(
        "invoke_model",
        {"body": _streaming({"embeddings": [[0.0, 2.0]], "id": "x"}),
         "contentType": "application/json"},
        {"modelId": "cohere.embed-english-v3", "body": body,
         "contentType": "application/json", "accept": "application/json"},
    )  # fmt: skip
    with stubber:
        vectors = await BedrockEmbedder(info, client, "cohere.embed-english-v3").embed(
            ["q"], "query"
        )
    assert vectors.tolist() == [[0.0, 1.0]]


def test_an_unknown_bedrock_model_is_refused() -> None:
    from pilothouse.knowledge import KnowledgeSetupError

    info = EmbeddingModelInfo(name="bedrock:x", dimension=2, max_input_tokens=512)
    with pytest.raises(KnowledgeSetupError, match="amazon.titan-embed-text-v2:0"):
        BedrockEmbedder(info, object(), "anthropic.claude-3")


async def test_sagemaker_jumpstart_embedding_format() -> None:
    from pilothouse.providers import SageMakerEmbedder, SageMakerFormat

    client, stubber = _stubbed("sagemaker-runtime")
    stubber.add_response(
        "invoke_endpoint",
        {"Body": _streaming({"embedding": [[3.0, 4.0], [0.0, 1.0]]}),
         "ContentType": "application/json"},
        {"EndpointName": "bge-endpoint", "ContentType": "application/json",
         "Accept": "application/json",
         "Body": json.dumps({"text_inputs": ["a", "b"]}).encode()},
    )  # fmt: skip
    caller = SageMakerEmbedder(
        client=client,
        endpoint_name="bge-endpoint",
        message_format=SageMakerFormat.from_config("jumpstart", embedding=True),
    )
    info = EmbeddingModelInfo(name="sagemaker:bge", dimension=2, max_input_tokens=512)
    with stubber:
        vectors = await SageMakerEmbeddingModel(info, caller).embed(["a", "b"])
    assert np.allclose(vectors, [[0.6, 0.8], [0.0, 1.0]])


async def test_local_provider_only_serves_minilm_with_its_figures() -> None:
    from pilothouse.knowledge import KnowledgeSetupError

    wrong = EmbeddingModelInfo(name="local:x", dimension=512, max_input_tokens=256)
    with pytest.raises(KnowledgeSetupError, match="gives 384 dimensions, the catalog says 512"):
        await build_embedder(_spec(ProviderKind.LOCAL, None, "all-MiniLM-L6-v2"), wrong)
    with pytest.raises(KnowledgeSetupError, match="run llama.cpp's server with --embedding"):
        await build_embedder(_spec(ProviderKind.LOCAL, None, "bge-small.gguf"), wrong)


class _OpenAIEmbeddings(_Embeddings):
    """OpenAI's text-embedding-3 behind a proxy: 1536 unless ``dimensions`` shortens it."""

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        body = json.loads(self.rfile.read(length))
        type(self).requests.append({"path": self.path, "body": body})
        size = int(body.get("dimensions", 1536))
        data = [{"index": i, "embedding": [1.0] * size} for i in range(len(body["input"]))]
        raw = json.dumps({"object": "list", "data": data}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)


@pytest.fixture
def openai_proxy() -> Iterator[str]:
    _OpenAIEmbeddings.requests = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OpenAIEmbeddings)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


async def test_seed_003_rag_example_sends_its_dimension_to_an_openai_compatible_url(
    openai_proxy: str, database: Any
) -> None:
    # Seed 003, verbatim:
    #   <camunda:inputParameter name="baseUrl">http://localhost:11434/v1</camunda:inputParameter>
    #   <camunda:inputParameter name="embeddingDimension">384</camunda:inputParameter>
    #   <camunda:inputParameter name="embeddingModelName">text-embedding-3-small</camunda:inputParameter>  # noqa: E501 - verbatim
    # At a baseUrl there is no catalog provider kind (openai-compatible): the
    # text-embedding-3 family still gets the caller's dimension.
    from pilothouse.knowledge import Knowledge

    service = Knowledge(database)
    try:
        spec = _spec(ProviderKind.OPENAI_COMPATIBLE, openai_proxy, "text-embedding-3-small")
        collection = service.adhoc_collection(
            "default",
            connection="postgresql://postgres@127.0.0.1:5432/vectors",
            password=None,
            table="embeddings",
            top_k=5,
            threshold=0.4,
            model=spec,
            dimension=384,
        )
        embedder = await build_embedder(spec, collection.model)
        vectors = await embedder.embed(["Where is my parcel?"], "query")
        assert vectors.shape == (1, 384)
        assert _OpenAIEmbeddings.requests[0]["body"]["dimensions"] == 384
        await embedder.aclose()
        # A model that gives other vectors than embeddingDimension says names the parameter.
        other = _spec(ProviderKind.OPENAI_COMPATIBLE, openai_proxy, "nomic-embed-text")
        wrong = service.adhoc_collection(
            "default",
            connection="postgresql://postgres@127.0.0.1:5432/vectors",
            password=None,
            table="embeddings",
            top_k=5,
            threshold=0.4,
            model=other,
            dimension=384,
        )
        embedder = await build_embedder(other, wrong.model)
        with pytest.raises(DimensionMismatchError, match=r"1536, but embeddingDimension is 384"):
            await embedder.embed(["Where is my parcel?"], "query")
        await embedder.aclose()
    finally:
        await service.aclose()
