"""The evaluation page: replay runs side by side, case by case (``docs/evaluation.md``).

``/ui/evaluation`` lists the tenant's replay runs; ``/ui/evaluation/compare``
shows one run beside a baseline run of the same dataset (or beside the
recording): per-scorer pass rates, then each case's two outputs with the
words that differ marked, the tools each called, tokens, cost and latency.
Scoring here uses the scorers that call no model, so opening the page
never spends anything; judges run from the CLI, Python, REST or JSON-RPC.
Admin keys only, as the evaluation API.
"""

from __future__ import annotations

__all__ = ["router", "word_diff"]

import difflib
import re
from dataclasses import dataclass
from typing import Any

from fastapi import APIRouter, Query, Request
from fastapi.responses import HTMLResponse

from pilothouse.server._ui._base import UiAdmin, render
from pilothouse.types import CaseResult, DatasetCase, ReplayRun

router = APIRouter(include_in_schema=False)

SCORERS = ("exact", "normalised", "json_valid", "tool_sequence")
"""What the page scores by: quick, and calling no model."""

_WORDS = re.compile(r"\s+|[^\s]+")


@dataclass(frozen=True)
class Side:
    """One column of a case: a run's result, or the recording.

    Attributes:
        title: whose it is.
        segments: the output as ``(kind, text)``, kind ``same``, ``del``
            (only in the left column) or ``ins`` (only in the right one).
        tools: tool names called, in order.
        tokens: ``input + output`` tokens, or None when unknown.
        cost: the cost as text, or None.
        latency_ms: wall time, or None.
        status: ``ok``, ``failed`` (with ``error``), ``recorded`` or ``missing``.
        error: why it failed.
        divergences: tool calls the recording did not have.
    """

    title: str
    segments: list[tuple[str, str]]
    tools: list[str]
    tokens: str | None
    cost: str | None
    latency_ms: int | None
    status: str
    error: str | None = None
    divergences: int = 0


def word_diff(left: str, right: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Two texts as segments, the words only one of them has marked ``del`` / ``ins``.

    Whitespace is kept as it was, so the text reads as written.
    """
    a, b = _WORDS.findall(left), _WORDS.findall(right)
    ours: list[tuple[str, str]] = []
    theirs: list[tuple[str, str]] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            ours.append(("same", "".join(a[i1:i2])))
            theirs.append(("same", "".join(b[j1:j2])))
            continue
        if i2 > i1:
            ours.append(("del", "".join(a[i1:i2])))
        if j2 > j1:
            theirs.append(("ins", "".join(b[j1:j2])))
    return ours, theirs


def _result_side(title: str, result: CaseResult | None, segments: list[tuple[str, str]]) -> Side:
    if result is None:
        return Side(title, [], [], None, None, None, "missing")
    return Side(
        title,
        segments,
        [str(c["name"]) for c in result.tool_calls],
        f"{result.input_tokens} + {result.output_tokens}",
        str(result.cost.normalize()) if result.cost else "0",
        result.latency_ms,
        result.status,
        result.error,
        len(result.divergences),
    )


def _recorded_side(case: DatasetCase, segments: list[tuple[str, str]]) -> Side:
    recorded: dict[str, Any] = dict(case.recorded)
    tokens = (
        f"{recorded['input_tokens']} + {recorded['output_tokens']}"
        if "input_tokens" in recorded and "output_tokens" in recorded
        else None
    )
    cost = recorded.get("cost")
    latency = recorded.get("latency_ms")
    return Side(
        "recorded",
        segments,
        [c.name for c in case.tool_calls],
        tokens,
        str(cost) if cost is not None else None,
        int(latency) if latency is not None else None,
        "recorded",
    )


@router.get("/ui/evaluation")
async def runs_page(request: Request, user: UiAdmin) -> HTMLResponse:
    """The tenant's replay runs, newest first, and a form to compare two."""
    runs = await user.ph.evaluation.list_runs()
    return render(request, "evaluation.html", user=user, active="evaluation", runs=runs)


@router.get("/ui/evaluation/compare")
async def compare_page(
    request: Request,
    user: UiAdmin,
    run: str = Query(min_length=1, max_length=128),
    against: str = Query("", max_length=128),
) -> HTMLResponse:
    """A run beside a baseline run (or the recording), case by case, differences marked."""
    evaluation = user.ph.evaluation
    report = await evaluation.evaluate(run, against=against or None, scorers=SCORERS)
    right: ReplayRun = await evaluation.get_run(run)
    left = await evaluation.get_run(against) if against else None
    cases = {c.sequence: c for c in await evaluation.cases(right.dataset)}
    base = {r.sequence: r for r in left.results} if left is not None else {}
    rows: list[dict[str, Any]] = []
    for diff in report.cases:
        case = cases[diff.sequence]
        ours, theirs = word_diff(diff.expected or "", diff.output or "")
        mine = next(r for r in right.results if r.sequence == diff.sequence)
        if left is not None:
            before = _result_side(left.name, base.get(diff.sequence), ours)
        else:
            before = _recorded_side(case, ours)
        rows.append(
            {
                "diff": diff,
                "case": case,
                "left": before,
                "right": _result_side(right.name, mine, theirs),
                "changed": (diff.expected or "") != (diff.output or ""),
            }
        )
    return render(
        request,
        "evaluation_compare.html",
        user=user,
        active="evaluation",
        report=report,
        run=right,
        against=left,
        rows=rows,
        target=dict(right.target),
    )
