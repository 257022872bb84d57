"""Scorers: small typed units that judge one replayed case against what is expected.

A scorer is named by a spec string (``exact``, ``normalised``,
``json_field:name,website``, ``json_valid``, ``tool_sequence``,
``regex:^[0-9]+$``, ``cost_delta:1.5``, ``latency_delta:2``, and the two that
call a model: ``embedding:0.8`` and ``judge:MODEL``, in ``modelscorers.py``);
any object with a ``name`` and a ``score`` method of :class:`Scorer`'s shape,
plain or ``async``, plugs in beside them. What is expected is the baseline
run's result when there is one, else the dataset's recorded output and tool
calls.
"""

from __future__ import annotations

__all__ = ["Score", "Scorer", "Scored", "parse_scorer"]

import inspect
import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

import anyio
import regex

from pilothouse.errors import InvalidFieldError
from pilothouse.runtime._bounded_search import (
    REWRITE_SLOW_PATTERN,
    PatternTimeout,
    bounded_search,
    compiled,
)
from pilothouse.store._datasets import DatasetCase
from pilothouse.store._replays import CaseResult

if TYPE_CHECKING:
    from pilothouse._facade.modelscorers import ModelTools


@dataclass(frozen=True)
class Score:
    """One scorer's verdict on one case.

    Attributes:
        passed: whether the case passes.
        value: a number in [0, 1] for matches, the ratio for deltas.
        detail: why, in a few words.
        cost: what scoring this case cost (a judge's model call); zero for
            scorers that call no model.
        conversation_uuid: the conversation a judge's call was recorded in.
    """

    passed: bool
    value: float
    detail: str = ""
    cost: Decimal = Decimal(0)
    conversation_uuid: str | None = None


@dataclass(frozen=True)
class Scored:
    """What a scorer sees: the case, its replayed result and the baseline's, if any."""

    case: DatasetCase
    result: CaseResult
    baseline: CaseResult | None

    @property
    def expected_output(self) -> str | None:
        """The baseline's output, else the recorded one."""
        return self.baseline.output if self.baseline is not None else self.case.expected_output

    @property
    def expected_tools(self) -> list[str]:
        """The baseline's tool names in order, else the recorded ones."""
        if self.baseline is not None:
            return [str(c["name"]) for c in self.baseline.tool_calls]
        return [c.name for c in self.case.tool_calls]


@runtime_checkable
class Scorer(Protocol):
    """A pluggable scorer: a name for reports and a verdict per case.

    ``score`` is a plain method or a coroutine (``async def``): a scorer that
    calls a model or an embedder awaits it, and the report awaits such
    scorers' verdicts a few cases at a time.
    """

    @property
    def name(self) -> str:
        """The scorer's name in reports and thresholds."""
        ...

    def score(self, scored: Scored) -> Score | Awaitable[Score]:
        """Judge one case."""
        ...


def _normalise(text: str) -> str:
    return " ".join(text.casefold().split())


