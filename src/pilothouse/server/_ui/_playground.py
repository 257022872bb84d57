"""The playground's pages and fragments: conversations, messages, settings, system prompt, template.

Pages are server-rendered (Jinja2); htmx swaps the fragments these routes
return. The chat's stream and the per-prompt edits are in
:mod:`pilothouse.server._ui._chat`.
"""

from __future__ import annotations

__all__ = ["router", "target_of"]

import json
from typing import Annotated, Any, cast

from fastapi import APIRouter, File, Form, Query, Request, UploadFile
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from pilothouse.api import Pilothouse, loads_json
from pilothouse.errors import (
    ConflictError,
    InvalidFieldError,
    NotFoundError,
    PilothouseError,
    StaleVersionError,
)
from pilothouse.server._ui._base import UiAdmin, UiFacade, render
from pilothouse.server._ui._code import code_samples
from pilothouse.server._ui._trace import attach_traces
from pilothouse.server._ui._versions import versions_of
from pilothouse.types import (
    ConversationSummary,
    ConversationView,
    MessageRole,
    MessageView,
    ProcessStatus,
    ToolCallStatus,
)

router = APIRouter(include_in_schema=False)

ADHOC = "INVOKE"
"""The action code of ad-hoc runs (a bare model): see ``pilothouse.api`` ``run_adhoc``."""

MODEL_KEY = "playground_model"
"""Recorded with an ad-hoc run's system message: the model code the playground chose."""

RAG_KEY = "playground_rag"
"""Recorded with an ad-hoc run's system message: the RAG toggle's collection and Q&A LLM choice."""

SLIDERS: tuple[tuple[str, str, float, float, float], ...] = (
    ("temperature", "Temperature", 0, 2, 0.05),
    ("top_p", "Top P", 0, 1, 0.01),
    ("top_k", "Top K", 0, 200, 1),
    ("max_tokens", "Max tokens", 1, 8192, 1),
    ("presence_penalty", "Presence penalty", -2, 2, 0.05),
    ("frequency_penalty", "Frequency penalty", -2, 2, 0.05),
)
"""Name, label, min, max and step of each setting the panel offers."""


def target_of(view: ConversationView) -> str:
    """The target id a conversation runs: ``agent:X``, ``action:X`` or ``model:X``."""
    if view.action_code == ADHOC:
        for message in view.messages:
            # run_adhoc records the run's record under "invoke" (the connector's name).
            record = (message.data or {}).get("invoke")
            if message.role is MessageRole.SYSTEM and isinstance(record, dict):
                model = record.get(MODEL_KEY)  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
                if isinstance(model, str):
                    return f"model:{model}"
        return "model:"
    if view.agent_code:
        return f"agent:{view.agent_code}"
    return f"action:{view.action_code}"


async def _targets(ph: Pilothouse) -> list[tuple[str, str]]:
    """Every target the playground offers: actions, agents, then bare models."""
    found = [(t.target_id, t.description) for t in await ph.query.list_targets()]
    for entry in await ph.catalog.list_entries("models", active=True):
        capabilities: Any = entry.document.get("capabilities") or []
        if "EM" in capabilities:
            continue  # an embedding model does not chat
        found.append((f"model:{entry.key}", str(entry.document.get("model_name", ""))))
    return found


async def _collections(ph: Pilothouse) -> list[dict[str, str]]:
    """The tenant's active document collections, for the RAG toggle, with their qa_model."""
    return [
        {
            "code": entry.key,
            "name": str(entry.document.get("name") or ""),
            "qa_model": str(entry.document.get("qa_model") or ""),
        }
        for entry in await ph.catalog.list_entries("document_collections", active=True)
    ]


def _rag_of(message: MessageView, record: dict[str, Any] | None) -> dict[str, Any] | None:
    """What the RAG toggle chose for a prompt: from its ad-hoc run's record or its own data."""
    if record is not None and isinstance(record.get(RAG_KEY), dict):
        rag = cast("dict[str, Any]", record[RAG_KEY])
        return {
            "collections": [str(rag.get("collection"))],
            "answer_with": str(rag.get("answer_with")),
            "model": str(record.get(MODEL_KEY) or ""),
        }
    asked: Any = (message.data or {}).get("retrieval")
    if isinstance(asked, dict):
        codes: Any = cast("dict[str, Any]", asked).get("collections") or []
        return {
            "collections": [str(c) for c in cast("list[Any]", codes)],
            "answer_with": "playground",
            "model": "",
        }
    return None


