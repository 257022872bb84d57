"""Vantiq's ``message_format_config`` (seed 004) on SageMaker providers, via botocore Stubber.

The guide's examples are used verbatim as the provider's settings; the
request bytes SageMaker receives and the answer read back are checked with
botocore's Stubber (no AWS account: the stub checks every argument).
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from botocore.response import StreamingBody
from provider_helpers import model_spec
from pydantic_ai.messages import ModelMessage, ModelRequest, TextPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from test_provider_bedrock import StubbedAws

from pilothouse.catalog._enums import ProviderKind
from pilothouse.providers import (
    ModelFactory,
    ModelOptions,
    ProviderConfigError,
    SageMakerEmbedder,
    SageMakerFormat,
    to_model_settings,
)
from pilothouse.providers._sagemaker_formats import format_setting

pytestmark = pytest.mark.anyio

ONE_TURN: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("Say hi")])]

# The guide's examples, verbatim.
FALCON = json.loads(
    """
{
    "message_format_config": {
        "request_key": "inputs",
        "request_parameters_key": "parameters",
        "response_path": "0.generated_text"
    }
}
"""
)
GPTJ = json.loads(
    """
{
    "message_format_config": {
        "request_key": "text_inputs",
        "response_path": "0,0.generated_text"
    }
}
"""
)
EMBEDDING = json.loads(
    """
{
    "message_format_config": {
        "request_key": "text_inputs",
        "response_path": "embedding"
    }
}
"""
)


def _planned(aws: StubbedAws, endpoint: str, body: dict[str, Any], answer: Any) -> None:
    raw = json.dumps(answer).encode()
    aws.plan(
        "sagemaker-runtime",
        "invoke_endpoint",
        {"Body": StreamingBody(io.BytesIO(raw), len(raw)), "ContentType": "application/json"},
        {
            "EndpointName": endpoint,
            "Body": json.dumps(body).encode(),
            "ContentType": "application/json",
            "Accept": "application/json",
        },
    )


async def _generate(settings: dict[str, Any], body: dict[str, Any], answer: Any) -> str:
    aws = StubbedAws()
    _planned(aws, "my-endpoint", body, answer)
    factory = ModelFactory(aws_client_factory=aws)
    spec = model_spec(
        ProviderKind.SAGEMAKER,
        "sagemaker",
        api_key=None,
        settings={"endpoint_name": "my-endpoint", "region": "us-east-1", **settings},
    )
    try:
        model = await factory.model(spec)
        result = await model.request(
            ONE_TURN, to_model_settings(spec, ModelOptions()), ModelRequestParameters()
        )
    finally:
        await factory.aclose()
    aws.stubbers["sagemaker-runtime"].assert_no_pending_responses()
    return "".join(p.content for p in result.parts if isinstance(p, TextPart))


async def test_the_guides_falcon_config_puts_model_kwargs_under_its_parameters_key() -> None:
    kwargs = {"max_new_tokens": 350, "temperature": 0.1, "return_full_text": False}
    text = await _generate(
        {**FALCON, "model_kwargs": kwargs},
        {"inputs": "Say hi", "parameters": kwargs},
        [{"generated_text": "hi"}],
    )
    assert text == "hi"


async def test_the_guides_gptj_config_spreads_model_kwargs_at_the_top() -> None:
    # No request_parameters_key: {"text_inputs": <input_value>, **model_kwargs}.
    text = await _generate(
        {**GPTJ, "model_kwargs": {"max_length": 50}},
        {"text_inputs": "Say hi", "max_length": 50},
        [[{"generated_text": "hello"}]],
    )
    assert text == "hello"


async def test_request_nesting_level_wraps_the_input() -> None:
    config = {"message_format_config": {**FALCON["message_format_config"]}}
    config["message_format_config"]["request_nesting_level"] = 1
    text = await _generate(config, {"inputs": ["Say hi"]}, [{"generated_text": "hi"}])
    assert text == "hi"


async def test_the_guides_embedding_config_embeds_each_text() -> None:
    aws = StubbedAws()
    for text, vector in (("a", [1.0, 0.0]), ("b", [0.0, 1.0])):
        _planned(aws, "embed-ep", {"text_inputs": text}, {"embedding": vector})
    client = aws("sagemaker-runtime", {"region_name": "us-east-1"})
    fmt = format_setting("SMEM", EMBEDDING)
    assert fmt is not None
    embedder = SageMakerEmbedder(
        client=client,
        endpoint_name="embed-ep",
        message_format=SageMakerFormat.from_config(fmt, embedding=True),
    )
    assert await embedder.embed(["a", "b"]) == [[1.0, 0.0], [0.0, 1.0]]
    aws.stubbers["sagemaker-runtime"].assert_no_pending_responses()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        (
            {"message_format_config": {"request_key": "inputs", "response_key": "x"}},
            "message_format_config.response_key is not a key of the guide's message format",
        ),
        (
            {"message_format_config": {"request_key": "inputs"}},
            "message_format_config.response_path is required",
        ),
        (
            {**FALCON, "format": "falcon"},
            "settings.format and settings.message_format_config both name",
        ),
    ],
)
def test_a_config_that_cannot_be_honoured_is_refused(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(ProviderConfigError, match=message):
        format_setting("SM", settings)