def _json(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return None


@dataclass(frozen=True)
class _TextMatch:
    name: str
    normalise: bool

    def score(self, scored: Scored) -> Score:
        expected, output = scored.expected_output, scored.result.output
        if expected is None or output is None:
            return Score(False, 0.0, "no output" if output is None else "nothing expected")
        same = _normalise(expected) == _normalise(output) if self.normalise else expected == output
        return Score(same, 1.0 if same else 0.0, "" if same else "text differs")


@dataclass(frozen=True)
class _JsonFields:
    name: str
    fields: tuple[str, ...]

    def score(self, scored: Scored) -> Score:
        expected, output = _json(scored.expected_output), _json(scored.result.output)
        if output is None:
            return Score(False, 0.0, "output is not JSON")
        if not self.fields:
            same = expected == output
            return Score(same, float(same), "" if same else "JSON differs")
        if not isinstance(expected, dict) or not isinstance(output, dict):
            return Score(False, 0.0, "not JSON objects")
        e: dict[str, Any] = expected  # pyright: ignore[reportUnknownVariableType]
        o: dict[str, Any] = output  # pyright: ignore[reportUnknownVariableType]
        equal = [f for f in self.fields if e.get(f) == o.get(f)]
        missed = [f for f in self.fields if f not in equal]
        return Score(
            not missed,
            len(equal) / len(self.fields),
            f"differs: {', '.join(missed)}" if missed else "",
        )


@dataclass(frozen=True)
class _JsonValid:
    name: str
    schema: Mapping[str, Any] | None

    def score(self, scored: Scored) -> Score:
        text = scored.result.output
        output = _json(text)
        if output is None and text != "null":
            return Score(False, 0.0, "output is not JSON")
        if self.schema is None:
            return Score(True, 1.0)
        from pilothouse.runtime._schema_patterns import schema_validator

        validator = schema_validator(self.schema)
        errors = list(validator.iter_errors(output))
        return Score(not errors, float(not errors), errors[0].message if errors else "")


@dataclass(frozen=True)
class _ToolSequence:
    name: str

    def score(self, scored: Scored) -> Score:
        expected = scored.expected_tools
        called = [str(c["name"]) for c in scored.result.tool_calls]
        same = expected == called and not scored.result.divergences
        detail = "" if same else f"expected {expected}, called {called}"
        if scored.result.divergences:
            detail += f"; {len(scored.result.divergences)} divergence(s)"
        return Score(same, float(same), detail)


@dataclass(frozen=True)
class _Regex:
    name: str
    pattern: str

    def score(self, scored: Scored) -> Score:
        # The caller's pattern runs in the server's process: one that
        # backtracks without end ("(a|aa)+$") would otherwise hold it, and
        # every tenant's turns, while it runs. Not remembered: a case's
        # detail speaks of its own output.
        output = scored.result.output
        try:
            found = output is not None and bounded_search(self.pattern, output, remember=False)
        except PatternTimeout:
            return Score(
                False,
                0.0,
                "the pattern ran past its time bound on this output; " + REWRITE_SLOW_PATTERN,
            )
        return Score(found, float(found), "" if found else "no match")


def _recorded_cost(scored: Scored) -> Decimal | None:
    if scored.baseline is not None:
        return scored.baseline.cost
    cost = scored.case.recorded.get("cost")
    return Decimal(str(cost)) if cost is not None else None


def _recorded_latency(scored: Scored) -> float | None:
    if scored.baseline is not None:
        return scored.baseline.latency_ms
    latency = scored.case.recorded.get("latency_ms")
    return float(latency) if latency is not None else None


@dataclass(frozen=True)
class _Delta:
    name: str
    limit: float
    of: Callable[[Scored], tuple[float | None, float | None]]

    def score(self, scored: Scored) -> Score:
        before, after = self.of(scored)
        if before is None or after is None:
            return Score(True, 1.0, "nothing to compare")
        if before == 0:
            ratio = 1.0 if after == 0 else float("inf")
        else:
            ratio = after / before
        passed = ratio <= self.limit
        return Score(passed, ratio, f"{before:g} -> {after:g} (x{ratio:.2f})")


def _cost_pair(scored: Scored) -> tuple[float | None, float | None]:
    before = _recorded_cost(scored)
    return (float(before) if before is not None else None, float(scored.result.cost))


def _latency_pair(scored: Scored) -> tuple[float | None, float | None]:
    after = scored.result.latency_ms
    return (_recorded_latency(scored), float(after) if after is not None else None)


def _number(spec: str, argument: str) -> float:
    try:
        value = float(argument)
    except ValueError:
        raise InvalidFieldError("scorers", f"{spec}: the limit must be a number") from None
    if value <= 0:
        raise InvalidFieldError("scorers", f"{spec}: the limit must be above 0")
    return value


SCORER_KINDS = (
    "exact",
    "normalised",
    "json_field",
    "json_valid",
    "tool_sequence",
    "regex",
    "cost_delta",
    "latency_delta",
    "embedding",
    "judge",
)
"""The built-in scorers' names."""


def parse_scorer(
    spec: str, schema: Mapping[str, Any] | None = None, models: ModelTools | None = None
) -> Scorer:
    """Return the built-in scorer a spec string names.

    Args:
        spec: ``kind`` or ``kind:argument`` (see the module's description).
        schema: the JSON schema ``json_valid`` checks outputs against.
        models: the embedder and the judge's runner (``embedding``, ``judge``).

    Raises:
        InvalidFieldError: an unknown kind or a bad argument.
    """
    from pilothouse._facade.modelscorers import model_scorer

    kind, _, argument = spec.partition(":")
    backed = model_scorer(kind, argument, spec, models)
    if backed is not None:
        return backed
    if kind == "exact" and not argument:
        return _TextMatch(spec, normalise=False)
    if kind in {"normalised", "normalized"} and not argument:
        return _TextMatch(spec, normalise=True)
    if kind == "json_field":
        fields = tuple(f.strip() for f in argument.split(",") if f.strip())
        return _JsonFields(spec, fields)
    if kind == "json_valid" and not argument:
        return _JsonValid(spec, schema)
    if kind == "tool_sequence" and not argument:
        return _ToolSequence(spec)
    if kind == "regex" and argument:
        try:
            compiled(argument)
            return _Regex(spec, argument)
        except regex.error as exc:
            raise InvalidFieldError("scorers", f"{spec}: {exc}") from None
    if kind == "cost_delta":
        return _Delta(spec, _number(spec, argument or "1"), _cost_pair)
    if kind == "latency_delta":
        return _Delta(spec, _number(spec, argument or "1"), _latency_pair)
    raise InvalidFieldError(
        "scorers", f"unknown scorer {spec!r}; the scorers are {', '.join(SCORER_KINDS)}"
    )


async def verdict(scorer: Scorer, scored: Scored) -> Score:
    """One scorer's verdict on one case, awaited when the scorer is async.

    Raises:
        TypeError: the scorer gave something other than a :class:`Score`.
    """
    given = scorer.score(scored)
    result: Score = await given if inspect.isawaitable(given) else given
    if not isinstance(result, Score):  # pyright: ignore[reportUnnecessaryIsInstance]
        # A plug-in scorer is user code: a wrong return is named, not averaged.
        raise TypeError(f"scorer {scorer.name!r} returned {type(result).__name__}, not a Score")
    return result


async def score_all(
    scorers: Sequence[Scorer], cases: Sequence[Scored], *, concurrency: int = 4
) -> dict[str, list[Score]]:
    """Every scorer's verdicts on every case, by scorer name, in case order.

    Args:
        scorers: the scorers.
        cases: what they judge.
        concurrency: how many verdicts are awaited at once (async scorers:
            judges' model calls, embeddings).
    """
    out: dict[str, list[Score | None]] = {s.name: [None] * len(cases) for s in scorers}
    limiter = anyio.CapacityLimiter(max(1, concurrency))

    async def one(scorer: Scorer, index: int) -> None:
        async with limiter:
            out[scorer.name][index] = await verdict(scorer, cases[index])

    try:
        async with anyio.create_task_group() as group:
            for scorer in scorers:
                for index in range(len(cases)):
                    group.start_soon(one, scorer, index)
    except* Exception as group_error:
        # A scorer's failure is raised as itself, as a plain loop would; the
        # group (every failed verdict) stays attached as its cause.
        raise group_error.exceptions[0] from group_error
    return {name: [v for v in verdicts if v is not None] for name, verdicts in out.items()}