def _exchanges(view: ConversationView) -> list[dict[str, Any]]:
    """The messages grouped as the chat shows them: each prompt with what followed it."""
    calls = {c.call_id: c for c in view.tool_calls}
    pending = view.status is ProcessStatus.WAITING
    groups: list[dict[str, Any]] = []
    current: dict[str, Any] = {"prompt": None, "items": []}
    record: dict[str, Any] | None = None
    shown_prompt: str | None = None
    for message in view.messages:
        if message.role is MessageRole.SYSTEM and message.content == shown_prompt:
            # The same system prompt recorded again (a fork's copy and its next turn, a
            # restart, each ad-hoc run): shown once, until it changes.
            invoked_again: Any = (message.data or {}).get("invoke")
            if isinstance(invoked_again, dict):
                record = cast("dict[str, Any]", invoked_again)
            continue
        if message.role is MessageRole.SYSTEM:
            shown_prompt = message.content
        if message.role is MessageRole.USER:
            if current["prompt"] is not None or current["items"]:
                groups.append(current)
            current = {"prompt": message, "items": [], "rag": _rag_of(message, record)}
            record = None
            continue
        invoked: Any = (message.data or {}).get("invoke")
        if message.role is MessageRole.SYSTEM and isinstance(invoked, dict):
            # An ad-hoc run records its run (and the RAG choice) just before its prompt.
            record = cast("dict[str, Any]", invoked)
        item: dict[str, Any] = {"message": message, "calls": []}
        tool_calls = (message.data or {}).get("tool_calls")
        if message.role is MessageRole.ASSISTANT and isinstance(tool_calls, list):
            for call in tool_calls:  # pyright: ignore[reportUnknownVariableType]
                call_id = call.get("id") if isinstance(call, dict) else None  # pyright: ignore[reportUnknownMemberType, reportUnknownVariableType]
                if isinstance(call_id, str) and call_id in calls:
                    item["calls"].append(calls[call_id])
        if message.role is MessageRole.QUESTION:
            item["open"] = pending and message.sequence > _last_answer(view)
        current["items"].append(item)
    if current["prompt"] is not None or current["items"]:
        groups.append(current)
    return groups


def _last_answer(view: ConversationView) -> int:
    answered = [m.sequence for m in view.messages if m.role is MessageRole.TOOL]
    return max(answered, default=-1)


def _returned(view: ConversationView) -> list[Any]:
    """Custom-schema tool calls waiting for the caller's result."""
    return [c for c in view.tool_calls if c.status is ToolCallStatus.RETURNED]


async def _attach_code(
    ph: Pilothouse, base_url: str, target: str, groups: list[dict[str, Any]]
) -> None:
    """Give each prompt its "View code" samples (the same call from a program)."""
    action = model = None
    if not target.startswith("model:"):
        found = await ph.query.find_target(target)
        if found is not None:
            action = found.action_code
            try:
                model = str((await ph.catalog.get("actions", action)).document.get("model") or "")
            except NotFoundError:
                model = None
    for group in groups:
        prompt: MessageView | None = group.get("prompt")
        if prompt is None:
            continue
        values: Any = (prompt.data or {}).get("input_data")
        group["code"] = code_samples(
            base_url,
            target,
            prompt.content,
            cast("dict[str, Any]", values) if isinstance(values, dict) else None,
            action=action,
            model=model or None,
        )


async def _chat_context(ph: Pilothouse, uuid: str, base_url: str) -> dict[str, Any]:
    view = await ph.query.get_transcript(uuid)
    summary = await ph.history.get(uuid)
    versions = await versions_of(ph, summary)
    exchanges = _exchanges(view)
    attach_traces(view, exchanges)
    await _attach_code(ph, base_url, target_of(view), exchanges)
    return {
        "view": view,
        "summary": summary,
        "versions": versions,
        "version": next(i for i, v in enumerate(versions) if v.uuid == uuid),
        "exchanges": exchanges,
        "returned": _returned(view),
        "target": target_of(view),
    }


