"""Reranking: the collection's chat model scores the fused candidates against the query.

No cross-encoder with its weights in a package could be had, so the model
that answers from a collection (its ``qa_model``) scores the candidates in
one call: each passage (cut to :data:`PASSAGE_CHARS`) gets 0-3 for how well
it answers the question, as a JSON list held to the passages' count (a
grammar on llama.cpp, JSON mode where the provider has one). The hits are
then ordered by that score, and by their fused rank among equal scores, so
a model that scores everything alike leaves the order as it was. The call
goes through the provider path every other model call takes (the model
factory, egress and override included); its time and token use are on the
result, which the turn's ``retrieval`` event records.

An answer that is not the JSON asked for fails the search with the model's
answer in the message: a collection that says it reranks never returns an
unreranked order silently.
"""

from __future__ import annotations

__all__ = ["PASSAGE_CHARS", "RERANK_PROMPT", "Reranked", "RerankError", "rerank"]

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, cast

from pilothouse.catalog._enums import ProviderKind
from pilothouse.errors import ErrorCategory
from pilothouse.knowledge._errors import KnowledgeError
from pilothouse.knowledge._types import SearchHit

if TYPE_CHECKING:
    from pilothouse.providers import ModelFactory, ModelSpec

PASSAGE_CHARS = 400
"""Characters of each candidate the model reads: enough for an answer, few for a small model."""

RERANK_PROMPT = """You judge search results for a question. Rate every numbered passage:
3 = it answers the question directly; 2 = it holds part of the answer;
1 = same topic, no answer; 0 = unrelated.
Return ONLY a JSON object {"scores": [...]}: one integer per passage, in passage order."""

_JSON_MODE = (
    ProviderKind.OPENAI,
    ProviderKind.OPENAI_COMPATIBLE,
    ProviderKind.AZURE,
    ProviderKind.OLLAMA,
)


class RerankError(KnowledgeError):
    """The reranking model's answer could not be used."""

    category = ErrorCategory.UPSTREAM


@dataclass(frozen=True)
class Reranked:
    """The hits in their new order, with what the reranking cost.

    Attributes:
        hits: every candidate, best first, ``rerank_score`` set.
        model: the model's catalog code.
        ms: wall time of the model call.
        input_tokens: tokens the model read (0 when the provider does not say).
        output_tokens: tokens it wrote.
    """

    hits: list[SearchHit]
    model: str
    ms: float
    input_tokens: int
    output_tokens: int


def schema_for(count: int) -> dict[str, Any]:
    """The answer's JSON schema: exactly ``count`` scores of 0 to 3."""
    return {
        "type": "object",
        "properties": {
            "scores": {
                "type": "array",
                "items": {"type": "integer", "enum": [0, 1, 2, 3]},
                "minItems": count,
                "maxItems": count,
            }
        },
        "required": ["scores"],
    }


def prompt_for(query: str, hits: Sequence[SearchHit]) -> str:
    """The user prompt: the question, then the passages numbered from 1."""
    blocks: list[str] = []
    for number, hit in enumerate(hits, start=1):
        text = " ".join(hit.text.split())
        if len(text) > PASSAGE_CHARS:
            text = text[:PASSAGE_CHARS] + " ..."
        where = f" ({hit.heading})" if hit.heading else ""
        blocks.append(f"[{number}]{where} {text}")
    return f"Question: {query}\n\nPassages:\n" + "\n\n".join(blocks)


def parse_scores(text: str, count: int) -> list[int]:
    """The scores in a model's answer.

    Raises:
        RerankError: not a JSON object with ``count`` scores of 0 to 3.
    """
    body = text.strip()
    fenced = re.search(r"```(?:json)?\s*(.*?)```", body, re.DOTALL)
    if fenced:
        body = fenced.group(1).strip()
    start, end = body.find("{"), body.rfind("}")
    try:
        data: Any = json.loads(body[start : end + 1]) if 0 <= start < end else None
    except json.JSONDecodeError:
        data = None
    scores: Any = cast(Mapping[str, Any], data).get("scores") if isinstance(data, dict) else None
    if (
        not isinstance(scores, list)
        or len(cast(list[Any], scores)) != count
        or not all(
            isinstance(s, int | float) and not isinstance(s, bool) and 0 <= s <= 3
            for s in cast(list[Any], scores)
        )
    ):
        raise RerankError(
            f"the reranking model's answer is not {{'scores': [{count} numbers from 0 to 3]}}: "
            f"{text[:300]!r}"
        )
    return [round(float(s)) for s in cast(list[float], scores)]


def order(hits: Sequence[SearchHit], scores: Sequence[int]) -> list[SearchHit]:
    """Hits by score, best first; equal scores keep their fused order."""
    ranked = sorted(range(len(hits)), key=lambda i: (-scores[i], i))
    return [replace(hits[i], rerank_score=float(scores[i])) for i in ranked]


async def rerank(
    models: ModelFactory,
    spec: ModelSpec,
    query: str,
    hits: Sequence[SearchHit],
    *,
    override: Any = None,
) -> Reranked:
    """Score ``hits`` against ``query`` with the model of ``spec``; reorder them.

    Args:
        models: builds the model of ``spec``.
        spec: the collection's ``qa_model``.
        query: the question.
        hits: the fused candidates, best first.
        override: a pydantic-ai model answering instead (a service built
            with one, as the run loop's ``model=``).

    Raises:
        RerankError: the model's answer is not the scores asked for.
        ProviderError: the provider failed (its category says how).
    """
    from pydantic_ai.direct import model_request
    from pydantic_ai.messages import ModelRequest, SystemPromptPart, TextPart, UserPromptPart

    from pilothouse.providers import ModelOptions
    from pilothouse.providers._errors import translate_error
    from pilothouse.providers._options import to_model_settings

    if not hits:
        return Reranked([], spec.code, 0.0, 0, 0)
    options = ModelOptions(max_tokens=16 + 4 * len(hits), temperature=0.0)
    model: Any = override or await models.model(spec, options)
    settings: dict[str, Any] = dict(to_model_settings(spec, options))
    kind = spec.provider.kind
    if kind is ProviderKind.LOCAL:
        # llama.cpp makes a grammar of the schema: a small model can then only
        # answer with exactly one score per passage.
        extra = dict(settings.get("extra_body") or {})
        extra["response_format"] = {"type": "json_object", "schema": schema_for(len(hits))}
        settings["extra_body"] = extra
    elif kind in _JSON_MODE:
        extra = dict(settings.get("extra_body") or {})
        extra["response_format"] = {"type": "json_object"}
        settings["extra_body"] = extra
    started = time.perf_counter()
    request = ModelRequest(
        parts=[SystemPromptPart(RERANK_PROMPT), UserPromptPart(prompt_for(query, hits))]
    )
    try:
        response = await model_request(model, [request], model_settings=cast("Any", settings))
    except Exception as exc:
        translated = translate_error(exc)
        if translated is None:
            raise
        raise translated from exc
    ms = 1000 * (time.perf_counter() - started)
    text = "".join(part.content for part in response.parts if isinstance(part, TextPart))
    scores = parse_scores(text, len(hits))
    return Reranked(
        order(hits, scores),
        spec.code,
        ms,
        response.usage.input_tokens,
        response.usage.output_tokens,
    )
