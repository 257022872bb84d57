"""The guide's Bedrock ``class_name`` configuration (seed 004) reaches Converse as written.

Bedrock is tested with botocore's Stubber: real boto3 clients whose calls are
checked argument by argument and answered from the plan (no AWS account).
The configuration is read by the catalog, compiled with its secrets resolved
and called through the model factory, as a turn does.
"""

from __future__ import annotations

import json

import pytest
from pydantic_ai.messages import ModelMessage, ModelRequest, TextPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from test_provider_bedrock import StubbedAws, converse_response

from pilothouse.catalog import ProviderSpec
from pilothouse.catalog._models import Model, Provider
from pilothouse.providers import ModelFactory, ModelOptions, SecretResolver, to_model_settings
from pilothouse.providers._spec import compile_model_spec, custom_config_options

pytestmark = pytest.mark.anyio

GUIDE = json.loads(
    """
{
  "class_name": "vantiq.llms.ChatAWSBedrockConverse",
  "model_id": "meta.llama3-8b-instruct-v1:0",
  "aws_region": "us-east-1",
  "aws_access_key_id": "@secrets(AWSAccessKeyId)",
  "aws_secret_access_key": "@secrets(AWSSecretAccessKey)",
  "max_tokens": 512,
  "temperature": 0.2
}
"""
)
HELLO: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("hello")])]


async def test_the_guides_bedrock_configuration_calls_converse_with_its_model_and_options() -> None:
    spec = ProviderSpec.model_validate({"code": "BDRK", "settings": GUIDE})
    provider = Provider(
        code=spec.code,
        kind=spec.kind,
        base_url=None,
        api_key=None,
        headers={},
        settings=spec.settings,
    )
    # The catalog model's name is descriptive, as the guide's "MyBedrockLLM".
    row = Model(code="MYBEDROCK", model_name="MyBedrockLLM", provider=provider, capabilities=[])
    secrets = SecretResolver({"AWSAccessKeyId": "AKIAVANTIQ", "AWSSecretAccessKey": "s3cr3t-v"})
    compiled = compile_model_spec(row, secrets)
    # The action's configuration says 100 tokens; the LLM's own configuration wins.
    options = ModelOptions(max_tokens=100).merged(custom_config_options("BDRK", spec.settings))
    aws = StubbedAws()
    aws.plan(
        "bedrock-runtime",
        "converse",
        converse_response("Hello"),
        {
            "modelId": "meta.llama3-8b-instruct-v1:0",
            "messages": [{"role": "user", "content": [{"text": "hello"}]}],
            "system": [],
            "inferenceConfig": {"maxTokens": 512, "temperature": 0.2},
        },
    )
    factory = ModelFactory(aws_client_factory=aws)
    try:
        model = await factory.model(compiled)
        response = await model.request(
            HELLO, to_model_settings(compiled, options), ModelRequestParameters()
        )
    finally:
        await factory.aclose()
    aws.stubbers["bedrock-runtime"].assert_no_pending_responses()
    assert response.parts == [TextPart(content="Hello")]
    _, kwargs = aws.made[0]
    # The @secrets references were resolved, never sent as text.
    assert (kwargs["region_name"], kwargs["aws_access_key_id"]) == ("us-east-1", "AKIAVANTIQ")
    assert kwargs["aws_secret_access_key"] == "s3cr3t-v"
    assert "s3cr3t-v" not in repr(compiled)


async def test_a_bedrock_embeddings_configuration_embeds_with_its_model_id() -> None:
    import io

    from botocore.response import StreamingBody

    from pilothouse.knowledge import EmbeddingModelInfo
    from pilothouse.knowledge._remote import build_embedder

    config = {
        "class_name": "vantiq.embeddings.BedrockEmbeddings",
        "model_id": "amazon.titan-embed-text-v2:0",
        "aws_region": "us-east-1",
        "aws_access_key_id": "@secrets(AWSAccessKeyId)",
        "aws_secret_access_key": "@secrets(AWSSecretAccessKey)",
    }
    spec = ProviderSpec.model_validate({"code": "BDEM", "settings": config})
    provider = Provider(
        code=spec.code,
        kind=spec.kind,
        base_url=None,
        api_key=None,
        headers={},
        settings=spec.settings,
    )
    row = Model(code="MYEMBED", model_name="MyEmbeddings", provider=provider, capabilities=["EM"])
    secrets = SecretResolver({"AWSAccessKeyId": "AKIAVANTIQ", "AWSSecretAccessKey": "s3cr3t-v"})
    compiled = compile_model_spec(row, secrets)
    raw = json.dumps({"embedding": [1.0, 0.0, 0.0, 0.0], "inputTextTokenCount": 1}).encode()
    aws = StubbedAws()
    aws.plan(
        "bedrock-runtime",
        "invoke_model",
        {"body": StreamingBody(io.BytesIO(raw), len(raw)), "contentType": "application/json"},
        {
            "modelId": "amazon.titan-embed-text-v2:0",
            "body": json.dumps({"inputText": "alpha", "dimensions": 4, "normalize": True}),
            "contentType": "application/json",
            "accept": "application/json",
        },
    )
    factory = ModelFactory(aws_client_factory=aws)
    info = EmbeddingModelInfo(name="MYEMBED", dimension=4, max_input_tokens=8192)
    try:
        embedder = await build_embedder(compiled, info, models=factory)
        vectors = await embedder.embed(["alpha"])
    finally:
        await factory.aclose()
    aws.stubbers["bedrock-runtime"].assert_no_pending_responses()
    assert vectors.tolist() == [[1.0, 0.0, 0.0, 0.0]]
    assert aws.made[0][1]["aws_access_key_id"] == "AKIAVANTIQ"