@router.get("/playground")
async def playground(
    request: Request,
    user: UiFacade,
    c: Annotated[str | None, Query(max_length=36)] = None,
    target: Annotated[str | None, Query(max_length=80)] = None,
) -> HTMLResponse:
    """The playground page: conversations, the chat, the settings panel."""
    ph = user.ph
    targets = await _targets(ph)
    chat: dict[str, Any] = {}
    if c:
        try:
            chat = await _chat_context(ph, c, str(request.base_url))
        except NotFoundError:
            chat = {}
    collections = await _collections(ph)
    chosen = target or chat.pop("target", None) or (targets[0][0] if targets else "")
    chat.pop("target", None)
    return render(
        request,
        "playground.html",
        user=user,
        targets=targets,
        target=chosen,
        conversations=await ph.history.list_conversations(),
        current=c if chat else None,
        collections=collections,
        qa_models={c["code"]: c["qa_model"] for c in collections},
        **chat,
    )


@router.get("/ui/conversations")
async def conversation_list(
    request: Request,
    user: UiFacade,
    c: Annotated[str | None, Query(max_length=36)] = None,
    q: Annotated[str, Query(max_length=200)] = "",
) -> HTMLResponse:
    """The navigation panel's list of conversations (a fragment); ``q`` searches titles and text."""
    return render(
        request,
        "_conversations.html",
        conversations=await user.ph.history.list_conversations(search=q or None),
        current=c,
        search=q,
    )


@router.get("/ui/conversations/{uuid}")
async def chat_fragment(request: Request, user: UiFacade, uuid: str) -> HTMLResponse:
    """One conversation's messages, questions and returned tool calls (a fragment)."""
    return render(
        request, "_chat.html", **await _chat_context(user.ph, uuid, str(request.base_url))
    )


@router.post("/ui/conversations/{uuid}/rename")
async def rename(
    request: Request, user: UiFacade, uuid: str, title: Annotated[str, Form(max_length=400)]
) -> HTMLResponse:
    """Rename a conversation; answers the refreshed list."""
    await user.ph.history.rename(uuid, title)
    return await conversation_list(request, user, uuid)


@router.post("/ui/conversations/{uuid}/delete")
async def delete(request: Request, user: UiFacade, uuid: str) -> HTMLResponse:
    """Delete a conversation from the list: it is hidden (audited), never erased."""
    await user.ph.history.hide(uuid, reason="deleted in the playground")
    return await conversation_list(request, user, None)


@router.get("/ui/conversations/{uuid}/export")
async def export(user: UiFacade, uuid: str) -> Response:
    """The conversation as a JSON file to download."""
    document = await user.ph.history.export(uuid)
    return Response(
        json.dumps(document, indent=2, ensure_ascii=False),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="conversation-{uuid}.json"'},
    )


@router.post("/ui/conversations/import")
async def import_conversation(
    request: Request, user: UiFacade, file: Annotated[UploadFile, File()]
) -> Response:
    """Import an exported conversation; opens it."""
    raw = await file.read()
    try:
        document: Any = loads_json(raw.decode("utf-8"), check=False)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return render(
            request,
            "_notice.html",
            status_code=422,
            error="The file is not a JSON export of a conversation.",
        )
    if not isinstance(document, dict):
        return render(request, "_notice.html", status_code=422, error="format: must be an object")
    try:
        imported = await user.ph.history.import_conversation(document)  # pyright: ignore[reportUnknownArgumentType]
    except (InvalidFieldError, NotFoundError) as exc:
        return render(request, "_notice.html", status_code=422, error=str(exc))
    location = f"/playground?c={imported.uuid}"
    if request.headers.get("hx-request"):
        return Response(status_code=204, headers={"HX-Redirect": location})
    return RedirectResponse(location, status_code=303)


@router.get("/ui/conversations/{uuid}/timeline")
async def timeline(request: Request, user: UiFacade, uuid: str) -> HTMLResponse:
    """The audit timeline of a conversation (a fragment)."""
    view = await user.ph.query.get_transcript(uuid)
    summary: ConversationSummary = await user.ph.history.get(uuid)
    return render(request, "_timeline.html", view=view, summary=summary)


