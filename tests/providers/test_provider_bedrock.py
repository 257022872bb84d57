"""Bedrock Converse through the factory, against botocore's Stubber (no AWS here)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

import boto3.session
import pytest
from botocore.stub import Stubber
from provider_helpers import model_spec
from pydantic_ai.messages import ModelMessage, ModelRequest, TextPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters

from pilothouse.catalog._enums import ProviderKind
from pilothouse.providers import ModelFactory, ModelOptions, to_model_settings

pytestmark = pytest.mark.anyio

HELLO: list[ModelMessage] = [
    ModelRequest(parts=[UserPromptPart("hello")], instructions="Be brief.")
]


class StubbedAws:
    """Makes real boto3 clients with a Stubber attached, and records how."""

    def __init__(self) -> None:
        self.made: list[tuple[str, dict[str, Any]]] = []
        self.stubbers: dict[str, Stubber] = {}
        self.planned: dict[str, list[tuple[str, dict[str, Any], dict[str, Any] | None]]] = {}

    def plan(
        self, service: str, method: str, response: dict[str, Any], expected: dict[str, Any] | None
    ) -> None:
        self.planned.setdefault(service, []).append((method, response, expected))

    def __call__(self, service: str, kwargs: Mapping[str, Any]) -> Any:
        self.made.append((service, dict(kwargs)))
        session = boto3.session.Session(
            aws_access_key_id="AKIDEXAMPLE", aws_secret_access_key="fake", region_name="us-east-1"
        )
        client = session.client(service, **kwargs)
        stubber = Stubber(client)
        for method, response, expected in self.planned.pop(service, []):
            stubber.add_response(method, response, expected)
        stubber.activate()
        self.stubbers[service] = stubber
        return client


def converse_response(text: str) -> dict[str, Any]:
    return {
        "output": {"message": {"role": "assistant", "content": [{"text": text}]}},
        "stopReason": "end_turn",
        "usage": {"inputTokens": 11, "outputTokens": 2, "totalTokens": 13},
        "metrics": {"latencyMs": 42},
    }


async def test_bedrock_anthropic_converse_request_and_top_k_in_additional_fields() -> None:
    aws = StubbedAws()
    model_id = "anthropic.claude-3-5-sonnet-20240620-v1:0"
    aws.plan(
        "bedrock-runtime",
        "converse",
        converse_response("Hello from Bedrock"),
        {
            "modelId": model_id,
            "messages": [{"role": "user", "content": [{"text": "hello"}]}],
            "system": [{"text": "Be brief."}],
            "inferenceConfig": {
                "maxTokens": 50,
                "temperature": 0.3,
                "topP": 0.9,
                "stopSequences": ["END"],
            },
            "additionalModelRequestFields": {"top_k": 25},
        },
    )
    factory = ModelFactory(aws_client_factory=aws)
    spec = model_spec(
        ProviderKind.BEDROCK,
        model_id,
        api_key=None,
        settings={
            "region": "eu-west-1",
            "access_key_id": "AKIAEXAMPLE",
            "secret_access_key": "s3cr3t",
        },
    )
    try:
        model = await factory.model(spec)
        options = ModelOptions(
            max_tokens=50, temperature=0.3, top_p=0.9, top_k=25, stop=["END"], presence_penalty=1.0
        )
        response = await model.request(
            HELLO, to_model_settings(spec, options), ModelRequestParameters()
        )
    finally:
        await factory.aclose()

    aws.stubbers["bedrock-runtime"].assert_no_pending_responses()
    assert response.parts == [TextPart(content="Hello from Bedrock")]
    assert response.usage.input_tokens == 11
    service, kwargs = aws.made[0]
    assert service == "bedrock-runtime"
    assert kwargs["region_name"] == "eu-west-1"
    assert kwargs["aws_access_key_id"] == "AKIAEXAMPLE"
    assert kwargs["aws_secret_access_key"] == "s3cr3t"


async def test_bedrock_titan_drops_top_k_and_uses_converse_max_tokens() -> None:
    aws = StubbedAws()
    model_id = "amazon.titan-text-express-v1"
    aws.plan(
        "bedrock-runtime",
        "converse",
        converse_response("Titan answer"),
        {
            "modelId": model_id,
            "messages": [{"role": "user", "content": [{"text": "hello"}]}],
            "system": [{"text": "Be brief."}],
            # Converse normalizes the name: maxTokens, not Titan's native maxTokenCount.
            "inferenceConfig": {"maxTokens": 20},
        },
    )
    factory = ModelFactory(aws_client_factory=aws)
    spec = model_spec(
        ProviderKind.BEDROCK, model_id, api_key=None, settings={"region": "us-east-1"}
    )
    try:
        model = await factory.model(spec)
        response = await model.request(
            HELLO,
            to_model_settings(spec, ModelOptions(max_tokens=20, top_k=3)),
            ModelRequestParameters(),
        )
    finally:
        await factory.aclose()
    assert response.parts == [TextPart(content="Titan answer")]


async def test_bedrock_role_arn_assumes_role_and_uses_temporary_credentials() -> None:
    aws = StubbedAws()
    expiration = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
    aws.plan(
        "sts",
        "assume_role",
        {
            "Credentials": {
                "AccessKeyId": "ASIATEMPORARY0001",
                "SecretAccessKey": "temp-secret",
                "SessionToken": "temp-token",
                "Expiration": expiration,
            }
        },
        {
            "RoleArn": "arn:aws:iam::123456789012:role/llm",
            "RoleSessionName": "pilothouse-P_BEDROCK",
        },
    )
    factory = ModelFactory(aws_client_factory=aws)
    spec = model_spec(
        ProviderKind.BEDROCK,
        "amazon.nova-lite-v1:0",
        api_key=None,
        settings={"region": "us-west-2", "role_arn": "arn:aws:iam::123456789012:role/llm"},
    )
    try:
        first = await factory.model(spec)
        second = await factory.model(spec)
    finally:
        await factory.aclose()
    assert first is second  # credentials valid for an hour: cached
    services = [service for service, _ in aws.made]
    assert services == ["sts", "bedrock-runtime"]
    runtime_kwargs = aws.made[1][1]
    assert runtime_kwargs["aws_access_key_id"] == "ASIATEMPORARY0001"
    assert runtime_kwargs["aws_secret_access_key"] == "temp-secret"
    assert runtime_kwargs["aws_session_token"] == "temp-token"
    aws.stubbers["sts"].assert_no_pending_responses()


async def test_bedrock_rebuilds_model_when_assumed_credentials_near_expiry() -> None:
    aws = StubbedAws()
    aws.plan(
        "sts",
        "assume_role",
        {
            "Credentials": {
                "AccessKeyId": "ASIASHORT0000001",
                "SecretAccessKey": "x",
                "SessionToken": "y",
                # Inside the refresh margin: the next lookup must rebuild.
                "Expiration": dt.datetime.now(dt.UTC) + dt.timedelta(seconds=60),
            }
        },
        None,
    )
    factory = ModelFactory(aws_client_factory=aws)
    spec = model_spec(
        ProviderKind.BEDROCK,
        "amazon.nova-lite-v1:0",
        api_key=None,
        settings={"region": "us-west-2", "role_arn": "arn:aws:iam::123456789012:role/llm"},
    )
    try:
        first = await factory.model(spec)
        # Each STS client takes the plans made before it; plan the second call.
        aws.plan(
            "sts",
            "assume_role",
            {
                "Credentials": {
                    "AccessKeyId": "ASIASHORT0000002",
                    "SecretAccessKey": "x",
                    "SessionToken": "y",
                    "Expiration": dt.datetime.now(dt.UTC) + dt.timedelta(hours=1),
                }
            },
            None,
        )
        second = await factory.model(spec)
    finally:
        await factory.aclose()
    assert first is not second
    assert aws.made[-1][1]["aws_access_key_id"] == "ASIASHORT0000002"
