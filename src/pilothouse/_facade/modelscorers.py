"""The scorers that call a model: embedding similarity and an LLM judge with a rubric.

``embedding`` (or ``embedding:0.85``) embeds the expected and the replayed
output with the packaged all-MiniLM-L6-v2 (the embedder knowledge uses) and
passes when their cosine similarity reaches the minimum (0.8 by default).

``judge:MODEL`` asks a catalog model of the tenant to grade the replayed
output against a rubric, as an ad-hoc run: each verdict is a recorded,
audited and priced turn (face ``replay``, so it never enters a dataset),
and its cost is the score's. The model answers ``{"passed", "score",
"reason"}`` under a JSON schema; a turn that fails is a failed verdict that
says why.
"""

from __future__ import annotations

__all__ = ["DEFAULT_RUBRIC", "JUDGE_SCHEMA", "EmbeddingSimilarity", "LlmJudge", "ModelTools"]

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, cast

from pilothouse._facade.scorers import Score, Scored
from pilothouse.errors import InvalidFieldError

if TYPE_CHECKING:
    from pilothouse.types import AdHocResult, AdHocRun

DEFAULT_RUBRIC = (
    "The answer is correct and complete for the request, states nothing the expected "
    "answer contradicts, and follows the format the expected answer has."
)
"""What a judge grades by when no rubric is given."""

JUDGE_SCHEMA: Mapping[str, Any] = {
    "type": "object",
    "properties": {
        "reason": {"type": "string"},
        "score": {"type": "number", "minimum": 0, "maximum": 1},
        "passed": {"type": "boolean"},
    },
    "required": ["reason", "score", "passed"],
    "additionalProperties": False,
}
"""The verdict a judge's model must answer with (reason first: it grades after explaining)."""

_INSTRUCTION = (
    "You grade one answer of an AI assistant against a rubric. You are given the "
    "request, the expected answer (a reference, not the only right wording) and the "
    "answer to grade. Explain briefly in reason, then give score from 0 (fails the "
    "rubric) to 1 (meets it fully) and passed (true when it meets the rubric).\n\n"
    "Rubric: {rubric}"
)

Embed = Callable[[Sequence[str]], Awaitable[Sequence[Sequence[float]]]]
"""Embeds texts as unit vectors, one per text, in order."""

Ask = Callable[["AdHocRun"], Awaitable["AdHocResult"]]
"""Runs one ad-hoc turn (the evaluation facade's command half)."""


@dataclass(frozen=True)
class ModelTools:
    """What the model-backed scorers call, given by the evaluation facade.

    Attributes:
        embed: the packaged embedder, or None where it cannot load.
        ask: runs a judge's ad-hoc turn.
        rubric: the judges' rubric (None: :data:`DEFAULT_RUBRIC`).
    """

    embed: Embed | None
    ask: Ask | None
    rubric: str | None = None


@dataclass(frozen=True)
class EmbeddingSimilarity:
    """Passes when the output means what the expected output means (cosine similarity)."""

    name: str
    minimum: float
    embed: Embed

    async def score(self, scored: Scored) -> Score:
        """Embed both outputs and compare them."""
        expected, output = scored.expected_output, scored.result.output
        if expected is None or output is None:
            return Score(False, 0.0, "no output" if output is None else "nothing expected")
        left, right = await self.embed([expected, output])
        # Unit vectors: the dot product is the cosine similarity.
        dot = float(sum(a * b for a, b in zip(left, right, strict=True)))
        similarity = max(-1.0, min(1.0, dot))
        passed = similarity >= self.minimum
        return Score(passed, similarity, f"similarity {similarity:.3f} (minimum {self.minimum:g})")


@dataclass(frozen=True)
class LlmJudge:
    """Asks a catalog model to grade the output against a rubric.

    Attributes:
        name: the spec it was named by (``judge:MODEL``).
        model: the catalog model code.
        rubric: what it grades by.
        ask: runs the judge's ad-hoc turn.
    """

    name: str
    model: str
    rubric: str
    ask: Ask

    def run_for(self, scored: Scored) -> AdHocRun:
        """The ad-hoc run that grades one case."""
        from pilothouse.providers import ModelOptions
        from pilothouse.types import AdHocRun

        message = json.dumps(
            {
                "request": scored.case.input_text,
                "input_data": dict(scored.case.input_data or {}),
                "expected_answer": scored.expected_output,
                "answer_to_grade": scored.result.output,
            },
            ensure_ascii=False,
            indent=1,
        )
        return AdHocRun(
            name="an evaluation judge",
            message=message,
            model=self.model,
            instruction=_INSTRUCTION.format(rubric=self.rubric),
            options=ModelOptions(temperature=0.0, max_tokens=400),
            memory=None,
            audit=True,
            output_schema=JUDGE_SCHEMA,
            ask_user=False,
            record={"judge": self.name, "case": scored.case.sequence, "rubric": self.rubric},
        )

    async def score(self, scored: Scored) -> Score:
        """Grade one case with one recorded turn of the judge's model."""
        if scored.result.output is None:
            return Score(False, 0.0, "no output")
        answer = await self.ask(self.run_for(scored))
        turn = answer.result
        cost = Decimal(turn.cost)
        if turn.error is not None:
            return Score(False, 0.0, f"judge failed: {turn.error}", cost, answer.conversation_uuid)
        output: Any = turn.output
        if not isinstance(output, dict):
            return Score(False, 0.0, "judge gave no verdict object", cost, answer.conversation_uuid)
        fields = cast(dict[str, Any], output)
        value = fields.get("score")
        passed = fields.get("passed")
        if not isinstance(value, int | float) or not isinstance(passed, bool):
            return Score(False, 0.0, "judge's verdict lacks score or passed", cost)
        return Score(
            passed,
            max(0.0, min(1.0, float(value))),
            str(fields.get("reason", ""))[:500],
            cost,
            answer.conversation_uuid,
        )


def _minimum(spec: str, argument: str) -> float:
    try:
        value = float(argument)
    except ValueError:
        raise InvalidFieldError("scorers", f"{spec}: the minimum must be a number") from None
    if not -1 <= value <= 1:
        raise InvalidFieldError("scorers", f"{spec}: the minimum similarity is between -1 and 1")
    return value


def model_scorer(
    kind: str, argument: str, spec: str, tools: ModelTools | None
) -> EmbeddingSimilarity | LlmJudge | None:
    """The model-backed scorer a spec names, or None when it names another kind.

    Raises:
        InvalidFieldError: a bad argument, or no embedder or judge here.
    """
    if kind == "embedding":
        if tools is None or tools.embed is None:
            raise InvalidFieldError(
                "scorers",
                f"{spec}: the packaged embedder is not available here "
                "(install pilothouse's knowledge extra)",
            )
        return EmbeddingSimilarity(spec, _minimum(spec, argument or "0.8"), tools.embed)
    if kind == "judge":
        if not argument:
            raise InvalidFieldError("scorers", f"{spec}: name the judge's model: judge:MODEL")
        if tools is None or tools.ask is None:
            raise InvalidFieldError("scorers", f"{spec}: a judge needs the evaluation facade")
        return LlmJudge(spec, argument, tools.rubric or DEFAULT_RUBRIC, tools.ask)
    return None
