"""SageMaker endpoints: every named format's request bytes and parsed answer, via Stubber."""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
from botocore.response import StreamingBody
from provider_helpers import model_spec
from pydantic_ai.messages import ModelMessage, ModelRequest, ModelResponse, TextPart, UserPromptPart
from pydantic_ai.models import ModelRequestParameters
from test_provider_bedrock import StubbedAws

from pilothouse.catalog._enums import ProviderKind
from pilothouse.errors import UnparseableResponseError
from pilothouse.providers import (
    ModelFactory,
    ModelOptions,
    ProviderConfigError,
    SageMakerEmbedder,
    SageMakerFormat,
    to_model_settings,
)

pytestmark = pytest.mark.anyio

OPTIONS = ModelOptions(max_tokens=32, temperature=0.5, top_p=0.9, top_k=10, stop=["###"])
ONE_TURN: list[ModelMessage] = [ModelRequest(parts=[UserPromptPart("Say hi")])]
CHAT: list[ModelMessage] = [
    ModelRequest(parts=[UserPromptPart("Hi")], instructions="You are terse."),
    ModelResponse(parts=[TextPart("Hello.")]),
    ModelRequest(parts=[UserPromptPart("Name a color")], instructions="You are terse."),
]


def invoke(expected_body: dict[str, Any], answer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    raw = json.dumps(answer).encode()
    response = {
        "Body": StreamingBody(io.BytesIO(raw), len(raw)),
        "ContentType": "application/json",
    }
    expected = {
        "EndpointName": "my-endpoint",
        "Body": json.dumps(expected_body, ensure_ascii=False).encode(),
        "ContentType": "application/json",
        "Accept": "application/json",
    }
    return response, expected


async def run(fmt: Any, messages: list[Any], expected_body: dict[str, Any], answer: Any) -> str:
    aws = StubbedAws()
    response, expected = invoke(expected_body, answer)
    aws.plan("sagemaker-runtime", "invoke_endpoint", response, expected)
    factory = ModelFactory(aws_client_factory=aws)
    spec = model_spec(
        ProviderKind.SAGEMAKER,
        "my-llm",
        api_key=None,
        settings={"endpoint_name": "my-endpoint", "region": "us-east-1", "format": fmt},
    )
    try:
        model = await factory.model(spec)
        result = await model.request(
            messages, to_model_settings(spec, OPTIONS), ModelRequestParameters()
        )
    finally:
        await factory.aclose()
    aws.stubbers["sagemaker-runtime"].assert_no_pending_responses()
    assert result.model_name == "my-llm"
    (part,) = result.parts
    assert isinstance(part, TextPart)
    return part.content


async def test_falcon_format() -> None:
    text = await run(
        "falcon",
        ONE_TURN,
        {
            "inputs": "Say hi",
            "parameters": {
                "return_full_text": False,
                "max_new_tokens": 32,
                "temperature": 0.5,
                "top_p": 0.9,
                "top_k": 10,
                "stop": ["###"],
            },
        },
        [{"generated_text": "hi!"}],
    )
    assert text == "hi!"


async def test_gptj_format_is_the_guides() -> None:
    # Seed 004: request {"text_inputs": <input_value>, **model_kwargs},
    # response response_json[0][0]["generated_text"].
    text = await run(
        "gptj",
        ONE_TURN,
        {"text_inputs": "Say hi", "max_length": 32, "temperature": 0.5, "top_p": 0.9, "top_k": 10},
        [[{"generated_text": "hello from gpt-j"}]],
    )
    assert text == "hello from gpt-j"


async def test_bloom_format_is_the_guides() -> None:
    # Seed 004: request {"text_inputs": <input_value>, **model_kwargs},
    # response response_json["generated_texts"][0].
    text = await run(
        "bloom",
        ONE_TURN,
        {"text_inputs": "Say hi", "max_length": 32, "temperature": 0.5, "top_p": 0.9, "top_k": 10},
        {"generated_texts": ["bloom hi"]},
    )
    assert text == "bloom hi"


async def test_llama2_format() -> None:
    text = await run(
        "llama2",
        ONE_TURN,
        {
            "inputs": "Say hi",
            "parameters": {"max_new_tokens": 32, "temperature": 0.5, "top_p": 0.9},
        },
        [{"generation": "llama2 hi"}],
    )
    assert text == "llama2 hi"


async def test_llama3_format_reads_object_response() -> None:
    text = await run(
        "llama3",
        ONE_TURN,
        {
            "inputs": "Say hi",
            "parameters": {
                "max_new_tokens": 32,
                "temperature": 0.5,
                "top_p": 0.9,
                "top_k": 10,
                "stop": ["###"],
            },
        },
        {"generated_text": "llama3 hi"},
    )
    assert text == "llama3 hi"


async def test_mistral_format() -> None:
    text = await run(
        "mistral",
        ONE_TURN,
        {
            "inputs": "Say hi",
            "parameters": {
                "return_full_text": False,
                "max_new_tokens": 32,
                "temperature": 0.5,
                "top_p": 0.9,
                "top_k": 10,
                "stop": ["###"],
            },
        },
        [{"generated_text": "mistral hi"}],
    )
    assert text == "mistral hi"


async def test_llama2_chat_template() -> None:
    prompt = (
        "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi [/INST] Hello. </s>"
        "<s>[INST] Name a color [/INST]"
    )
    text = await run(
        "llama2-chat",
        CHAT,
        {"inputs": prompt, "parameters": {"max_new_tokens": 32, "temperature": 0.5, "top_p": 0.9}},
        [{"generation": " Blue."}],
    )
    assert text == " Blue."


async def test_llama3_chat_template_and_eot_stop() -> None:
    prompt = (
        "<|begin_of_text|>"
        "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nName a color<|eot_id|>"
        "<|start_header_id|>assistant<|end_header_id|>\n\n"
    )
    text = await run(
        "llama3-chat",
        CHAT,
        {
            "inputs": prompt,
            "parameters": {
                # The format's end-of-turn stop comes first, the caller's is added.
                "stop": ["<|eot_id|>", "###"],
                "max_new_tokens": 32,
                "temperature": 0.5,
                "top_p": 0.9,
                "top_k": 10,
            },
        },
        {"generated_text": "Green."},
    )
    assert text == "Green."


async def test_mistral_instruct_template_folds_system_into_first_turn() -> None:
    prompt = "<s>[INST] You are terse.\n\nHi [/INST]Hello.</s>[INST] Name a color [/INST]"
    text = await run(
        "mistral-instruct",
        CHAT,
        {
            "inputs": prompt,
            "parameters": {
                "return_full_text": False,
                "max_new_tokens": 32,
                "temperature": 0.5,
                "top_p": 0.9,
                "top_k": 10,
                "stop": ["###"],
            },
        },
        [{"generated_text": "Red."}],
    )
    assert text == "Red."


async def test_custom_format_from_mapping_with_nesting_level_two() -> None:
    fmt = {
        "request_key": "prompts",
        "request_nesting_level": 2,
        "request_parameters_key": "options",
        "parameter_names": {"max_tokens": "n_predict"},
        "response_path": "outputs,0.text",
    }
    text = await run(
        fmt,
        ONE_TURN,
        {"prompts": [["Say hi"]], "options": {"n_predict": 32}},
        {"outputs": [{"text": "custom ok"}]},
    )
    assert text == "custom ok"


async def test_bad_response_shape_names_the_failing_path() -> None:
    with pytest.raises(UnparseableResponseError) as info:
        await run(
            "falcon",
            ONE_TURN,
            {
                "inputs": "Say hi",
                "parameters": {
                    "return_full_text": False,
                    "max_new_tokens": 32,
                    "temperature": 0.5,
                    "top_p": 0.9,
                    "top_k": 10,
                    "stop": ["###"],
                },
            },
            {"error": "oops"},
        )
    assert "0.generated_text" in str(info.value)
    assert "failed at '0'" in str(info.value)


def test_unknown_format_and_unknown_key_are_config_errors() -> None:
    with pytest.raises(ProviderConfigError, match="'gpt5' is not known"):
        SageMakerFormat.from_config("gpt5")
    with pytest.raises(ProviderConfigError, match="'reponse_path' is not known"):
        SageMakerFormat.from_config({"reponse_path": "x"})
    with pytest.raises(ProviderConfigError, match="request_nesting_level"):
        SageMakerFormat.from_config({"base": "falcon", "request_nesting_level": 3})


def test_non_text_at_path_is_unparseable() -> None:
    fmt = SageMakerFormat.from_config("llama3")
    with pytest.raises(UnparseableResponseError, match="holds list, not text"):
        fmt.parse_text(b'{"generated_text": [1, 2]}')
    with pytest.raises(UnparseableResponseError, match="not JSON"):
        fmt.parse_text(b"<html>502</html>")


async def test_embedder_batches_texts_and_reads_vectors() -> None:
    aws = StubbedAws()
    raw = json.dumps({"embedding": [[0.1, 0.2], [0.3, 0.4]]}).encode()
    aws.plan(
        "sagemaker-runtime",
        "invoke_endpoint",
        {"Body": StreamingBody(io.BytesIO(raw), len(raw))},
        {
            "EndpointName": "embed-ep",
            "Body": b'{"text_inputs": ["a", "b"]}',
            "ContentType": "application/json",
            "Accept": "application/json",
        },
    )
    client = aws("sagemaker-runtime", {"region_name": "us-east-1"})
    embedder = SageMakerEmbedder(
        client=client,
        endpoint_name="embed-ep",
        message_format=SageMakerFormat.from_config("jumpstart", embedding=True),
    )
    assert await embedder.embed(["a", "b"]) == [[0.1, 0.2], [0.3, 0.4]]
    aws.stubbers["sagemaker-runtime"].assert_no_pending_responses()


async def test_embedder_level_zero_sends_one_request_per_text() -> None:
    aws = StubbedAws()
    for text, vector in (("a", [1.0, 0.0]), ("b", [0.0, 1.0])):
        raw = json.dumps([vector]).encode()
        aws.plan(
            "sagemaker-runtime",
            "invoke_endpoint",
            {"Body": StreamingBody(io.BytesIO(raw), len(raw))},
            {
                "EndpointName": "tei-ep",
                "Body": json.dumps({"inputs": text}).encode(),
                "ContentType": "application/json",
                "Accept": "application/json",
            },
        )
    client = aws("sagemaker-runtime", {"region_name": "us-east-1"})
    embedder = SageMakerEmbedder(
        client=client,
        endpoint_name="tei-ep",
        message_format=SageMakerFormat.from_config(
            {"base": "tei", "request_nesting_level": 0, "response_path": "0"}, embedding=True
        ),
    )
    assert await embedder.embed(["a", "b"]) == [[1.0, 0.0], [0.0, 1.0]]


async def test_embedder_wrong_count_is_unparseable() -> None:
    aws = StubbedAws()
    raw = json.dumps([[0.1, 0.2]]).encode()
    aws.plan(
        "sagemaker-runtime",
        "invoke_endpoint",
        {"Body": StreamingBody(io.BytesIO(raw), len(raw))},
        None,
    )
    client = aws("sagemaker-runtime", {"region_name": "us-east-1"})
    embedder = SageMakerEmbedder(
        client=client,
        endpoint_name="tei-ep",
        message_format=SageMakerFormat.from_config("tei", embedding=True),
    )
    with pytest.raises(UnparseableResponseError, match="2 vector"):
        await embedder.embed(["a", "b"])


async def test_endpoint_model_error_translates_to_server_error() -> None:
    from pilothouse.errors import ProviderServerError
    from pilothouse.providers import translate_error

    aws = StubbedAws()
    factory = ModelFactory(aws_client_factory=aws)
    spec = model_spec(
        ProviderKind.SAGEMAKER,
        "my-llm",
        api_key=None,
        settings={"endpoint_name": "my-endpoint", "region": "us-east-1", "format": "falcon"},
    )
    try:
        model = await factory.model(spec)
        aws.stubbers["sagemaker-runtime"].add_client_error(
            "invoke_endpoint",
            service_error_code="ModelError",
            service_message="Received server error (500) from primary",
            http_status_code=424,
        )
        with pytest.raises(Exception) as info:
            await model.request(ONE_TURN, None, ModelRequestParameters())
    finally:
        await factory.aclose()
    translated = translate_error(info.value)
    assert isinstance(translated, ProviderServerError)
    assert "ModelError" in str(translated)


async def test_the_guides_model_kwargs_and_endpoint_kwargs_are_sent() -> None:
    # Seed 004's configuration, verbatim, as the provider's settings.
    guide = json.loads(
        """
        {
          "endpoint_kwargs": {
            "CustomAttributes": "accept_eula=true"
          },
          "model_kwargs": {
            "max_new_tokens": 350,
            "temperature": 0.1,
            "return_full_text": false
          }
        }
        """
    )
    aws = StubbedAws()
    response, expected = invoke(
        {
            "inputs": "Say hi",
            "parameters": {"max_new_tokens": 350, "temperature": 0.1, "return_full_text": False},
        },
        [{"generated_text": "hi"}],
    )
    expected["CustomAttributes"] = "accept_eula=true"
    aws.plan("sagemaker-runtime", "invoke_endpoint", response, expected)
    factory = ModelFactory(aws_client_factory=aws)
    spec = model_spec(
        ProviderKind.SAGEMAKER,
        "sagemaker",
        api_key=None,
        settings={
            "endpoint_name": "my-endpoint",
            "region": "us-east-1",
            "format": {
                "request_key": "inputs",
                "request_parameters_key": "parameters",
                "response_path": "0.generated_text",
            },
            **guide,
        },
    )
    try:
        model = await factory.model(spec)
        result = await model.request(
            ONE_TURN, to_model_settings(spec, ModelOptions()), ModelRequestParameters()
        )
    finally:
        await factory.aclose()
    aws.stubbers["sagemaker-runtime"].assert_no_pending_responses()
    assert [p.content for p in result.parts if isinstance(p, TextPart)] == ["hi"]


async def test_an_unknown_endpoint_kwarg_is_refused() -> None:
    factory = ModelFactory(aws_client_factory=StubbedAws())
    spec = model_spec(
        ProviderKind.SAGEMAKER,
        "my-llm",
        api_key=None,
        settings={
            "endpoint_name": "e",
            "region": "us-east-1",
            "format": "falcon",
            "endpoint_kwargs": {"CustomAtributes": "x"},
        },
    )
    try:
        with pytest.raises(ProviderConfigError, match="endpoint_kwargs.CustomAtributes is not"):
            await factory.model(spec)
    finally:
        await factory.aclose()