async def _configuration(ph: Pilothouse, target: str) -> tuple[str | None, dict[str, Any], int]:
    """The configuration a target's action uses: code, document, version."""
    kind, _, code = target.partition(":")
    if kind not in ("action", "agent") or not code:
        return None, {}, 0
    found = await ph.query.find_target(target)
    if found is None:
        return None, {}, 0
    action = await ph.catalog.get("actions", found.action_code)
    configuration = str(action.document["configuration"])
    entry = await ph.catalog.get("configurations", configuration)
    return configuration, entry.document, entry.version


async def _new_code(ph: Pilothouse, code: str | None) -> dict[str, Any]:
    """What "Duplicate configuration" offers: the code's length limit and a free code."""
    key_field = next(f for f in ph.catalog.form("configurations").fields if f.name == "code")
    length = key_field.max_length or 4
    if not code:
        return {"code_length": length, "suggestion": ""}
    taken = {e.key for e in await ph.catalog.list_entries("configurations")}
    for n in range(2, 100):
        candidate = f"{code[: length - len(str(n))]}{n}"
        if candidate not in taken:
            return {"code_length": length, "suggestion": candidate}
    return {"code_length": length, "suggestion": ""}


@router.get("/ui/settings")
async def settings(
    request: Request, user: UiFacade, target: Annotated[str, Query(max_length=80)] = ""
) -> HTMLResponse:
    """The settings panel for a target, loaded from its configuration (also "Reset")."""
    code, document, version = await _configuration(user.ph, target)
    return render(
        request,
        "_settings.html",
        target=target,
        configuration=code,
        document=document,
        version=version,
        sliders=SLIDERS,
        user=user,
        notice=None,
        error=None,
        **await _new_code(user.ph, code),
    )


