"""An evaluation report: a replay run scored case by case, against a baseline run or the recording.

It holds per-scorer pass rates, per-case differences (output, tool calls,
tokens, cost, latency) and the checks that failed (a pass rate below its
threshold, or a regression beyond the margin), and renders as a terminal
table, Markdown or JSON.
"""

from __future__ import annotations

__all__ = ["CaseDiff", "EvalReport", "build_report"]

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from pilothouse._facade.scorers import Score, Scored, Scorer, score_all
from pilothouse.errors import InvalidFieldError
from pilothouse.store._datasets import DatasetCase
from pilothouse.store._replays import CaseResult, ReplayRun


@dataclass(frozen=True)
class CaseDiff:
    """One case of a report: the run's result beside what it is compared with.

    Attributes:
        sequence: the case's position in the dataset.
        input_text: the case's input.
        expected: the baseline's output, else the recorded one.
        output: the run's output.
        expected_tools: the tool names expected, in order.
        tools: the tool names the run called, in order.
        divergences: how many calls the recording did not have.
        tokens: ``(input, output)`` tokens of the run.
        cost: the run's cost as a decimal string.
        latency_ms: the run's latency.
        scores: each scorer's verdict, by name.
    """

    sequence: int
    input_text: str
    expected: str | None
    output: str | None
    expected_tools: tuple[str, ...]
    tools: tuple[str, ...]
    divergences: int
    tokens: tuple[int, int]
    cost: str
    latency_ms: int | None
    scores: Mapping[str, Score]


@dataclass(frozen=True)
class EvalReport:
    """A run scored against a baseline (another run, or the recording).

    Attributes:
        dataset: the dataset.
        run: the run scored.
        against: the baseline run, or None for the recording.
        pass_rates: each scorer's share of passing cases in the run.
        baseline_rates: the same for the baseline run scored against the
            recording (None without a baseline run).
        cases: per-case differences.
        failures: the checks that failed (empty: the report passes).
        scoring_cost: what scoring cost (judges' model calls on the run's
            cases and, with a baseline run, on its cases too).
    """

    dataset: str
    run: str
    against: str | None
    pass_rates: Mapping[str, float]
    baseline_rates: Mapping[str, float] | None
    cases: tuple[CaseDiff, ...]
    failures: tuple[str, ...] = field(default=())
    scoring_cost: Decimal = Decimal(0)

    @property
    def passed(self) -> bool:
        """True when no threshold or margin check failed."""
        return not self.failures

    def as_json(self) -> dict[str, Any]:
        """The report as one JSON-ready object."""
        return {
            "dataset": self.dataset,
            "run": self.run,
            "against": self.against,
            "passed": self.passed,
            "pass_rates": dict(self.pass_rates),
            "baseline_rates": dict(self.baseline_rates) if self.baseline_rates else None,
            "failures": list(self.failures),
            "scoring_cost": _decimal(self.scoring_cost),
            "cases": [
                {
                    "sequence": c.sequence,
                    "input_text": c.input_text,
                    "expected": c.expected,
                    "output": c.output,
                    "expected_tools": list(c.expected_tools),
                    "tools": list(c.tools),
                    "divergences": c.divergences,
                    "input_tokens": c.tokens[0],
                    "output_tokens": c.tokens[1],
                    "cost": c.cost,
                    "latency_ms": c.latency_ms,
                    "scores": {
                        name: {
                            "passed": s.passed,
                            "value": s.value,
                            "detail": s.detail,
                            "cost": _decimal(s.cost),
                            "conversation_uuid": s.conversation_uuid,
                        }
                        for name, s in c.scores.items()
                    },
                }
                for c in self.cases
            ],
        }

    def _rate_rows(self) -> list[tuple[str, str, str]]:
        rows: list[tuple[str, str, str]] = []
        for name, rate in self.pass_rates.items():
            base = self.baseline_rates.get(name) if self.baseline_rates else None
            rows.append((name, f"{rate:.0%}", f"{base:.0%}" if base is not None else "-"))
        return rows

    def as_markdown(self) -> str:
        """The report as a Markdown page: pass rates, failures, then one row per case."""
        against = self.against or "the recording"
        lines = [
            f"# Evaluation of `{self.run}` on `{self.dataset}` against {against}",
            "",
            f"**{'PASSED' if self.passed else 'FAILED'}**",
            "",
            "| scorer | pass rate | baseline |",
            "|---|---|---|",
            *(f"| {n} | {r} | {b} |" for n, r, b in self._rate_rows()),
        ]
        if self.failures:
            lines += ["", *(f"- {f}" for f in self.failures)]
        names = list(self.pass_rates)
        lines += [
            "",
            "| case | " + " | ".join(names) + " | tools | tokens | cost | output |",
            "|---|" + "---|" * (len(names) + 4),
        ]
        for c in self.cases:
            marks = " | ".join("pass" if c.scores[n].passed else "FAIL" for n in names)
            output = (c.output or "").replace("|", "\\|").replace("\n", " ")[:80]
            lines.append(
                f"| {c.sequence} | {marks} | {' '.join(c.tools) or '-'} "
                f"| {c.tokens[0]}+{c.tokens[1]} | {c.cost} | {output} |"
            )
        return "\n".join(lines) + "\n"

    def as_table(self) -> str:
        """The pass rates and failures as plain text for a terminal."""
        rows = [("scorer", "pass rate", "baseline"), *self._rate_rows()]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        text = [
            "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip() for row in rows
        ]
        text += [f"FAILED: {f}" for f in self.failures]
        text.append(f"{len(self.cases)} cases: {'passed' if self.passed else 'failed'}")
        if self.scoring_cost:
            text.append(f"scoring cost: {_decimal(self.scoring_cost)}")
        return "\n".join(text) + "\n"


