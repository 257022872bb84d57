"""Each turn's run trace, in words: the audit timeline split by turn and read out.

The timeline records what a turn did (status changes, model requests and
responses with tokens and milliseconds, retries, retrieval hits with their
scores, tool executions, answers, cancels). The chat shows, under each
prompt, the steps of the turns it started, as sentences rather than JSON,
and status names rather than codes (``completed``, not ``CO``).
"""

from __future__ import annotations

__all__ = ["attach_traces", "status_name"]

import json
from datetime import datetime
from typing import Any, cast

from pilothouse.types import ConversationView, ProcessStatus, TimelineKind

_STATUS = {s.value: s.name.lower().replace("_", " ") for s in ProcessStatus}


def status_name(code: object) -> str:
    """A conversation status as a word: ``CO`` is ``completed``; anything else as it is."""
    return _STATUS.get(str(code), str(code))


def _compact(value: object, limit: int = 300) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _pairs(data: object) -> str:
    """A mapping as ``name value, name value``: readable, not JSON."""
    if not isinstance(data, dict):
        return _compact(data)
    mapping = cast("dict[str, Any]", data)
    return ", ".join(f"{k} {_compact(v, 80)}" for k, v in mapping.items() if v not in (None, ""))


def _ms(start: datetime, end: datetime | None) -> str:
    if end is None:
        return "not finished"
    return f"{(end - start).total_seconds() * 1000:.0f} ms"


def _request(data: dict[str, Any], items: list[str]) -> dict[str, Any]:
    text = (
        f"prompt of {data.get('messages')} messages sent to {data.get('provider')} / "
        f"{data.get('model')}{' (streamed)' if data.get('stream') else ''}"
        f"{', attempt ' + str(data.get('attempt')) if data.get('attempt') else ''}"
    )
    if data.get("options"):
        items.append(f"options: {_pairs(data['options'])}")
    return {"label": "model call", "text": text, "items": items}


def _response(data: dict[str, Any], items: list[str]) -> dict[str, Any]:
    if data.get("cache") == "hit":
        return {"label": "model answer", "text": "from the cache", "items": items}
    if "advisors" in data:
        return {"label": "advisors", "text": _compact(data["advisors"]), "items": items}
    text = (
        f"{data.get('model')}: {data.get('input_tokens')} in / {data.get('output_tokens')} "
        f"out tokens in {data.get('ms')} ms"
    )
    if data.get("first_token_ms") is not None:
        text += f", first token after {data['first_token_ms']} ms"
    if data.get("finish_reason"):
        text += f", finished: {data['finish_reason']}"
    if data.get("interrupted"):
        text += " (interrupted)"
    if data.get("usage_estimated"):
        items.append("token counts estimated (the provider sent none)")
    return {"label": "model answer", "text": text, "items": items}


def _retrieval(data: dict[str, Any], items: list[str]) -> dict[str, Any]:
    text = f"{data.get('hits')} hits ({str(data.get('status', '')).replace('_', ' ')})"
    searches: Any = data.get("searches") or []
    for search in cast("list[dict[str, Any]]", searches):
        hits: Any = search.get("hits") or []
        for hit in cast("list[dict[str, Any]]", hits):
            items.append(
                f"[{hit.get('n')}] {hit.get('source')} · {search.get('collection')} · "
                f"similarity {hit.get('similarity')} · score {hit.get('score')}"
            )
    if data.get("detail"):
        items.append(str(data["detail"]))
    return {"label": "retrieval", "text": text, "items": items}


def _tool(data: dict[str, Any], items: list[str], calls: dict[str, Any]) -> dict[str, Any]:
    call = calls.get(str(data.get("call_id")))
    text = f"{data.get('tool')}"
    if data.get("status"):
        text += f": {data['status']}"
    if call is not None:
        text += f" ({call.status.value}, {_ms(call.created_at, call.finished_at)})"
        items.append(f"arguments: {_compact(call.arguments)}")
        if call.result is not None:
            items.append(f"result: {_compact(call.result)}")
    return {"label": "tool call", "text": text, "items": items}


def _sentence(kind: TimelineKind, data: dict[str, Any]) -> tuple[str, str]:
    """The label and sentence of the events that need no detail lines."""
    if kind is TimelineKind.STATUS_CHANGE:
        return "status", f"{status_name(data.get('from'))} → {status_name(data.get('to'))}"
    if kind is TimelineKind.RETRY:
        return "retry", f"attempt {data.get('attempt')} after {data.get('delay')} s"
    if kind is TimelineKind.HUMAN_ANSWER:
        return "answer", _pairs(data.get("answers"))
    if kind is TimelineKind.ERROR:
        return "error", _compact(data.get("detail") or data.get("output_errors") or data)
    if kind is TimelineKind.CANCEL:
        return "cancel", f"stopped; {data.get('partial_chars', 0)} characters of the answer kept"
    if kind is TimelineKind.RENAME:
        return "rename", f"titled “{data.get('title')}”"
    return kind.value.replace("_", " "), _pairs(data)


def _step(kind: TimelineKind, data: dict[str, Any], calls: dict[str, Any]) -> dict[str, Any]:
    """One timeline event as a trace step: a label, a sentence, and detail lines."""
    items: list[str] = []
    if kind is TimelineKind.REQUEST:
        return _request(data, items)
    if kind is TimelineKind.RESPONSE:
        return _response(data, items)
    if kind is TimelineKind.RETRIEVAL:
        return _retrieval(data, items)
    if kind is TimelineKind.TOOL_EXECUTION:
        return _tool(data, items, calls)
    label, text = _sentence(kind, data)
    return {"label": label, "text": text, "items": items}


def attach_traces(view: ConversationView, groups: list[dict[str, Any]]) -> None:
    """Give each chat group (a prompt and what followed) the steps of the turns it started.

    The timeline is cut where a turn starts running; each run belongs to the
    last prompt written before the run's last step (a resumed turn, after an
    answer, stays with its prompt).
    """
    calls = {c.call_id: c for c in view.tool_calls}
    runs: list[list[Any]] = []
    for event in view.timeline:
        starts = event.kind is TimelineKind.STATUS_CHANGE and event.data.get("to") == "RU"
        if starts or not runs:
            runs.append([])
        runs[-1].append(event)
    prompts = [(i, g["prompt"].created_at) for i, g in enumerate(groups) if g.get("prompt")]
    for group in groups:
        group["trace"] = []
    if not groups:
        return
    for run in runs:
        last = run[-1].created_at
        owner = next((i for i, at in reversed(prompts) if at <= last), 0)
        groups[owner]["trace"].extend(_step(e.kind, e.data, calls) for e in run)