def _options(form: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    for name, _, _, _, step in SLIDERS:
        raw = form.get(name)
        if raw is None or str(raw).strip() == "":
            continue
        try:
            value = float(str(raw))
        except ValueError:
            raise InvalidFieldError(name, "must be a number") from None
        options[name] = int(value) if step >= 1 else value
    return options


@router.post("/ui/configurations/{code}")
async def update_configuration(request: Request, user: UiAdmin, code: str) -> HTMLResponse:
    """Update configuration: write the sliders to the catalog, if still at the version read."""
    form = dict(await request.form())
    target = str(form.get("target", ""))
    notice = error = None
    try:
        current = await user.ph.catalog.get("configurations", code)
        document = {**current.document, **_options(form)}
        entry = await user.ph.catalog.update(
            "configurations",
            code,
            document,
            expected_version=int(str(form.get("version", "0"))),
            user=f"playground:{user.principal.key_prefix}",
        )
        notice = f"Configuration {code} updated (version {entry.version})."
    except StaleVersionError:
        error = (
            f"Configuration {code} was changed by someone else since you loaded it. "
            "Press Reset to load the current settings, then apply your changes again."
        )
    except (PilothouseError, ValueError) as exc:
        error = str(exc)
    code_, document_, version = await _configuration(user.ph, target)
    return render(
        request,
        "_settings.html",
        target=target,
        configuration=code_ or code,
        document=document_,
        version=version,
        sliders=SLIDERS,
        user=user,
        notice=notice,
        error=error,
        status_code=409 if error and "changed by someone" in error else 200,
        **await _new_code(user.ph, code_ or code),
    )


@router.post("/ui/configurations/{code}/duplicate")
async def duplicate_configuration(request: Request, user: UiAdmin, code: str) -> HTMLResponse:
    """Duplicate configuration: a new configuration with the sliders' values."""
    form = dict(await request.form())
    target = str(form.get("target", ""))
    new_code = str(form.get("new_code", "")).strip().upper()
    notice = error = None
    try:
        current = await user.ph.catalog.get("configurations", code)
        document = {**current.document, **_options(form), "code": new_code}
        document["name"] = f"{current.document.get('name') or code} (copy)"
        await user.ph.catalog.create(
            "configurations", document, user=f"playground:{user.principal.key_prefix}"
        )
        notice = f"Configuration {new_code} created from {code}."
    except ConflictError:
        error = f"A configuration {new_code} exists already; choose another code."
    except PilothouseError as exc:
        error = str(exc)
    code_, document_, version = await _configuration(user.ph, target)
    return render(
        request,
        "_settings.html",
        target=target,
        configuration=code_ or code,
        document=document_,
        version=version,
        sliders=SLIDERS,
        user=user,
        notice=notice,
        error=error,
        status_code=422 if error else 200,
        **await _new_code(user.ph, code_ or code),
    )


@router.get("/ui/system-prompt")
async def system_prompt(
    request: Request,
    user: UiFacade,
    target: Annotated[str, Query(max_length=80)] = "",
    instruction: Annotated[str, Query(max_length=20000)] = "",
) -> HTMLResponse:
    """The assembled system prompt of a target, read-only (placeholders shown as such)."""
    prompt = None
    error = None
    found = await user.ph.query.find_target(target) if ":" in target else None
    if found is None:
        error = "A bare model has no assembled prompt; the extra system prompt is all it gets."
    else:
        placeholders = {name: "{" + name + "}" for name in found.placeholders}
        config = {"instruction": instruction} if instruction.strip() else None
        try:
            prompt = await user.ph.history.system_prompt(
                action=found.action_code,
                agent=found.agent_code,
                input_data=placeholders,
                runtime_config=config,
            )
        except PilothouseError as exc:
            error = str(exc)
    return render(request, "_system_prompt.html", prompt=prompt, error=error)


async def _values_of(ph: Pilothouse, uuid: str | None, sequence: int | None) -> dict[str, Any]:
    """The placeholder values a recorded prompt was sent with ("Edit prompt with template")."""
    if not uuid or sequence is None:
        return {}
    for message in await ph.query.get_conversation_messages(uuid):
        if message.sequence == sequence and message.role is MessageRole.USER:
            values: Any = (message.data or {}).get("input_data") or {}
            if not isinstance(values, dict):
                return {}
            recorded = cast("dict[str, Any]", values)
            return {str(k): v for k, v in recorded.items()}
    return {}


@router.get("/ui/template")
async def template(
    request: Request,
    user: UiFacade,
    target: Annotated[str, Query(max_length=80)] = "",
    c: Annotated[str | None, Query(max_length=36)] = None,
    sequence: Annotated[int | None, Query()] = None,
) -> HTMLResponse:
    """The template loader: the action's prompt and a field per placeholder.

    With ``c`` and ``sequence`` (a recorded prompt), the fields hold the
    values that prompt was sent with.
    """
    found = await user.ph.query.find_target(target) if ":" in target else None
    if found is None:
        return render(
            request, "_template.html", action=None, error="Choose an action or an agent first."
        )
    action = await user.ph.catalog.get("actions", found.action_code)
    return render(
        request,
        "_template.html",
        action=action,
        placeholders=sorted(found.placeholders),
        values=await _values_of(user.ph, c, sequence),
        error=None,
        notice=None,
    )


@router.post("/ui/template/{code}")
async def save_template(
    request: Request,
    user: UiAdmin,
    code: str,
    prompt: Annotated[str, Form(max_length=100000)],
    version: Annotated[int, Form()],
) -> HTMLResponse:
    """Update the template on save: write the edited prompt back to the action."""
    error = notice = None
    try:
        current = await user.ph.catalog.get("actions", code)
        entry = await user.ph.catalog.update(
            "actions",
            code,
            {**current.document, "prompt": prompt},
            expected_version=version,
            user=f"playground:{user.principal.key_prefix}",
        )
        notice = f"Template of action {code} saved (version {entry.version})."
    except StaleVersionError:
        error = (
            f"Action {code} was changed by someone else since you loaded the template; "
            "load it again and reapply your edit."
        )
    except PilothouseError as exc:
        error = str(exc)
    action = await user.ph.catalog.get("actions", code)
    found = await user.ph.query.find_target(f"action:{code}")
    return render(
        request,
        "_template.html",
        action=action,
        placeholders=sorted(found.placeholders) if found else [],
        values={},
        error=error,
        notice=notice,
        status_code=409 if error and "changed by someone" in error else 200,
    )
