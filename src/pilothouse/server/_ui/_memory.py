"""The memory page: what the tenant remembers about one user, for admins.

``/memory?user=<id>`` browses the user's memory (scope ``user``), newest
first, a page at a time; each record can be edited or forgotten. The user's
whole record (conversations, memory in every scope, jobs, erasures) exports
as one JSON file, and *Erase user* deletes it as ``ph.memory.erase_user``
does, the erasure recorded. Every route needs an admin key and acts on the
key's tenant only.
"""

from __future__ import annotations

__all__ = ["router"]

import json
import re
from typing import Annotated, Any

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, Response

from pilothouse.errors import InvalidFieldError, NotFoundError
from pilothouse.server._ui._base import UiAdmin, UiUser, render
from pilothouse.types import MemoryScope

router = APIRouter(include_in_schema=False)

PAGE = 20
"""Records shown at a time."""


def _scope(user_id: str) -> MemoryScope:
    return MemoryScope("user", user_id=user_id)


async def _records(
    request: Request,
    user: UiUser,
    user_id: str,
    offset: int,
    *,
    notice: str | None = None,
    error: str | None = None,
    status_code: int = 200,
) -> HTMLResponse:
    found = await user.ph.memory.list(_scope(user_id), limit=PAGE + 1, offset=offset)
    return render(
        request,
        "_memory_records.html",
        status_code=status_code,
        user_id=user_id,
        records=found[:PAGE],
        offset=offset,
        more=len(found) > PAGE,
        page=PAGE,
        notice=notice,
        error=error,
    )


@router.get("/memory")
async def memory_page(
    request: Request,
    user: UiAdmin,
    user_id: Annotated[str, Query(alias="user", max_length=128)] = "",
) -> HTMLResponse:
    """The memory page; with ``user``, that user's memory."""
    records: Any = None
    found: list[Any] = []
    if user_id.strip():
        found = await user.ph.memory.list(_scope(user_id), limit=PAGE + 1)
        records = found[:PAGE]
    return render(
        request,
        "memory.html",
        user=user,
        user_id=user_id,
        records=records,
        offset=0,
        more=len(found) > PAGE,
        page=PAGE,
        notice=None,
        error=None,
    )


@router.get("/ui/memory/{user_id}/records")
async def records(
    request: Request, user: UiAdmin, user_id: str, offset: Annotated[int, Query(ge=0)] = 0
) -> HTMLResponse:
    """A page of the user's memory (a fragment)."""
    return await _records(request, user, user_id, offset)


@router.post("/ui/memory/{user_id}/records/{memory_id}")
async def edit(
    request: Request,
    user: UiAdmin,
    user_id: str,
    memory_id: str,
    content: Annotated[str, Form(max_length=8000)],
    importance: Annotated[str, Form(max_length=20)] = "",
    offset: Annotated[int, Form(ge=0)] = 0,
) -> HTMLResponse:
    """Save an edited record; the list again, with what happened."""
    try:
        value = float(importance) if importance.strip() else None
    except ValueError:
        raise InvalidFieldError("importance", "must be a number from 0 to 1") from None
    try:
        item = await user.ph.memory.edit(
            memory_id, _scope(user_id), content=content, importance=value
        )
    except (InvalidFieldError, NotFoundError) as exc:
        status = 404 if isinstance(exc, NotFoundError) else 422
        return await _records(request, user, user_id, offset, error=str(exc), status_code=status)
    return await _records(request, user, user_id, offset, notice=f"Saved “{item.content[:60]}”")


@router.post("/ui/memory/{user_id}/records/{memory_id}/forget")
async def forget(
    request: Request,
    user: UiAdmin,
    user_id: str,
    memory_id: str,
    offset: Annotated[int, Form(ge=0)] = 0,
) -> HTMLResponse:
    """Forget one record; the list again."""
    await user.ph.memory.forget(memory_id, _scope(user_id))
    return await _records(request, user, user_id, offset, notice="Forgotten.")


@router.get("/ui/memory/{user_id}/export")
async def export(user: UiAdmin, user_id: str) -> Response:
    """Everything kept about the user, as a JSON file to download."""
    document = await user.ph.memory.export_user(user_id)
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", user_id)[:60]
    return Response(
        json.dumps(document, indent=2, ensure_ascii=False, default=str),
        media_type="application/json",
        headers={"Content-Disposition": f'attachment; filename="user-{safe}.json"'},
    )


@router.post("/ui/memory/{user_id}/erase")
async def erase(
    request: Request,
    user: UiAdmin,
    user_id: str,
    confirm: Annotated[str, Form(max_length=128)],
    reason: Annotated[str, Form(max_length=512)] = "",
) -> HTMLResponse:
    """Erase everything about the user, once their id is typed again; the empty list after."""
    if confirm != user_id:
        return await _records(
            request,
            user,
            user_id,
            0,
            error=f"Type the user id “{user_id}” to confirm the erasure; nothing was erased.",
            status_code=422,
        )
    report = await user.ph.memory.erase_user(
        user_id, reason=reason, requested_by=f"ui:{user.principal.key_prefix}"
    )
    return await _records(
        request,
        user,
        user_id,
        0,
        notice=(
            f"Erased: {report.records} memory records, {report.versions} earlier values, "
            f"{report.jobs} extraction jobs; {report.conversations} conversations cut loose "
            f"from their chat memory (erasure {report.erasure_id})."
        ),
    )