# The guide's model_kwargs example, verbatim (seed 004, "model_kwargs").
GUIDE_MODEL_KWARGS = json.loads(
    """
{
    "model_kwargs": {
        "maxTokenCount": 1024,
        "topP": 1,
        "temperature": 0.1
    }
}
"""
)


async def test_a_bedrock_configurations_model_kwargs_reach_converse_as_model_fields() -> None:
    settings = {**GUIDE, **GUIDE_MODEL_KWARGS}
    spec = ProviderSpec.model_validate({"code": "BDRK", "settings": settings})
    provider = Provider(
        code=spec.code,
        kind=spec.kind,
        base_url=None,
        api_key=None,
        headers={},
        settings=spec.settings,
    )
    row = Model(code="MYBEDROCK", model_name="MyBedrockLLM", provider=provider, capabilities=[])
    secrets = SecretResolver({"AWSAccessKeyId": "AKIAVANTIQ", "AWSSecretAccessKey": "s3cr3t-v"})
    compiled = compile_model_spec(row, secrets)
    options = ModelOptions().merged(custom_config_options("BDRK", spec.settings))
    aws = StubbedAws()
    aws.plan(
        "bedrock-runtime",
        "converse",
        converse_response("Hello"),
        {
            "modelId": "meta.llama3-8b-instruct-v1:0",
            "messages": [{"role": "user", "content": [{"text": "hello"}]}],
            "system": [],
            "inferenceConfig": {"maxTokens": 512, "temperature": 0.2},
            "additionalModelRequestFields": {"maxTokenCount": 1024, "topP": 1, "temperature": 0.1},
        },
    )
    factory = ModelFactory(aws_client_factory=aws)
    try:
        model = await factory.model(compiled)
        await model.request(HELLO, to_model_settings(compiled, options), ModelRequestParameters())
    finally:
        await factory.aclose()
    aws.stubbers["bedrock-runtime"].assert_no_pending_responses()


def test_model_kwargs_that_are_no_object_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="settings.model_kwargs: must be a JSON object"):
        ProviderSpec.model_validate(
            {"code": "BDRK", "settings": {**GUIDE, "model_kwargs": "top_k=50"}}
        )


async def test_titan_model_kwargs_on_a_bedrock_model_reach_converse_as_its_options() -> None:
    # Seed 004's Titan example verbatim on a `bedrock/<modelId>` model (no
    # class_name): Converse takes the normalized names for every model, so the
    # guide's "max_tokens is an alias to model_kwargs.maxTokenCount" is read back.
    spec = ProviderSpec.model_validate(
        {
            "code": "BDRK",
            "kind": "bedrock",
            "settings": {"region": "us-east-1", **GUIDE_MODEL_KWARGS},
        }
    )
    provider = Provider(
        code=spec.code,
        kind=spec.kind,
        base_url=None,
        api_key=None,
        headers={},
        settings=spec.settings,
    )
    row = Model(
        code="TITAN",
        model_name="bedrock/amazon.titan-text-express-v1",
        provider=provider,
        capabilities=[],
    )
    compiled = compile_model_spec(row, SecretResolver({}))
    # The action's configuration says 100 tokens; the model's own kwargs win.
    options = ModelOptions(max_tokens=100).merged(
        custom_config_options("BDRK", spec.settings, spec.kind)
    )
    aws = StubbedAws()
    aws.plan(
        "bedrock-runtime",
        "converse",
        converse_response("Hello"),
        {
            "modelId": "amazon.titan-text-express-v1",
            "messages": [{"role": "user", "content": [{"text": "hello"}]}],
            "system": [],
            "inferenceConfig": {"maxTokens": 1024, "temperature": 0.1, "topP": 1},
        },
    )
    factory = ModelFactory(aws_client_factory=aws)
    try:
        model = await factory.model(compiled)
        await model.request(HELLO, to_model_settings(compiled, options), ModelRequestParameters())
    finally:
        await factory.aclose()
    aws.stubbers["bedrock-runtime"].assert_no_pending_responses()