def _decimal(value: Decimal) -> str:
    return str(value.normalize()) if value else "0"


def _spent(scores: Mapping[str, Sequence[Score]]) -> Decimal:
    return sum((v.cost for verdicts in scores.values() for v in verdicts), Decimal(0))


def _rates(scores: Mapping[str, Sequence[Score]]) -> dict[str, float]:
    return {
        name: (sum(1 for v in verdicts if v.passed) / len(verdicts)) if verdicts else 0.0
        for name, verdicts in scores.items()
    }


async def build_report(
    cases: Sequence[DatasetCase],
    run: ReplayRun,
    baseline: ReplayRun | None,
    scorers: Sequence[Scorer],
    *,
    thresholds: Mapping[str, float] | None = None,
    margin: float | None = None,
    concurrency: int = 4,
) -> EvalReport:
    """Score a run's cases and check the thresholds and the margin.

    Args:
        cases: the dataset's cases.
        run: the run to score.
        baseline: the run to compare with, or None for the recording.
        scorers: the scorers.
        thresholds: the lowest pass rate each scorer may have, by name.
        margin: the most a scorer's pass rate may drop below the baseline
            run's (needs a baseline run).
        concurrency: how many verdicts of async scorers are awaited at once.

    Raises:
        InvalidFieldError: two scorers of one name, a threshold that names
            no scorer of the report, or a margin without a baseline run.
    """
    names = {s.name for s in scorers}
    if len(names) != len(scorers):
        raise InvalidFieldError("scorers", "each scorer may be named once")
    unknown = sorted(set(thresholds or {}) - names)
    if unknown:
        raise InvalidFieldError("thresholds", f"no such scorer: {', '.join(unknown)}")
    if margin is not None and baseline is None:
        raise InvalidFieldError("margin", "a margin needs a baseline run to compare with")
    by_sequence = {c.sequence: c for c in cases}
    base_results: dict[int, CaseResult] = (
        {r.sequence: r for r in baseline.results} if baseline is not None else {}
    )
    scored = [
        Scored(by_sequence[r.sequence], r, base_results.get(r.sequence))
        for r in run.results
        if r.sequence in by_sequence
    ]
    scores = await score_all(scorers, scored, concurrency=concurrency)
    rates = _rates(scores)
    spent = _spent(scores)
    baseline_rates: dict[str, float] | None = None
    if baseline is not None:
        recorded = [
            Scored(by_sequence[r.sequence], r, None)
            for r in baseline.results
            if r.sequence in by_sequence
        ]
        baseline_scores = await score_all(scorers, recorded, concurrency=concurrency)
        baseline_rates = _rates(baseline_scores)
        spent += _spent(baseline_scores)
    failures: list[str] = []
    for name, limit in (thresholds or {}).items():
        if rates[name] < limit:
            failures.append(f"{name}: pass rate {rates[name]:.0%} is below {limit:.0%}")
    if margin is not None and baseline_rates is not None:
        for name, rate in rates.items():
            if rate < baseline_rates[name] - margin:
                failures.append(
                    f"{name}: pass rate {rate:.0%} regressed from {baseline_rates[name]:.0%}"
                    f" by more than {margin:.0%}"
                )
    diffs = tuple(
        CaseDiff(
            sequence=x.result.sequence,
            input_text=x.case.input_text,
            expected=x.expected_output,
            output=x.result.output,
            expected_tools=tuple(x.expected_tools),
            tools=tuple(str(c["name"]) for c in x.result.tool_calls),
            divergences=len(x.result.divergences),
            tokens=(x.result.input_tokens, x.result.output_tokens),
            cost=str(x.result.cost.normalize()) if x.result.cost else "0",
            latency_ms=x.result.latency_ms,
            scores={name: verdicts[i] for name, verdicts in scores.items()},
        )
        for i, x in enumerate(scored)
    )
    return EvalReport(
        dataset=run.dataset,
        run=run.name,
        against=baseline.name if baseline is not None else None,
        pass_rates=rates,
        baseline_rates=baseline_rates,
        cases=diffs,
        failures=tuple(failures),
        scoring_cost=spent,
    )
